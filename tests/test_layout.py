"""The package layout and import rule stated in README.md (section Development) hold."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

PACKAGE = ROOT / "rescorer"

BASE = {"constants", "errors", "__init__"}
# unit -> the units it may import (itself included). A unit is a top-level module or sub-package.
ALLOWED: dict[str, set[str]] = {
    "constants": set(),
    "errors": set(),
    "__init__": set(),
    "io": BASE | {"io"},
    "vocab": BASE | {"io"},
    "cpus": BASE,
    "phases": BASE,
    "device": BASE | {"cpus", "io"},
    "batching": BASE,
    "verdict": BASE,
    "durations": BASE,
    "moses": BASE | {"io", "moses"},
    "job": BASE | {"io", "job"},
    "model": BASE | {"verdict", "io", "vocab", "cpus", "device", "batching", "model"},
    "train": BASE
    | {"verdict", "io", "vocab", "cpus", "device", "batching", "model", "phases", "durations"}
    | {"train"},
    "score": BASE
    | {"verdict", "io", "vocab", "cpus", "device", "batching", "model", "phases", "job"}
    | {"moses", "score"},  # moses: added_columns.same_column, moses-ini's rule (issue 64)
    "extend": BASE
    | {"verdict", "io", "vocab", "cpus", "device", "batching", "model", "moses", "job"}
    | {"score", "extend"},
    "experiments": BASE | {"verdict", "durations", "io", "moses", "job", "experiments"},
    "analysis": BASE
    | {"verdict", "io", "vocab", "cpus", "device", "batching", "model", "score", "analysis"},
    "cli": BASE
    | {"verdict", "io", "vocab", "cpus", "device", "model", "moses", "train", "job", "score"}
    | {"durations", "extend", "analysis", "cli"},
    "__main__": {"cli"},
}
# Modules that must not load torch when imported: scoring workers and Moses tools stay light.
TORCH_FREE = [
    "rescorer.io.inputs",
    "rescorer.io.outputs",
    "rescorer.io.jsonfiles",
    "rescorer.io.table",
    "rescorer.io.columns",
    "rescorer.io.reordering",
    "rescorer.io.chunks",
    "rescorer.io.gformat",
    "rescorer.io.shared",
    "rescorer.io.shm",
    "rescorer.io.check",
    "rescorer.job.shards",
    "rescorer.job.stream",
    "rescorer.job.pool",
    "rescorer.job.interrupts",
    "rescorer.job.merge",
    "rescorer.vocab",
    "rescorer.cpus",
    "rescorer.phases",
    "rescorer.durations",
    "rescorer.moses.ini",
    "rescorer.moses.ini_rewrite",
    "rescorer.moses.added_columns",
    "rescorer.moses.combine",
    "rescorer.moses.filter",
    "rescorer.moses.nbest",
    "rescorer.moses.nbest_pairs",
    "rescorer.moses.lm",
    "rescorer.moses.tokenize",
    "rescorer.score.pairs",
    "rescorer.score.config",
    "rescorer.score.stages",
    "rescorer.job.output",
    "rescorer.job.record",
    "rescorer.job.clobber",
    "rescorer.score.models",
    "rescorer.score.pipeline",
    "rescorer.job.run",
    "rescorer.job.stats",
    "rescorer.job.stream",
    "rescorer.job.work",
    "rescorer.score.plan",
    "rescorer.extend.checks",
    "rescorer.io.precision_cache",
    "rescorer.extend.config",
    "rescorer.extend.stages",
    "rescorer.extend.features",
    "rescorer.moses.lex",
    "rescorer.experiments.table1",
    "rescorer.analysis.compare",
    "rescorer.model.config",
    "rescorer.train.config",
    "rescorer.cli",
]


def unit_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def modules() -> list[tuple[str, Path]]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found.append((name, path))
    return found


def test_every_module_belongs_to_a_known_unit() -> None:
    units = {unit_of(name) for name, _ in modules() if name != "rescorer"}
    assert units <= set(ALLOWED), units - set(ALLOWED)


def test_no_module_imports_against_the_rule() -> None:
    wrong = []
    for name, path in modules():
        unit = unit_of(name)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets = []
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                targets = [node.module]
            elif isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            for target in targets:
                if target.split(".")[0] == "rescorer" and unit_of(target) not in ALLOWED[unit]:
                    wrong.append(f"{path.relative_to(ROOT)}:{node.lineno} imports {target}")
    assert not wrong, "\n".join(wrong)


@pytest.mark.slow
def test_torch_free_modules_do_not_load_torch() -> None:
    code = (
        "import importlib, sys\n"
        f"for name in {TORCH_FREE!r}: importlib.import_module(name)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'torch')[:3])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_readme_layout_names_every_sub_package() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## Development") :]
    block = section[section.index("```") + 3 :]
    block = block[: block.index("```")]
    listed = set(re.findall(r"^  ([a-z_]+)/", block, flags=re.M))
    packages = {p.parent.name for p in PACKAGE.glob("*/__init__.py")}
    assert listed == packages


def test_every_doc_citation_in_the_code_resolves() -> None:
    """A citation 'docs/NAME.md §N' names a file of docs/ and a section N it has."""
    cited = re.compile(r"docs/([a-z-]+\.md) §(\d+(?:\.\d+)?)")
    missing = []
    for path in [*PACKAGE.rglob("*.py"), *(ROOT / "scripts").glob("*.py")]:
        for name, section in cited.findall(path.read_text(encoding="utf-8")):
            doc = ROOT / "docs" / name
            headings = doc.read_text(encoding="utf-8") if doc.is_file() else ""
            if not re.search(rf"^#+ {re.escape(section)}[. ]", headings, flags=re.M):
                missing.append(f"{path.relative_to(ROOT)}: docs/{name} §{section}")
    assert not missing, "\n".join(missing)
    outside = re.compile(r"shared/research|(?:rnnenc|moses)-spec\.md|(?<!docs/)design\.md")
    dangling = [p for p in PACKAGE.rglob("*.py") if outside.search(p.read_text(encoding="utf-8"))]
    assert not dangling, dangling  # documentation a fresh clone does not have
