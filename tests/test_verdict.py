"""Has the model learned: train's closing verdict, info's line, score's warnings (issue 27, 3)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rescorer.constants import PROVENANCE_FILE
from rescorer.verdict import (
    COVERAGE_MIN_PAIRS,
    coverage_warning,
    training_verdict,
    unlearned_warning,
)
from tests.conftest import ROOT, SLICE, TINY_TRAIN_FLAGS

SAMPLE = ROOT / "rescorer" / "sample" / "en-fr.sample.gz"  # 24,245 real pairs


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rescorer", *args], capture_output=True, text=True, check=True
    )


def provenance(valid: float, unigram: float, coverage: float | None = None) -> dict:
    training = {"valid_ppl": valid, "unigram_ppl": unigram, "shortlist_coverage": coverage}
    return {"training": training}


def test_the_verdict_reads_the_best_validation_against_the_unigram() -> None:
    assert training_verdict(provenance(10.0, 300.0)).learned  # type: ignore[union-attr]
    barely = training_verdict(provenance(290.0, 300.0))
    assert barely is not None and not barely.learned and barely.text.startswith("barely")
    worse = training_verdict(provenance(395.8, 322.9))
    assert worse is not None and worse.text.startswith("NOT LEARNED")
    assert training_verdict({}) is None  # trained without validation: no verdict
    assert unlearned_warning(provenance(10.0, 300.0), "m") is None
    assert "NOT LEARNED" in (unlearned_warning(provenance(395.8, 322.9), "m") or "")


def test_each_verdict_is_said_as_a_sentence_with_a_verb() -> None:
    """Issue 59, item 8: train ended with "the model NOT LEARNED (not better than a unigram
    model)": no verb. Every place that says it about the model says "the model has"."""
    for valid, label in ((10.0, "learned"), (290.0, "barely learned"), (395.8, "NOT LEARNED")):
        verdict = training_verdict(provenance(valid, 300.0))
        assert verdict is not None and verdict.sentence.startswith(f"the model has {label}")
    warning = unlearned_warning(provenance(395.8, 322.9), "m") or ""
    assert warning.startswith("warning: m: the model has NOT LEARNED (not better than a unigram")


def test_coverage_far_below_the_training_tables_warns() -> None:
    prov = provenance(10.0, 300.0, coverage=0.98)
    n = COVERAGE_MIN_PAIRS
    assert coverage_warning(prov, "m", int(0.84 * n), n) is not None  # the 84% vs 98%
    assert coverage_warning(prov, "m", int(0.96 * n), n) is None
    assert coverage_warning(prov, "m", 0, n - 1) is None  # too few pairs to say
    assert coverage_warning(provenance(10.0, 300.0), "m", 0, n) is None  # not recorded


@pytest.fixture(scope="module")
def slice_model(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A tiny model trained for 20 updates on the real slice: it has not learned."""
    out = tmp_path_factory.mktemp("verdict") / "model"
    proc = subprocess.run(
        [sys.executable, "-m", "rescorer", "train", str(SLICE), "-o", str(out),
         *[f for f in TINY_TRAIN_FLAGS if f != "-q"]],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return out, proc.stderr


def test_train_ends_with_a_verdict_and_info_shows_it(slice_model: tuple[Path, str]) -> None:
    model, stderr = slice_model
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("rescorer train: verdict: the model has "), last
    prov = json.loads((model / PROVENANCE_FILE).read_text())
    verdict = training_verdict(prov)
    assert verdict is not None and verdict.text in last
    coverage = prov["training"]["shortlist_coverage"]
    assert 0.0 < coverage < 1.0  # 200-word shortlists on the slice: some pairs fall outside
    info = run("info", str(model)).stdout
    assert f"verdict: {verdict.text}" in info


def test_score_warns_once_on_an_unlearned_model(
    slice_model: tuple[Path, str], tmp_path: Path
) -> None:
    model, _ = slice_model
    prov = json.loads((model / PROVENANCE_FILE).read_text())
    verdict = training_verdict(prov)
    assert verdict is not None and not verdict.learned  # 20 updates learn nothing clear
    stderr = run("score", str(SLICE), "-m", str(model), "-o", str(tmp_path / "o.gz"), "-q").stderr
    assert stderr.count("the model has") == 1 and verdict.text in stderr


def test_score_warns_when_the_table_is_not_the_training_tables(
    slice_model: tuple[Path, str], tmp_path: Path
) -> None:
    """The model's 200-word shortlists fit its own slice far better than the 24,245-pair
    sample of other sources; scoring the sample warns once, scoring the slice does not."""
    model, _ = slice_model
    other = run("score", str(SAMPLE), "-m", str(model), "-o", str(tmp_path / "s.gz"), "-q",
                "--ignore-coverage")  # fmt: skip
    assert other.stderr.count("have every word inside the model's shortlists") == 1
    own = run("score", str(SLICE), "-m", str(model), "-o", str(tmp_path / "o.gz"), "-q")
    assert "shortlists" not in own.stderr  # 2,090 pairs: too few to judge, and its own table


def test_a_table_far_outside_the_shortlists_is_refused_before_it_is_scored(
    slice_model: tuple[Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 39, item 5: an en-fr model scored an en-de table to the end (exit 0) and warned
    after 1m29s (7.0% of pairs inside its shortlists against 73.9%); check -m gave no verdict.
    Now the first chunk decides, before it is scored: refused, one line, nothing written;
    --ignore-coverage goes on; check -m gives the same verdict. (The model's 200-word
    shortlists hold 4.0% of the sample's pairs, 5.3% of its first chunk's, against 41.9% of
    its own slice's.)"""
    import rescorer.score.scorer as scorer
    from rescorer.errors import RescorerError
    from rescorer.score.config import ScoreConfig
    from rescorer.score.pipeline import score_table

    model, _ = slice_model

    def never(self: object, pairs: object) -> object:
        raise AssertionError("a pair was scored before the verdict")

    monkeypatch.setattr(scorer.Scorer, "submit", never)
    out = tmp_path / "s.gz"
    with pytest.raises(RescorerError) as refused:
        score_table(str(SAMPLE), str(model), str(out), ScoreConfig(device="cpu"))
    message = str(refused.value)
    # the first chunk (8,908 pairs): 5.3%
    assert message.startswith(f"{model}: 5.3% of the first 8,908 pairs have every word inside")
    assert "against 41.9% of its training table's pairs" in message, message
    assert "another language pair or table" in message and "--ignore-coverage" in message
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    monkeypatch.undo()
    done = subprocess.run(
        [sys.executable, "-m", "rescorer", "score", str(SAMPLE), "-m", str(model), "-o", str(out)],
        capture_output=True, text=True,
    )  # fmt: skip
    errors = [line for line in done.stderr.splitlines() if ": error: " in line]
    assert done.returncode == 1 and len(errors) == 1, done.stderr
    assert errors[0].startswith("rescorer score: error: ") and not out.exists()
    # check -m says the same verdict, and exits 1 as score does (issue 59, item 8: it exited 0)
    checked = subprocess.run(
        [sys.executable, "-m", "rescorer", "check", str(SAMPLE), "-m", str(model)],
        capture_output=True, text=True,
    )  # fmt: skip
    check = checked.stdout.splitlines()[-1]
    assert check.startswith(f"coverage verdict: {model}: 4.0% of its 24,245 pairs"), check
    assert "rescorer score refuses it (--ignore-coverage to go on)" in check
    assert checked.returncode == 1, checked.stderr
    assert checked.stderr.splitlines() == [
        f"rescorer check: error: {model}: a model for another language pair or table: rescorer "
        f"score refuses {SAMPLE} with it (the coverage verdict above; --ignore-coverage to go on)"
    ]
    own = run("check", str(SLICE), "-m", str(model)).stdout.splitlines()[-1]
    assert own == "coverage verdict: none (2,090 pairs, fewer than the 5,000 score judges by)"


def test_the_coverage_verdict_rule() -> None:
    from rescorer.verdict import FOREIGN_RATIO, coverage_verdict

    prov = provenance(10.0, 300.0, coverage=0.739)
    n = COVERAGE_MIN_PAIRS
    foreign = coverage_verdict(prov, int(0.07 * n), n)  # the en-de table: 7.0%
    assert foreign is not None and foreign.foreign and foreign.lower
    edge = coverage_verdict(prov, int(FOREIGN_RATIO * 0.739 * n) + 1, n)
    assert edge is not None and not edge.foreign and edge.lower  # warned, not refused
    assert coverage_verdict(prov, int(0.7 * n), n - 1) is None  # too few pairs yet
    fits = coverage_verdict(prov, int(0.72 * n), n)
    assert fits is not None and not fits.lower and "it fits the model" in fits.describe("m", "x")
