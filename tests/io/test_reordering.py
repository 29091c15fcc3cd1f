"""rescorer/io/reordering.py: a phrase table told from a lexicalised reordering table, and the
refusal of score and train."""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import DATA_DIR, GOLDEN, SHARED, SLICE, TINY_SYSTEM

from rescorer.cli import cli
from rescorer.io.reordering import sniff_table_kind, table_kind

EN_FR = SHARED / "data" / "en-fr"


def kind_of(*lines: str) -> tuple[bool, str]:
    kind = table_kind(line.encode() + b"\n" for line in lines)
    return kind.reordering, kind.what


@pytest.mark.parametrize(
    ("path", "reordering"),
    [
        (TINY_SYSTEM / "reordering-table.gz", True),
        (TINY_SYSTEM / "phrase-table.gz", False),
        (SLICE, False),
        (DATA_DIR / "en-fr.sample.phrase-table", False),
        (DATA_DIR / "en-fr.filter-slice.pt.gz", False),
        (EN_FR / "reordering-table.wbe-msd-bidirectional-fe.gz", True),
        (EN_FR / "phrase-table.gz", False),
    ],
)
def test_real_tables_are_told_apart(path: Path, reordering: bool) -> None:
    if not path.exists():
        pytest.skip(f"{path} is not there (../shared/data/en-fr)")
    kind = sniff_table_kind(str(path))
    assert kind is not None and kind.reordering is reordering, kind
    if reordering:
        assert "6 scores a line" in kind.what and "msd-bidirectional-fe" in kind.what


@pytest.mark.parametrize(
    ("lines", "name"),
    [
        (
            ["a ||| x ||| 0.2 0.2 0.6 0.6 0.2 0.2", "b ||| y ||| 0.5 0.1 0.4 0.1 0.1 0.8"],
            "msd-bidirectional-fe",
        ),
        (["a ||| 0.2 0.2 0.6 0.6 0.2 0.2", "b ||| 0.5 0.1 0.4 0.1 0.1 0.8"], "msd-bidirectional-f"),
        (["a ||| x ||| 0.2 0.2 0.6", "b ||| y ||| 0.5 0.1 0.4"], "msd-fe"),
        (
            ["a ||| x ||| 0.3 0.7 0.9 0.1", "b ||| y ||| 0.5 0.5 0.2 0.8"],
            "monotonicity-bidirectional-fe",
        ),
        (["a ||| x ||| 0.1 0.2 0.3 0.4 0.25 0.25 0.25 0.25"], "mslr-bidirectional-fe"),
        (["a ||| x ||| 0.1 0.2 0.3 0.4"], "mslr-fe"),
    ],
)
def test_reordering_table_layouts(lines: list[str], name: str) -> None:
    reordering, what = kind_of(*lines)
    assert reordering and f"as in {name})" in what


@pytest.mark.parametrize(
    "lines",
    [
        # one line of probabilities that do not sum to 1 in groups is enough
        ["a ||| x ||| 0.2 0.2 0.6 0.6 0.2 0.2", "b ||| y ||| 1 0.930901 1 0.705736"],
        ["a ||| x ||| 0.5 0.5 0.5 0.5", "a ||| y ||| 0.9 0.5 0.5 0.5"],
        # alignment and counts: a phrase table's fields
        ["a ||| x ||| 0.2 0.2 0.6 0.6 0.2 0.2 ||| 0-0 ||| 1 1 1"],
        # score counts differ from line to line, or are not a reordering model's
        ["a ||| x ||| 0.2 0.2 0.6", "b ||| y ||| 0.5 0.5"],
        ["a ||| x ||| 0.2 0.2 0.2 0.2 0.2"],
        # not probabilities
        ["a ||| x ||| 2 -1"],
        [],
        ["not a table"],
    ],
)
def test_anything_else_is_a_phrase_table(lines: list[str]) -> None:
    assert kind_of(*lines) == (False, "a phrase table")


def test_score_and_train_refuse_a_reordering_table_before_any_work(tmp_path: Path) -> None:
    """Issue 27, item 2: score started on 1.2M lines for an hour and train trained on it. The
    model folder does not exist: the refusal comes before it is read."""
    table = str(TINY_SYSTEM / "reordering-table.gz")
    for args in (
        ["score", table, "-m", str(tmp_path / "no-model"), "-o", str(tmp_path / "out.gz")],
        ["train", table, "-o", str(tmp_path / "model"), "--max-updates", "1"],
    ):
        result = CliRunner().invoke(cli, args)
        assert result.exit_code == 1, result.output
        assert result.stderr.startswith(
            f"rescorer {args[0]}: error: {table} is a lexicalised reordering table (6 scores a "
            "line: "
        )
        assert "not a phrase table" in result.stderr
        assert sorted(os.listdir(tmp_path)) == []  # nothing written, no model folder
    # on stdin, which can be read once: at its first chunk, leaving no output
    model, out = str(GOLDEN / "model"), str(tmp_path / "out.gz")
    piped = gzip.decompress((TINY_SYSTEM / "reordering-table.gz").read_bytes())
    result = CliRunner().invoke(cli, ["score", "-", "-m", model, "-o", out], input=piped)
    assert result.exit_code == 1, result.output
    assert result.stderr == (  # the one error line: the model's warnings come after a chunk
        "rescorer score: error: <stdin> is a lexicalised reordering table (6 scores a line: "
        "backward and forward groups of 3 orientation probabilities that each sum to 1, as in "
        "msd-bidirectional-fe), not a phrase table: rescorer scores and trains on the phrase "
        "table (train-model.perl's model/phrase-table.gz, the path= of the moses.ini's "
        "PhraseDictionary line)\n"
    )
    assert sorted(os.listdir(tmp_path)) == []
