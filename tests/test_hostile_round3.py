"""Hostile input, round three (issue 38): what a 1,009-case harness found. Each case ran to
exit 0 with a wrong result, said something untrue, or failed late; each must now end in a
correct result or one clear line (file, line, what was expected), exit 1 (2 for usage), and
nothing under the final name. Real commands in subprocesses (tests/faults.py), on the real
slice, the tiny real Moses system and a tiny trained model (conftest).

The Table 1 driver's cases (items 8-11) are in tests/experiments/test_table1_hostile.py, the
model folders' (item 13) in tests/test_hostile_models.py.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import DATA_DIR, TINY_SYSTEM
from faults import run
from test_hostile_walk import expect_refusal

NBEST = DATA_DIR / "nbest"
SEG = NBEST / "tiny.test6.nbest-seg"  # Moses' n-best list with -include-segmentation-in-n-best
INPUT = NBEST / "tiny.test6.en"  # the sentences it decoded
TABLE = TINY_SYSTEM / "phrase-table.gz"  # the table it was decoded with


def expect_usage_error(done: subprocess.CompletedProcess[str], *says: str, absent: Path) -> None:
    """Exit 2 (a usage error, click's), what it says, no traceback and no output."""
    where = f"stdout: {done.stdout[-2000:]}\nstderr: {done.stderr[-4000:]}"
    assert done.returncode == 2, where
    assert "Traceback" not in done.stderr, where
    for text in says:
        assert text in done.stderr, where
    assert not absent.exists(), where


def score_nbest_args(
    models: list[Path], out: Path, nbest: Path = SEG, src: Path = INPUT
) -> list[str]:
    return ["score-nbest", str(nbest), *(a for m in models for a in ("-m", str(m))),
            "--input", str(src), "--phrase-table", str(TABLE), "-o", str(out),
            "--device", "cpu", "--precision", "fp32"]  # fmt: skip


def overflowing(model: Path, folder: Path) -> Path:
    """``model`` with every weight times 1e30: finite weights whose scores overflow fp32."""
    from safetensors.torch import load_file, save_file

    huge = folder / "huge"
    shutil.copytree(model, huge)
    weights = huge / "model.safetensors"
    save_file({k: v * 1e30 for k, v in load_file(weights).items()}, weights)
    return huge


# ------------------------------------------------------------ 1. score-nbest and a nan score
@pytest.mark.parametrize("slot", [0, 1])
def test_score_nbest_refuses_a_model_whose_scores_overflow_in_any_slot(
    tiny_model_dir: Path, tmp_path: Path, slot: int
) -> None:
    """``-m FWD -m HUGE`` wrote ``RNN1= nan`` on every hypothesis, exit 0; ``score`` refuses
    the same model (tests/test_hostile_walk.py, score-overflowing-weights)."""
    huge = overflowing(tiny_model_dir, tmp_path)
    models = [tiny_model_dir, tiny_model_dir]
    models[slot] = huge
    out = tmp_path / "out.nbest"
    line = expect_refusal(run(score_nbest_args(models, out)), str(huge), absent=(out,))
    assert re.search(rf"{SEG}:[0-9]+ as nan", line) and "not a finite log probability" in line
