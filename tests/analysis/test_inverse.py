"""``sample``, ``compare`` and ``plot`` with an inverse-direction model (issue 24, item 3): they
read the table's target phrases, show p(f|e) against the table's column 0, and say so. Where
they print the RNN's numbers, those agree with ``rescorer score``'s inverse column."""

from __future__ import annotations

import gzip
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from conftest import SLICE, TINY_SYSTEM

from rescorer.analysis.compare import compare_table
from rescorer.analysis.sides import Sides
from rescorer.cli import cli
from rescorer.constants import TGT_VOCAB_FILE
from rescorer.io.table import read_table
from rescorer.vocab import Vocab

INVERSE = Sides("inverse")
TARGET = "ce texte long décrit"  # a target phrase of the slice with 4 sources
SAYS = "inverse model: target phrases given, source phrases predicted, p(f|e)"


def _slice_by_target() -> dict[str, list[tuple[str, float, float]]]:
    """Independently of rescorer: target -> [(source, p(f|e), target count)] in file order."""
    found: dict[str, list[tuple[str, float, float]]] = {}
    with gzip.open(SLICE, "rt", encoding="utf-8") as lines:
        for line in lines:
            fields = line.rstrip("\n").split(" ||| ")
            p_f_given_e = float(fields[2].split()[0])
            count_e = float(fields[4].split()[0])
            found.setdefault(fields[1], []).append((fields[0], p_f_given_e, count_e))
    return found


def shorter_is_better(pairs: Sequence[tuple[str, str]]) -> list[float]:
    """A stand-in RNN that prefers short predicted phrases (ties: longer text first)."""
    return [-len(s.split()) + 1e-3 * len(s) for _, s in pairs]


def _scored(model: Path, tmp_path: Path) -> dict[tuple[str, str], float]:
    """(source, target) -> the model's column written by ``rescorer score --column logp``."""
    out = tmp_path / "scored.gz"
    args = ["score", str(SLICE), "-m", str(model), "--column", "logp", "-o", str(out), "-q"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    return {(e.src, e.tgt): e.scores[-1] for e in read_table(str(out))}


def test_compare_ranks_the_sources_of_long_target_phrases() -> None:
    table = _slice_by_target()
    rows, summary = compare_table(
        str(SLICE), shorter_is_better, frequent=2, rare=2, band=0.5, summary_phrases=40,
        seed=3, sides=INVERSE,
    )  # fmt: skip
    qualifying = [t for t, e in table.items() if len(t.split()) >= 4 and len(e) >= 3]
    assert len(qualifying) == 5 and len(rows) == 4
    for row in rows:
        entries = table[row.info.phrase]
        assert row.info.phrase in qualifying
        assert row.info.count == entries[0][2] and row.info.candidates == len(entries)
        expected = sorted(entries, key=lambda e: -e[1])  # by p(f|e), file order on ties
        assert [(c.phrase, c.table) for c in row.by_table()] == [e[:2] for e in expected]
        by_rnn = sorted(entries, key=lambda e: len(e[0].split()) - 1e-3 * len(e[0]))
        assert [c.phrase for c in row.by_rnn()] == [e[0] for e in by_rnn]
    assert summary is not None and summary.phrases == 5
    assert summary.lines()[0].startswith("over 5 target phrases: mean words of the top source")


def test_compare_shows_the_inverse_column(tiny_inverse_model_dir: Path, tmp_path: Path) -> None:
    scored = _scored(tiny_inverse_model_dir, tmp_path)
    args = ["compare", str(SLICE), TARGET, "-m", str(tiny_inverse_model_dir), "--format"]
    result = CliRunner().invoke(cli, [*args, "markdown", "--summary-phrases", "0", "-o", "-"])
    assert result.exit_code == 0, result.output
    assert SAYS in result.stderr
    header, _, row = result.stdout.splitlines()
    assert header == "| target | count | table: top p(f\\|e) | RNN: top log p(f\\|e) |"
    sources = {s for s, _, _ in _slice_by_target()[TARGET]}
    rnn = row.split(" | ")[-1].rstrip(" |").split("<br>")
    assert len(rnn) == 3
    for cell in rnn:  # "[source] -1.23"
        source, value = cell[1:].rsplit("] ", 1)
        assert source in sources
        assert abs(float(value) - scored[(source, TARGET)]) <= 0.006, cell


def test_sample_generates_sources_scored_as_score_does(
    tiny_inverse_model_dir: Path, tmp_path: Path
) -> None:
    args = ["sample", str(tiny_inverse_model_dir), TARGET, "-n", "30", "--format", "moses"]
    result = CliRunner().invoke(cli, [*args, "-o", "-"])
    assert result.exit_code == 0, result.output
    assert SAYS in result.stderr
    lines = result.stdout.splitlines()
    assert lines and all(line.split(" ||| ")[1] == TARGET for line in lines)
    decoder_words = set(Vocab.load(tiny_inverse_model_dir / TGT_VOCAB_FILE).words)
    assert all(set(line.split(" ||| ")[0].split()) <= decoder_words for line in lines)
    # The third field is the model's p(source | target): score the lines as a table.
    table = tmp_path / "samples.txt"
    table.write_text(result.stdout, encoding="utf-8")
    out = tmp_path / "samples.scored"
    args = ["score", str(table), "-m", str(tiny_inverse_model_dir), "--column", "logp"]
    scored = CliRunner().invoke(cli, [*args, "-o", str(out), "-q"])
    assert scored.exit_code == 0, scored.output
    for entry in read_table(str(out)):
        assert entry.scores[-1] == pytest.approx(math.log(entry.scores[0]), abs=1e-4)


plt = pytest.importorskip("matplotlib", reason="plot needs the analysis extra")
pytest.importorskip("sklearn", reason="plot needs the analysis extra")


def _plot(args: list[str], model: Path, tmp_path: Path) -> tuple[dict[str, Any], str]:
    out = tmp_path / "fig.png"
    result = CliRunner().invoke(cli, ["plot", *args, "-m", str(model), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert SAYS in result.stderr
    return json.loads((tmp_path / "fig.json").read_text(encoding="utf-8")), result.stderr


def test_scatter_draws_the_tables_p_f_given_e(tiny_inverse_model_dir: Path, tmp_path: Path) -> None:
    scored = _scored(tiny_inverse_model_dir, tmp_path)
    record, _ = _plot(["scatter", str(SLICE), "--pairs", "300"], tiny_inverse_model_dir, tmp_path)
    [panel] = record["axes"]
    assert panel["xlabel"] == "phrase table: ln p(f|e)"
    assert panel["ylabel"] == "RNN Encoder-Decoder: ln p(f|e)"
    [points] = panel["scatters"]
    assert len(points) == 300
    entries = read_table(str(SLICE))
    column0 = {round(math.log(e.scores[0]), 4) for e in entries}
    column2 = {round(math.log(e.scores[2]), 4) for e in entries}
    assert all(x in column0 for x, _ in points)
    assert sum(x in column2 for x, _ in points) < 300  # not the forward column
    inverse = list(scored.values())  # y: values of the score column (the record rounds)
    assert all(min(abs(v - y) for v in inverse) < 2e-4 for _, y in points)


def test_words_source_side_is_the_decoders(tiny_inverse_model_dir: Path, tmp_path: Path) -> None:
    args = ["words", "--points", "40", "--labels", "10", "--side", "source"]
    record, _ = _plot(args, tiny_inverse_model_dir, tmp_path)
    [panel] = record["axes"]
    decoder = Vocab.load(tiny_inverse_model_dir / TGT_VOCAB_FILE)  # predicts the sources
    assert panel["names"] == list(decoder.words[:40])
    table_sources = {
        w for e in read_table(str(TINY_SYSTEM / "phrase-table.gz")) for w in e.src.split()
    }
    assert set(panel["names"]) <= table_sources
    assert "the encoder reads target words, the decoder source words" in record["title"]


def test_phrases_maps_long_target_phrases(tiny_inverse_model_dir: Path, tmp_path: Path) -> None:
    args = ["phrases", str(SLICE), "--phrases", "60", "--neighbours", "8"]
    record, _ = _plot(args, tiny_inverse_model_dir, tmp_path)
    main = record["axes"][0]
    long_targets = {e.tgt for e in read_table(str(SLICE)) if len(e.tgt.split()) >= 4}
    assert len(main["names"]) == 60 and set(main["names"]) <= long_targets
    assert main["title"] == "60 target phrases of 4 or more words"
