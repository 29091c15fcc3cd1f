"""The code base stays ruff-clean (ruff.toml) and mypy-clean (setup.cfg)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import click
import pytest
from conftest import DEV13_NBEST, REAL_INI, ROOT, SLICE, TINY_SYSTEM, TINY_TRAIN_FLAGS


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
            for flag in re.findall(r"(?<!\S)(--?[a-z][a-z0-9-]*)", args):
                if flag not in known:
                    unknown.append(f"{path.name}: rescorer {name} {flag}")
    assert not unknown, "\n".join(unknown)


# ------------------------------------------------------------------ the command line's rules
def _commands() -> list[tuple[str, click.Command]]:
    """Every command, the plot subcommands included, by its name (``plot words``)."""
    from rescorer.cli import cli

    found = []
    for name, command in sorted(cli.commands.items()):
        if isinstance(command, click.Group):
            found += [(f"{name} {sub}", c) for sub, c in sorted(command.commands.items())]
        found.append((name, command))
    return found


COMMANDS = _commands()


def _options(command: click.Command) -> dict[str, click.Option]:
    return {opt: p for p in command.params if isinstance(p, click.Option) for opt in p.opts}


@pytest.mark.parametrize(("name", "command"), COMMANDS, ids=[n for n, _ in COMMANDS])
def test_every_help_has_an_example_of_its_command(name: str, command: click.Command) -> None:
    """README promises "Every command has --help with an example" (plot had none)."""
    from click.testing import CliRunner

    from rescorer.cli import cli

    result = CliRunner().invoke(cli, [*name.split(), "--help"])
    assert result.exit_code == 0, result.output
    text = result.output.split("Example:", 1)
    assert len(text) == 2, f"rescorer {name} --help has no 'Example:'"
    examples = [ln.strip() for ln in text[1].splitlines() if ln.strip().startswith("rescorer ")]
    prefix = f"rescorer {name} "  # a group's examples run its subcommands
    assert examples and all(ln.startswith(prefix) for ln in examples), examples


@pytest.mark.parametrize(("name", "command"), COMMANDS, ids=[n for n, _ in COMMANDS])
def test_every_option_has_help(name: str, command: click.Command) -> None:
    bare = [p.opts[-1] for p in command.params if isinstance(p, click.Option) and not p.help]
    assert bare == [], f"rescorer {name}: options without help: {bare}"


@pytest.mark.parametrize(("name", "command"), COMMANDS, ids=[n for n, _ in COMMANDS])
def test_progress_goes_with_quiet(name: str, command: click.Command) -> None:
    """A command that prints progress lines can be silenced with -q/--quiet."""
    options = _options(command)
    if "--progress-every" in options:
        assert "-q" in options and "--quiet" in options, f"rescorer {name} has no -q/--quiet"


@pytest.mark.parametrize(("name", "command"), COMMANDS, ids=[n for n, _ in COMMANDS])
def test_output_is_always_named(name: str, command: click.Command) -> None:
    """One rule for -o (README, Commands): every command that writes something takes -o,
    required; `-o -` is stdout where the output is text. Before, sample, compare, score-nbest
    and rerank wrote to stdout without -o and the others required it."""
    option = _options(command).get("-o")
    if option is not None and name != "merge":  # merge: -o, or OUT first as before -o existed
        assert option.required, f"rescorer {name}: -o is not required"


def _unseparated(line: str) -> list[str]:
    """Numbers of 4 or more digits written without thousands separators (paths left out)."""
    words = [w for w in line.split() if "/" not in w]
    return [n for w in words for n in re.findall(r"\d{4,}", re.sub(r"\.\d+", "", w))]


@pytest.mark.slow
def test_every_message_names_its_command_and_groups_thousands(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    """What the commands write on stderr on real inputs: every line starts `rescorer CMD:`,
    and counts have thousands separators (before: "2090 pairs: ...", "combined 2090 phrase
    pairs into ...", "13 sentences, 1201 hypotheses", "rescorer: error: ...")."""
    from click.testing import CliRunner

    from rescorer.cli import cli

    t, m = tmp_path, str(tiny_model_dir)
    runs = [
        ["vocab", str(SLICE), "-o", f"{t}/v"],
        ["train", str(TINY_SYSTEM / "phrase-table.gz"), "-o", f"{t}/m", *TINY_TRAIN_FLAGS[:-1]],
        ["score", str(SLICE), "-m", m, "-o", f"{t}/s.gz"],
        ["score", str(SLICE), "-m", m, "-o", f"{t}/p1.gz", "--shard", "1/2"],
        ["score", str(SLICE), "-m", m, "-o", f"{t}/p2.gz", "--shard", "2/2"],
        ["merge", f"{t}/merged.gz", f"{t}/p1.gz", f"{t}/p2.gz"],
        ["filter", str(SLICE), "--min-score", "2:0.01", "-o", f"{t}/f.gz"],
        ["combine", str(SLICE), "--weights", str(REAL_INI), "--no-lm", "-o", f"{t}/c.gz"],
        ["rerank", str(DEV13_NBEST), "--weights", str(REAL_INI), "-o", f"{t}/1best"],
        ["sample", m, "la maison", "--format", "moses", "-n", "20", "-o", f"{t}/s.txt"],
        ["plot", "scatter", str(SLICE), "-m", m, "--pairs", "300", "-o", f"{t}/f.png"],
        ["check", f"{t}/missing.gz"],  # an error
    ]
    wrong = []
    for args in runs:
        result = CliRunner().invoke(cli, args)
        assert result.exit_code == (1 if args[0] == "check" else 0), (args, result.output)
        name = " ".join(args[:2]) if args[0] == "plot" else args[0]
        lines = result.stderr.strip().splitlines()
        assert lines, args  # each of them says something
        wrong += [ln for ln in lines if not ln.startswith(f"rescorer {name}: ")]
        wrong += [ln for ln in lines if _unseparated(ln)]
    assert wrong == []
