"""The code base stays ruff-clean (ruff.toml) and mypy-clean (setup.cfg)."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from conftest import ROOT


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("ruff") is None, reason="ruff is not installed")
def test_ruff_clean() -> None:
    proc = subprocess.run(
        ["ruff", "check", "rescorer", "scripts", "tests"], cwd=ROOT, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("mypy") is None, reason="mypy is not installed")
def test_mypy_clean() -> None:
    """The package and scripts type-check (configuration in setup.cfg; py.typed promises it)."""
    proc = subprocess.run(["mypy", "rescorer", "scripts"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_commands_in_scripts_and_docs_use_existing_options() -> None:
    """Every `rescorer CMD --flag` in the quickstart, the README and docs/ is an option of CMD
    (a renamed option broke the quickstart once)."""
    import re

    import click

    from rescorer.cli import cli

    texts = [
        ROOT / "scripts" / "quickstart.sh",
        ROOT / "README.md",
        *(ROOT / "docs").glob("*.md"),
        *(ROOT / "scripts" / "slurm").iterdir(),
    ]
    unknown = []
    for path in texts:
        text = path.read_text(encoding="utf-8").replace("\\\n", " ")
        for name, args in re.findall(r"\brescorer ([a-z-]+)(\s[^\n`|;]*)", text):
            command = cli.commands.get(name)
            if command is None:
                continue
            if isinstance(command, click.Group):  # rescorer plot scatter ...: the subcommand's
                sub, _, args = args.strip().partition(" ")
                sub = re.sub(r"[^a-z-].*", "", sub)  # scatter\|words\|phrases in a table
                command = command.commands.get(sub)
                if command is None:
                    unknown.append(f"{path.name}: rescorer {name} {sub}")
                    continue
            known = {opt for param in command.params for opt in param.opts + param.secondary_opts}
            known |= {"--help", "-h"}
            for flag in re.findall(r"(?<!\S)(--?[a-z][a-z-]*)", args):
                if flag not in known:
                    unknown.append(f"{path.name}: rescorer {name} {flag}")
    assert not unknown, "\n".join(unknown)
