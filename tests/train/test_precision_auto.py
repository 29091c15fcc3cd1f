"""train --precision auto on a CPU chooses by the update, not by the matrix products alone
(rescorer/train/precision.py, issue 66): the speeds are injected, nothing here is timed but
the last test's tiny real updates."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from rescorer.model.encdec import ModelConfig

CPU = torch.device("cpu")
PAPER = ModelConfig()
TINY = ModelConfig(40, 50, hidden_size=8, embed_size=4, maxout_units=3)


@pytest.fixture
def speeds(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, Any]:
    """Matrix-product speeds (GFLOP/s, by dtype) and update speeds (pairs/s, by precision)
    the measurements find, set by the test; ``calls`` counts the updates timed."""
    import rescorer.device as device
    import rescorer.train.precision as precision

    monkeypatch.setenv("RESCORER_CACHE_DIR", str(tmp_path / "cache"))
    found: dict[str, Any] = {"calls": []}
    monkeypatch.setattr(device, "gemm_gflops", lambda shapes, dtype, seconds=0.1: found[dtype])
    monkeypatch.setattr(device, "_load", lambda: 0.0)  # an idle machine
    monkeypatch.setattr(precision, "_load", lambda: 0.0)

    def timed(model_cfg: ModelConfig, batch_size: int, name: str) -> float:
        found["calls"].append((model_cfg, batch_size, name))
        return float(found[name])

    monkeypatch.setattr(precision, "time_updates", timed)
    return found


def test_products_favour_bf16_but_the_update_is_faster_in_fp32(speeds: dict[str, Any]) -> None:
    """The AMX Xeon of 2026-11-28: bf16 products 7x fp32's, the compiled update 143 against
    179 pairs/s. auto trains in fp32 there and says both figures."""
    from rescorer.train.precision import choose_training_precision

    speeds.update({torch.bfloat16: 979.0, torch.float32: 141.0, "bf16": 143.0, "fp32": 179.0})
    choice = choose_training_precision("auto", CPU, PAPER, 64)
    assert choice.precision == "fp32"
    assert choice.reason.startswith(
        "precision auto -> fp32: this model's updates bf16 143 vs fp32 179 pairs/s (timed now,"
    )
    assert "its matrix products alone favour bf16: bf16 979 vs fp32 141 GFLOP/s" in choice.reason
    assert [(batch, name) for _, batch, name in speeds["calls"]] == [(64, "fp32"), (64, "bf16")]
    assert speeds["calls"][0][0] == PAPER
    again = choose_training_precision("auto", CPU, PAPER, 64)  # cached: nothing timed
    assert len(speeds["calls"]) == 2 and again.precision == "fp32"
    assert "timed earlier, cached in" in again.reason
    choose_training_precision("auto", CPU, PAPER, 256)  # another batch size: its own entry
    assert len(speeds["calls"]) == 4


def test_the_cache_holds_the_update_speeds_beside_the_products(
    speeds: dict[str, Any], tmp_path: Path
) -> None:
    from rescorer.io.precision_cache import read_cache
    from rescorer.train.precision import choose_training_precision

    speeds.update({torch.bfloat16: 900.0, torch.float32: 100.0, "bf16": 400.0, "fp32": 200.0})
    assert choose_training_precision("auto", CPU, TINY, 16).precision == "bf16"
    path = tmp_path / "cache" / "precision.json"
    entries = read_cache(path).entries  # every entry usable by the cache's own rules
    assert len(entries) == 2 == len(json.loads(path.read_text())["entries"])
    (key,) = [k for k in entries if "updates of" in k]
    assert "hidden_size=8" in key and key.endswith("| batch 16")
    assert entries[key]["unit"] == "pairs/s"
    assert (entries[key]["bf16"], entries[key]["fp32"]) == (400.0, 200.0)


@pytest.mark.parametrize(
    "bf16, fp32, chosen",
    [(104.0, 100.0, "fp32"), (106.0, 100.0, "bf16")],  # within UPDATE_MARGIN: fp32
)
def test_bf16_must_update_faster_by_the_margin(
    speeds: dict[str, Any], bf16: float, fp32: float, chosen: str
) -> None:
    from rescorer.train.precision import choose_training_precision

    speeds.update({torch.bfloat16: 900.0, torch.float32: 100.0, "bf16": bf16, "fp32": fp32})
    assert choose_training_precision("auto", CPU, TINY, 16).precision == chosen


def test_no_update_is_timed_where_the_products_favour_fp32(speeds: dict[str, Any]) -> None:
    """A CPU without bf16 instructions (this project's Zen 3: 1 against 80 GFLOP/s): a bf16
    update would take a minute, and cannot win."""
    from rescorer.train.precision import choose_training_precision

    speeds.update({torch.bfloat16: 1.0, torch.float32: 80.0})
    choice = choose_training_precision("auto", CPU, PAPER, 64)
    assert choice.precision == "fp32"
    assert choice.reason.startswith("precision auto -> fp32: bf16 1 vs fp32 80 GFLOP/s")
    assert speeds["calls"] == []
    for name in ("fp32", "bf16"):  # asked for: taken as it is, nothing measured
        assert choose_training_precision(name, CPU, PAPER, 64).precision == name
    assert speeds["calls"] == []


def test_figures_timed_on_a_busy_machine_are_timed_again_once_idle(
    speeds: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    import rescorer.train.precision as precision

    speeds.update({torch.bfloat16: 900.0, torch.float32: 100.0, "bf16": 50.0, "fp32": 100.0})
    busy = 3.0 * (os.cpu_count() or 1)
    monkeypatch.setattr(precision, "_load", lambda: busy)
    precision.choose_training_precision("auto", CPU, TINY, 16)
    assert len(speeds["calls"]) == 2
    precision.choose_training_precision("auto", CPU, TINY, 16)  # still busy: kept
    assert len(speeds["calls"]) == 2
    monkeypatch.setattr(precision, "_load", lambda: 0.0)
    choice = precision.choose_training_precision("auto", CPU, TINY, 16)
    assert len(speeds["calls"]) == 4 and "timed now" in choice.reason


def test_real_updates_are_timed_in_both_precisions() -> None:
    from rescorer.train.precision import probe_batch, time_updates

    batch = probe_batch(TINY, 16)
    assert batch.num_pairs == 16
    assert int(batch.src_ids.max()) <= TINY.src_vocab_size  # EOS = the shortlist size
    assert int(batch.tgt_ids.max()) <= TINY.tgt_vocab_size
    for name in ("fp32", "bf16"):
        assert time_updates(TINY, 16, name) > 0
