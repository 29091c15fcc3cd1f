"""Every user-facing failure of every command is one line and exit 1 (2 for usage), never a
traceback, and leaves no output behind (issue 11: 'classes to close')."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import GOLDEN, REAL_INI, SLICE

from rescorer.cli import cli

Case = Callable[[Path], list[str]]


def model_with(tmp: Path, name: str, content: bytes) -> Path:
    """A copy of the committed model directory with one file replaced."""
    model = tmp / "m"
    shutil.copytree(GOLDEN / "model", model)
    (model / name).write_bytes(content)
    return model


def setup(tmp: Path) -> None:
    (tmp / "afile").write_text("x\n")
    (tmp / "adir").mkdir()


SCORE = ["score", str(SLICE), "-m", str(GOLDEN / "model")]
CASES: dict[str, Case] = {
    "score: output is a folder": lambda t: [*SCORE, "-o", str(t / "adir")],
    "score: output folder missing": lambda t: [*SCORE, "-o", str(t / "no" / "o.gz")],
    "score: input missing": lambda t: [
        "score",
        str(t / "no.gz"),
        "-m",
        str(GOLDEN / "model"),
        "-o",
        str(t / "o.gz"),
    ],
    "score: input is a folder": lambda t: [
        "score",
        str(t / "adir"),
        "-m",
        str(GOLDEN / "model"),
        "-o",
        str(t / "o.gz"),
    ],
    "score: chunk-bytes 0": lambda t: [*SCORE, "-o", str(t / "o.gz"), "--chunk-bytes", "0"],
    "score: chunk-bytes < 0": lambda t: [*SCORE, "-o", str(t / "o.gz"), "--chunk-bytes", "-5"],
    "score: workers < 0": lambda t: [*SCORE, "-o", str(t / "o.gz"), "--workers", "-1"],
    "score: compress-level 12": lambda t: [
        *SCORE,
        "-o",
        str(t / "o.gz"),
        "--compress-level",
        "12",
    ],
    "score: model is a file": lambda t: [
        "score",
        str(SLICE),
        "-m",
        str(t / "afile"),
        "-o",
        str(t / "o.gz"),
    ],
    "score: config is a list": lambda t: [
        "score",
        str(SLICE),
        "-m",
        str(model_with(t, "config.json", b"[1, 2]")),
        "-o",
        str(t / "o.gz"),
    ],
    "score: config not UTF-8": lambda t: [
        "score",
        str(SLICE),
        "-m",
        str(model_with(t, "config.json", b'{"a": "\xff"}')),
        "-o",
        str(t / "o.gz"),
    ],
    "score: config nested deeply": lambda t: [
        "score",
        str(SLICE),
        "-m",
        str(model_with(t, "config.json", b"[" * 100000 + b"]" * 100000)),
        "-o",
        str(t / "o.gz"),
    ],
    "score: vocabulary of wrong type": lambda t: [
        "score",
        str(SLICE),
        "-m",
        str(model_with(t, "vocab.src.json", b'"x"')),
        "-o",
        str(t / "o.gz"),
    ],
    "score: weights not safetensors": lambda t: [
        "score",
        str(SLICE),
        "-m",
        str(model_with(t, "model.safetensors", b"not a tensor file")),
        "-o",
        str(t / "o.gz"),
    ],
    "info: provenance not an object": lambda t: [
        "info",
        str(model_with(t, "provenance.json", b'"x"')),
    ],
    "info: a file": lambda t: ["info", str(t / "afile")],
    "vocab: -o names a file": lambda t: ["vocab", str(SLICE), "-o", str(t / "afile")],
    "train: -o names a file": lambda t: [
        "train",
        str(SLICE),
        "-o",
        str(t / "afile"),
        "--max-updates",
        "1",
    ],
    "combine: output is a folder": lambda t: [
        "combine",
        str(SLICE),
        "--weights",
        str(REAL_INI),
        "--no-lm",
        "-o",
        str(t / "adir"),
    ],
    "filter: input list missing": lambda t: [
        "filter",
        str(SLICE),
        "--input",
        str(t / "no.txt"),
        "-o",
        str(t / "f.gz"),
    ],
    "filter: top-k without weights": lambda t: [
        "filter",
        str(SLICE),
        "--top-k",
        "3",
        "-o",
        str(t / "f.gz"),
    ],
    "filter: min-score nan": lambda t: [
        "filter",
        str(SLICE),
        "--min-score",
        "1:nan",
        "-o",
        str(t / "f.gz"),
    ],
    "rerank: n-best missing": lambda t: [
        "rerank",
        str(t / "no.nbest"),
        "--weights",
        str(REAL_INI),
        "-o",
        "-",
    ],
    "moses-ini: ini missing": lambda t: [
        "moses-ini",
        str(t / "no.ini"),
        "--phrase-table",
        str(SLICE),
        "-o",
        str(t / "n.ini"),
    ],
    "moses-ini: not a scored table": lambda t: [
        "moses-ini",
        str(REAL_INI),
        "--phrase-table",
        str(SLICE),
        "-o",
        str(t / "n.ini"),
    ],
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_user_error_is_one_line_and_leaves_nothing(tmp_path: Path, name: str) -> None:
    work = tmp_path / "work"
    work.mkdir()
    setup(work)
    before = sorted(p.relative_to(work) for p in work.rglob("*"))
    args = CASES[name](work)
    if name.startswith(("score: config", "score: vocab", "score: weights", "info: prov")):
        before = sorted(p.relative_to(work) for p in work.rglob("*"))  # the model copy
    result = CliRunner().invoke(cli, args)
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        f"{name}: {type(result.exception).__name__}: {result.exception}"
    )
    assert result.exit_code in (1, 2), (name, result.exit_code, result.output)
    lines = result.stderr.strip().splitlines()
    if result.exit_code == 1:
        command = " ".join(args[:2]) if args[0] == "plot" else args[0]
        assert len(lines) == 1 and lines[0].startswith(f"rescorer {command}: error: "), lines
    else:  # click's usage error: usage, hint and the error line, prefixed as every error line
        command = " ".join(args[:2]) if args[0] == "plot" else args[0]
        assert lines[-1].startswith(f"rescorer {command}: error: "), lines
    assert "Traceback" not in result.output
    assert sorted(p.relative_to(work) for p in work.rglob("*")) == before, name
