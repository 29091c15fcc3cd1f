"""The documents stay usable (issue 60): every relative link of every Markdown file resolves,
every `rescorer CMD` the README shows exists, the README stays short, and the code stays in
pieces a reader can hold (no function of rescorer/ over 80 lines, no module over 400). And they
stay true (issue 64): `score-nbest` runs as the README and docs/commands.md write it, every
figure the README quotes is in the document that owns it, and `merge` examples use `-o`."""

from __future__ import annotations

import ast
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import DATA_DIR, GOLDEN, ROOT, TINY_SYSTEM

README_MAX_LINES = 300
FUNCTION_MAX_LINES = 80
MODULE_MAX_LINES = 400

FENCE = re.compile(r"^ {0,3}(```|~~~).*?^ {0,3}\1[^\n]*$", re.M | re.S)
INLINE_CODE = re.compile(r"`[^`\n]+`")
# [text](target) and ![alt](target); the target ends at whitespace or the closing parenthesis
LINK = re.compile(r"!?\[(?:[^\]\n]|\][^(\n])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s.*)?$", re.M)


def markdown_files() -> list[Path]:
    """Every *.md git knows of (tracked or new, ignored files left out): what a clone holds."""
    proc = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.md"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:  # not a git checkout (an sdist): every *.md outside hidden folders
        return sorted(p for p in ROOT.rglob("*.md") if not any(s.startswith(".") for s in p.parts))
    return sorted({ROOT / line for line in proc.stdout.splitlines() if (ROOT / line).is_file()})


def prose(text: str) -> str:
    """The text without fenced code blocks and inline code, where a bracket is not a link."""
    return INLINE_CODE.sub("", FENCE.sub("", text))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its rendered text lowercased, punctuation dropped, spaces
    to hyphens (`## What `rescorer score` promises` -> what-rescorer-score-promises)."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link: its text
    text = re.sub(r"<[^>]+>", "", text).replace("`", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """The anchors of a Markdown file's headings, with GitHub's -1, -2 for repeated ones."""
    seen: dict[str, int] = {}
    found = set()
    for line in FENCE.sub("", path.read_text(encoding="utf-8")).splitlines():
        match = re.match(r"^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not match:
            continue
        base = slug(match.group(1))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def broken_links(path: Path, root: Path = ROOT) -> list[str]:
    text = prose(path.read_text(encoding="utf-8"))
    targets = LINK.findall(text) + REFERENCE.findall(text)
    broken = []
    for target in targets:
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, flags=re.I) or target.startswith("//"):
            continue  # https:, mailto: ...: not this repository's
        file_part, _, anchor = target.partition("#")
        resolved = (path.parent / file_part).resolve() if file_part else path
        where = f"{path.relative_to(root)}: ({target})"
        if not resolved.exists():
            broken.append(f"{where}: no such file")
        elif anchor and resolved.suffix == ".md" and anchor.lower() not in anchors(resolved):
            broken.append(f"{where}: no heading #{anchor} in {resolved.name}")
    return broken


def test_slug_is_githubs() -> None:
    assert slug("What `rescorer score` promises") == "what-rescorer-score-promises"
    assert slug("Does it help? The Table 1 experiment") == "does-it-help-the-table-1-experiment"
    assert slug("2026-11-27: an H100, (help's table)") == "2026-11-27-an-h100-helps-table"


def test_a_broken_link_is_found(tmp_path: Path) -> None:
    """The check itself can fail: a missing file and a missing heading are both reported."""
    doc = tmp_path / "a.md"
    (tmp_path / "b.md").write_text("# Here\n\n## There it is\n", encoding="utf-8")
    doc.write_text(
        "[ok](b.md#there-it-is) [gone](c.md) [no](b.md#nowhere) `[code](x.md)` [web](https://x)\n"
        "```\n[fenced](y.md)\n```\n",
        encoding="utf-8",
    )
    found = broken_links(doc, root=tmp_path)
    assert found == [
        "a.md: (c.md): no such file",
        "a.md: (b.md#nowhere): no heading #nowhere in b.md",
    ]


def test_every_relative_link_in_the_documents_resolves() -> None:
    files = markdown_files()
    assert ROOT / "README.md" in files
    broken = [b for path in files for b in broken_links(path)]
    assert not broken, "\n".join(broken)


def test_readme_is_at_most_300_lines() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines"


def readme_commands() -> list[str]:
    """Every CMD the README's code runs as `rescorer CMD` (inline or fenced, at the start of a
    command: a line, a span, after a pipe, `&&`, `;` or `-m`); `plot` with its subcommands."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    code = [line for m in FENCE.finditer(text) for line in m.group(0).splitlines()]
    code += [span.strip("`") for span in INLINE_CODE.findall(text)]
    command = re.compile(
        r"(?:^\s*|&&\s*|\|\s*|;\s*|\$\(|-m\s+)rescorer ([a-z][a-z-]*)(?: ([a-z][a-z|\\-]*))?"
    )
    found = set()
    for line in code:
        for name, sub in command.findall(line):
            if name == "plot" and sub:
                found |= {f"plot {s}" for s in re.split(r"\\?\|", sub) if s}
            found.add(name)
    return sorted(found)


def test_the_readme_shows_the_commands() -> None:
    assert {"train", "score", "moses-ini", "extend"} <= set(readme_commands())


@pytest.mark.slow
@pytest.mark.parametrize("command", readme_commands())
def test_every_command_the_readme_shows_exists(command: str) -> None:
    """`rescorer CMD --help` exits 0 for each, in a process of its own with this checkout's
    package (a renamed or dropped command leaves the README promising one that is gone)."""
    path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path}
    proc = subprocess.run(
        [sys.executable, "-m", "rescorer", *command.split(), "--help"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, f"rescorer {command} --help: exit {proc.returncode}\n{proc.stderr}"


def oversized() -> list[str]:
    """Every function of rescorer/ over 80 lines (its def to its last line) and module over 400."""
    found = []
    for path in sorted((ROOT / "rescorer").rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        name = path.relative_to(ROOT)
        if len(text.splitlines()) > MODULE_MAX_LINES:
            found.append(f"{name}: {len(text.splitlines())} lines (module)")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > FUNCTION_MAX_LINES:
                    found.append(f"{name}:{node.lineno}: {node.name} is {length} lines")
    return found


def test_no_function_over_80_lines_and_no_module_over_400() -> None:
    found = oversized()
    assert not found, "\n".join(found)


# ------------------------------------------------------------ score-nbest as the documents write it
# The names the documents' score-nbest examples use, and the real files that stand for them: a
# 10-best list Moses decoded with -include-segmentation-in-n-best from tiny-system's table
# (tests/data/README.md), its source sentences, that table, and a committed model.
NBEST_FILES = {
    **dict.fromkeys(["NBEST", "dev.nbest"], DATA_DIR / "nbest" / "tiny.test6.nbest-seg"),
    **dict.fromkeys(["SRC", "dev.en"], DATA_DIR / "nbest" / "tiny.test6.en"),
    **dict.fromkeys(["TABLE", "model/phrase-table.gz"], TINY_SYSTEM / "phrase-table.gz"),
    **dict.fromkeys(["DIR", "rnn-model/"], GOLDEN / "model"),
}
NBEST_OUTPUTS = {"OUT", "dev.rnn.nbest"}
NBEST_DOCS = ["README.md", "docs/commands.md"]


def code_lines(path: Path) -> list[str]:
    """The document's code: each line of its fenced blocks (continuations joined) and each
    inline span."""
    text = path.read_text(encoding="utf-8")
    fenced = [m.group(0).replace("\\\n", " ") for m in FENCE.finditer(text)]
    return [line for block in fenced for line in block.splitlines()] + [
        span.strip("`") for span in INLINE_CODE.findall(text)
    ]


@pytest.mark.parametrize("doc", NBEST_DOCS)
def test_score_nbest_runs_as_the_documents_write_it(doc: str, tmp_path: Path) -> None:
    """Each `rescorer score-nbest ...` the document shows runs on a real n-best list, its
    placeholders replaced by real files, and writes the feature (issue 64: the README's form
    lacked --phrase-table and failed with a usage error)."""
    from rescorer.cli import cli

    pattern = re.compile(r"rescorer score-nbest [^`|;&]*")
    forms = [f for line in code_lines(ROOT / doc) for f in pattern.findall(line)]
    assert forms, f"{doc} shows no rescorer score-nbest"
    out = tmp_path / "out.nbest"
    for form in forms:
        args = []
        for word in shlex.split(form)[1:]:
            if word.startswith("-") or word == "score-nbest":
                args.append(word)
            elif word in NBEST_OUTPUTS:
                args.append(str(out))
            else:
                assert word in NBEST_FILES, f"{doc}: {form}: no test file stands for {word!r}"
                args.append(str(NBEST_FILES[word]))
        result = CliRunner().invoke(cli, [*args, "--device", "cpu", "-q"])
        assert result.exit_code == 0, f"{doc}: {form}\n{result.output}"
        lines = out.read_text(encoding="utf-8").splitlines()
        assert len(lines) == 45 and all(" RNN0= " in line for line in lines)


@pytest.mark.parametrize("doc", NBEST_DOCS)
def test_the_documents_say_how_to_decode_for_score_nbest(doc: str) -> None:
    """score-nbest refuses a list without Moses' segmentation: the document's decoder command
    asks for it."""
    decoding = [line for line in code_lines(ROOT / doc) if "-n-best-list" in line]
    assert decoding, f"{doc} shows no moses -n-best-list command"
    assert all("-include-segmentation-in-n-best" in line for line in decoding), decoding


# ----------------------------------------------------- every figure the README quotes, owned once
# Each part of the README that quotes measurements, and the one document that owns them: a
# figure quoted there must be in its owner (which names the dated sitting it comes from).
FIGURE_OWNERS = {
    "## Does it help?": "EXPERIMENTS.md",
    "## Speed": "BENCHMARKS.md",
    "- **How long to train.**": "docs/training.md",
}
# A figure: a number with its sign (+0.12, -0.05, ±0.9), thousands commas, decimals and a unit of
# x or % (1.81x, 56%); not part of a word (H100, fp32) or a date.
FIGURE = re.compile(r"(?<![\w.,+\-±])[+\-±]?\d+(?:,\d{3})*(?:\.\d+)?(?:x|%)?(?!\w|[.,]\d)")
DATE = re.compile(r"\b\d{4}-\d{2}-\d{2}\b")


def readme_part(text: str, start: str) -> str:
    """The README's section (from its heading to the next) or bullet (to the next bullet, heading
    or blank line) that begins with ``start``."""
    at = text.index(start)
    if start.startswith("#"):
        end = re.compile(r"^## ", re.M).search(text, at + len(start))
    else:
        end = re.compile(r"^(?:- |#|$)", re.M).search(text, at + len(start))
    return text[at : end.start() if end else len(text)]


def quoted_figures(part: str) -> list[str]:
    """The figures of a part of the README: its prose, without link targets, code or dates."""
    part = re.sub(r"\]\([^)]*\)", "]", prose(part))
    return FIGURE.findall(DATE.sub("", part))


def has_figure(text: str, figure: str) -> bool:
    return re.search(r"(?<![\d.,+\-±])" + re.escape(figure) + r"(?!\d|[.,]\d)", text) is not None


def test_figures_are_found_as_figures() -> None:
    part = "moved it by -0.05 to +0.09 ([2026-11-27](docs/x.md)), on an H100 at 4,927 pairs/s, 1.8x"
    assert quoted_figures(part) == ["-0.05", "+0.09", "4,927", "1.8x"]
    assert has_figure("from -0.05 to +0.09.", "+0.09") and not has_figure("+0.095", "+0.09")
    assert not has_figure("0.09", "+0.09") and not has_figure("1,342", "342")


@pytest.mark.parametrize("start", sorted(FIGURE_OWNERS))
def test_every_figure_the_readme_quotes_is_in_its_owner(start: str) -> None:
    """A figure quoted in two places drifts (issue 64: the README's +0.09 was in no table of
    EXPERIMENTS.md): each one the README quotes must be in the document that owns it."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    owner = FIGURE_OWNERS[start]
    text = (ROOT / owner).read_text(encoding="utf-8")
    figures = quoted_figures(readme_part(readme, start))
    assert figures, f"no figure in the README's {start!r}"
    missing = sorted({f for f in figures if not has_figure(text, f)})
    assert not missing, f"the README's {start!r} quotes {missing}, which {owner} does not have"


def mert_comparisons(folders: tuple[str, ...]) -> list[dict[str, float]]:
    """Every MERT comparison of a system with its baseline in side-by-side.md (the rows the
    committed results.json files give), in the given work folders: its delta, its interval's
    upper end and what it could see. Batch MIRA's rows and the (f)-against-(b) rows are left out."""
    path = ROOT / "docs" / "results" / "table1-3rd" / "side-by-side.md"
    found, system = [], ""
    for line in path.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 11 or cells[0].startswith("↳"):
            continue  # not a row of the table, or (f) against (b)
        system = cells[0] or system  # a blank first cell: the system above, in another folder
        if cells[2] not in folders or system.startswith("(a)") or "MIRA" in system:
            continue
        upper = float(cells[6].rstrip("†").strip("[]").split(",")[1])
        found.append({"delta": float(cells[5]), "upper": upper, "see": float(cells[7])})
    return found


def span(values: list[float]) -> str:
    return f"{min(values):+.2f} to {max(values):+.2f}"


def test_experiments_ranges_are_side_by_sides() -> None:
    """EXPERIMENTS.md's ranges are those of the comparisons it names in side-by-side.md (issue
    64: en-fr's "could see" was given as four different ranges)."""
    text = " ".join((ROOT / "EXPERIMENTS.md").read_text(encoding="utf-8").split())
    help_ = mert_comparisons(("help",))
    en_fr = mert_comparisons(("en-fr (2nd edition)", "en-fr (f)"))
    assert (len(help_), len(en_fr)) == (7, 8)
    assert "seven MERT comparisons" in text and "eight MERT comparisons" in text
    assert f"moved it by {span([c['delta'] for c in help_])}" in text
    assert f"could have seen a true gain of {span([c['see'] for c in help_])}" in text
    assert max(c["upper"] for c in help_) < 0.33 and "no interval reaches +0.33" in text
    assert f"could only have seen {span([c['see'] for c in en_fr])}" in text


# ----------------------------------------------------------------------- merge as it is written now
def test_merge_examples_name_their_output_with_o() -> None:
    """Every `rescorer merge` in the documents' code blocks gives its output with -o (issue 64:
    the Slurm README still showed the older `merge OUT PART...`)."""
    old = []
    for path in markdown_files():
        text = path.read_text(encoding="utf-8")
        for block in FENCE.finditer(text):
            for line in block.group(0).replace("\\\n", " ").splitlines():
                for form in re.findall(r"rescorer merge\b[^|;&]*", line):
                    if not re.search(r"(?<!\S)(?:-o|--output)(?:\s|=)", form):
                        old.append(f"{path.relative_to(ROOT)}: {form.strip()}")
    assert not old, "\n".join(old)
