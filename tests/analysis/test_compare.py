"""``rescorer compare`` (issue 15, item 2): the right columns, ranked, on a real slice."""

from __future__ import annotations

import gzip
from collections.abc import Sequence
from pathlib import Path

from click.testing import CliRunner
from conftest import SLICE

from rescorer.analysis.compare import compare_table, long_phrases
from rescorer.cli import cli


def _slice_by_source() -> dict[str, list[tuple[str, float, float]]]:
    """Independently of rescorer: source -> [(target, p(e|f), source count)] in file order."""
    found: dict[str, list[tuple[str, float, float]]] = {}
    with gzip.open(SLICE, "rt", encoding="utf-8") as lines:
        for line in lines:
            fields = line.rstrip("\n").split(" ||| ")
            scores = [float(x) for x in fields[2].split()]
            count_f = float(fields[4].split()[1])
            found.setdefault(fields[0], []).append((fields[1], scores[2], count_f))
    return found


def shorter_is_better(pairs: Sequence[tuple[str, str]]) -> list[float]:
    """A stand-in RNN that prefers short targets (ties: longer text first)."""
    return [-len(t.split()) + 1e-3 * len(t) for _, t in pairs]


def test_ranks_by_direct_probability_and_by_rnn() -> None:
    table = _slice_by_source()
    rows, summary = compare_table(
        str(SLICE), shorter_is_better, frequent=3, rare=3, band=0.3, summary_phrases=40, seed=5
    )
    assert [r.group for r in rows] == ["frequent"] * 3 + ["rare"] * 3
    for row in rows:
        entries = table[row.info.phrase]
        assert len(row.info.phrase.split()) >= 4 and len(entries) >= 3
        assert row.info.count == entries[0][2] and row.info.candidates == len(entries)
        expected = sorted(entries, key=lambda e: -e[1])  # stable: file order on ties
        assert [c.phrase for c in row.by_table()] == [e[0] for e in expected]
        by_rnn = sorted(entries, key=lambda e: len(e[0].split()) - 1e-3 * len(e[0]))
        assert [c.phrase for c in row.by_rnn()] == [e[0] for e in by_rnn]
    frequent = min(r.info.count for r in rows if r.group == "frequent")
    rare = max(r.info.count for r in rows if r.group == "rare")
    assert frequent > rare
    # The slice has 15 qualifying sources: the summary takes all of them.
    qualifying = [e for s, e in table.items() if len(s.split()) >= 4 and len(e) >= 3]
    assert summary is not None and summary.phrases == len(qualifying) == 15
    top = [max(e, key=lambda x: x[1])[0] for e in qualifying]  # max keeps the first of ties
    assert summary.table_top == sum(len(t.split()) for t in top) / 15
    assert summary.rnn_top < summary.table_top  # this stand-in prefers short targets
    again, _ = compare_table(str(SLICE), shorter_is_better, frequent=3, rare=3, band=0.3, seed=5)
    assert [r.info for r in again] == [r.info for r in rows]


def test_long_phrases_counts_whole_groups() -> None:
    table = _slice_by_source()
    found = long_phrases(str(SLICE), min_words=4, min_candidates=3)
    expected = [s for s, e in table.items() if len(s.split()) >= 4 and len(e) >= 3]
    assert [s.phrase for s in found] == expected


def test_cli_given_phrase_markdown(tiny_model_dir: Path, tmp_path: Path) -> None:
    table = _slice_by_source()
    src = next(s for s, e in table.items() if len(e) >= 3)
    out = tmp_path / "t2.md"
    args = ["compare", str(SLICE), src, "-m", str(tiny_model_dir), "--format", "markdown"]
    result = CliRunner().invoke(cli, [*args, "--summary-sources", "5", "-o", str(out)])
    assert result.exit_code == 0, result.output
    text = out.read_text(encoding="utf-8").splitlines()
    assert text[0].startswith("| source |") and text[2].startswith(f"| {src} (given)")
    assert "over 5 source phrases" in text[-1]
    missing = CliRunner().invoke(
        cli, ["compare", str(SLICE), "no such phrase", "-m", str(tiny_model_dir), "-o", "-"]
    )
    assert missing.exit_code == 1 and "no such source phrase" in missing.output
