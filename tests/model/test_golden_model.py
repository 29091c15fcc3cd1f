"""A model directory made by rescorer 0.1.0 still loads and scores as it did (tests/data/golden)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import GOLDEN

from rescorer.model.checkpoint import CONFIG_FORMAT, load_model_dir
from rescorer.model.encdec import count_parameters

MODEL = GOLDEN / "model"


def test_the_committed_model_directory_loads() -> None:
    loaded = load_model_dir(MODEL)
    assert CONFIG_FORMAT == "rescorer-model-1"  # a new format needs a new golden directory
    cfg = loaded.config
    assert (cfg.hidden_size, cfg.embed_size, cfg.maxout_units, cfg.maxout_pool) == (16, 8, 10, 2)
    assert (len(loaded.src_vocab), len(loaded.tgt_vocab)) == (301, 301)  # + EOS row
    assert count_parameters(loaded.model) == 11817


def split(line: str) -> tuple[str, list[str]]:
    fields = line.split(" ||| ")
    return " ||| ".join(fields[:2] + fields[3:]), fields[2].split()


@pytest.mark.slow
def test_the_committed_model_scores_as_it_did(tmp_path: Path) -> None:
    out = tmp_path / "scored.phrase-table"
    subprocess.run(
        [sys.executable, "-m", "rescorer", "score", str(GOLDEN / "pairs.phrase-table"), "-m",
         str(MODEL), "-o", str(out), "--column", "logp", "--word-penalty", "--precision", "fp32",
         "--device", "cpu", "--compile", "no", "-q"],
        check=True,
    )  # fmt: skip
    expected = (GOLDEN / "expected.phrase-table").read_text(encoding="utf-8").splitlines()
    got = out.read_text(encoding="utf-8").splitlines()
    assert len(got) == len(expected) == 12
    for new, old in zip(got, expected, strict=True):
        (new_rest, new_scores), (old_rest, old_scores) = split(new), split(old)
        assert new_rest == old_rest
        assert new_scores[:4] == old_scores[:4]  # the table's own columns, byte for byte
        assert float(new_scores[4]) == pytest.approx(float(old_scores[4]), abs=1e-4)  # log p
        assert new_scores[5] == old_scores[5]  # the word penalty column
