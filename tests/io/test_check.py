"""``rescorer check``: a whole table validated in one pass, and described."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import GOLDEN, SLICE, TINY_SYSTEM

from rescorer.cli import cli
from rescorer.errors import InputError
from rescorer.io.check import check_table
from rescorer.io.table import read_table, split_tokens
from rescorer.vocab import Vocab

LINES = gzip.decompress(SLICE.read_bytes()).split(b"\n")[:-1]
ENTRIES = list(read_table(str(SLICE)))


def test_the_real_slice_is_described_correctly() -> None:
    found = check_table(str(SLICE))
    assert found.ok and found.lines == len(LINES) == len(ENTRIES) and found.num_scores == 4
    assert found.sources == len({e.src for e in ENTRIES}) and found.out_of_order == 0
    groups: dict[str, int] = {}
    for e in ENTRIES:
        groups[e.src] = groups.get(e.src, 0) + 1
    assert found.max_targets == max(groups.values())
    assert found.tgt_tokens == sum(len(e.tgt_tokens) for e in ENTRIES)
    assert found.max_src_len == max(len(e.src_tokens) for e in ENTRIES)


def test_coverage_counts_the_shortlists_words() -> None:
    src = Vocab.load(str(GOLDEN / "model" / "vocab.src.json"))
    tgt = Vocab.load(str(GOLDEN / "model" / "vocab.tgt.json"))
    found = check_table(str(SLICE), src, tgt)
    want = sum(tok in tgt for e in ENTRIES for tok in split_tokens(e.tgt))
    assert found.tgt_covered == want and 0 < want < found.tgt_tokens
    both = sum(
        all(t in src for t in e.src_tokens) and all(t in tgt for t in e.tgt_tokens) for e in ENTRIES
    )
    assert found.pairs_covered == both


def bad_table(tmp_path: Path) -> Path:
    lines = list(LINES)
    fields = lines[2].split(b" ||| ")
    fields[2] += b" 0.5"  # line 3: a fifth score
    lines[2] = b" ||| ".join(fields)
    lines[9] = b"\xff\xfe" + lines[9]  # line 10: not UTF-8
    lines[-1] = b"only ||| two fields"  # the last line
    path = tmp_path / "bad.gz"
    path.write_bytes(gzip.compress(b"\n".join(lines) + b"\n"))
    return path


def test_every_malformed_line_is_counted_with_its_number(tmp_path: Path) -> None:
    found = check_table(str(bad_table(tmp_path)))
    assert not found.ok and found.bad == 3 and found.lines == len(LINES)
    assert [n for n, _ in found.errors] == [3, 10, len(LINES)]
    assert "found 5 scores, expected 4" in found.errors[0][1]
    assert "invalid UTF-8" in found.errors[1][1]


def test_the_command_reports_and_exits_1_on_a_bad_table(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["check", str(bad_table(tmp_path))])
    assert result.exit_code == 1
    assert f"{len(LINES):,} lines, 3 malformed" in result.stdout
    err = result.stderr.strip().splitlines()
    assert len(err) == 1 and "3 malformed line(s); the first: " in err[0] and "bad.gz:3:" in err[0]
    good = CliRunner().invoke(cli, ["check", str(SLICE), "-m", str(GOLDEN / "model")])
    assert good.exit_code == 0 and "shortlist coverage" in good.stdout


def test_a_truncated_gzip_file_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "cut.gz"
    data = SLICE.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(InputError, match="corrupt or truncated gzip"):
        check_table(str(path))


def test_sources_out_of_moses_order_are_reported(tmp_path: Path) -> None:
    path = tmp_path / "unsorted.txt"
    path.write_bytes(b"\n".join([*LINES[100:], *LINES[:100]]) + b"\n")
    found = check_table(str(path))
    assert found.ok and found.out_of_order == 1
    assert found.first_out_of_order == f"{path}:{len(LINES) - 100 + 1}"


def test_score_check_first_stops_before_loading_anything(tmp_path: Path) -> None:
    """The bad last line is found before the model is even looked at (it does not exist)."""
    out = tmp_path / "o.gz"
    result = CliRunner().invoke(
        cli,
        ["score", str(bad_table(tmp_path)), "-m", "/nonexistent", "-o", str(out), "--check-first"],
    )
    assert result.exit_code == 1 and "bad.gz:3: found 5 scores" in result.stderr
    assert not out.exists() and not Path(f"{out}.partial").exists()


def test_check_says_which_kind_of_table_it_sees() -> None:
    """Issue 27, item 2: check said "score columns: 6" of a reordering table and nothing else."""
    for table, kind in (
        (TINY_SYSTEM / "reordering-table.gz", "kind: a lexicalised reordering table (6 scores"),
        (TINY_SYSTEM / "phrase-table.gz", "kind: a phrase table\n"),
    ):
        result = CliRunner().invoke(cli, ["check", str(table)])
        assert result.exit_code == 0 and kind in result.stdout, result.output
    reordering = CliRunner().invoke(cli, ["check", str(TINY_SYSTEM / "reordering-table.gz")])
    assert "as in msd-bidirectional-fe), which score and train refuse" in reordering.stdout
