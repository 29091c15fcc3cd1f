"""bench_train.py's floor (issue 66) and its profile by operation (scripts/opprofile.py)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import ROOT, SLICE

from rescorer.batching import PairArraysBuilder
from rescorer.model.encdec import EncoderDecoder, ModelConfig, init_weights_
from rescorer.train.loop import train_step
from rescorer.train.optim import ClippedAdadelta

sys.path.insert(0, str(ROOT / "scripts"))
from benchlib import stream_triad
from opprofile import profile_updates
from trainfloor import OPTIMIZER_BYTES, floor


def test_the_floor_adds_the_products_at_the_peak_and_the_optimizer_at_the_bandwidth() -> None:
    peaks = {"bf16": 1000e9, "fp32": 100e9}
    # 19.4 GFLOP (the paper's update of 64 pairs), 17.3 M parameters at 20 GB/s
    row = floor(19.4e9, 17_300_000, peaks, "bf16", 20e9)
    assert row["gemm_ms_bf16"] == pytest.approx(19.4)
    assert row["gemm_ms_fp32"] == pytest.approx(194.0)
    assert row["optimizer_bytes"] == OPTIMIZER_BYTES * 17_300_000
    assert row["optimizer_ms"] == pytest.approx(1000 * 32 * 17.3e6 / 20e9)  # 27.7 ms
    assert row["floor_ms"] == pytest.approx(19.4 + row["optimizer_ms"])
    assert row["bound"] == "memory"  # bf16 at batch 64: the optimizer's bytes weigh more
    assert floor(4 * 19.4e9, 17_300_000, peaks, "bf16", 20e9)["bound"] == "GEMMs"  # batch 256
    assert floor(19.4e9, 17_300_000, peaks, "fp32", 20e9)["bound"] == "GEMMs"


def test_the_triad_measures_a_bandwidth() -> None:
    assert stream_triad(seconds=0.05, mib=8) > 1e8  # bytes/s


def test_the_profile_charges_every_operation_to_its_phase() -> None:
    config = ModelConfig(
        src_vocab_size=30, tgt_vocab_size=30, hidden_size=8, embed_size=4, maxout_units=4
    )
    model = EncoderDecoder(config)
    init_weights_(model, torch.Generator().manual_seed(0))
    optim = ClippedAdadelta(torch.optim.Adadelta(model.parameters()), compiled=False)
    builder = PairArraysBuilder()
    for i in range(8):
        builder.add([3 + i, 4, 1], [5, 6 + i, 7, 1])
    batch = builder.build().batch(torch.arange(8).numpy())

    def run(phase: object) -> None:
        for _ in range(2):
            train_step(model, optim, batch, "fp32", 1.0, phase=phase)  # type: ignore[arg-type]

    phases, wall, table = profile_updates(run, 2, rows=200)
    assert wall > 0 and phases.seconds["backward"] > 0
    rows = {tuple(line.split()[:2]) for line in table[1:-1]}
    assert ("readout", "aten::logsumexp") in rows or ("readout", "aten::mm") in rows
    assert ("backward", "aten::mm") in rows
    assert any(phase == "optimizer" for phase, _ in rows)
    assert table[-1].startswith("total")
    assert profile_updates(run, 2, rows=0)[2] == []  # the phases only


BASELINE = "f7f99f4"  # issue 66's baseline: before rescorer/cli/ranges.py, which this script uses


@pytest.mark.slow
def test_compare_times_every_row_at_the_commit_then_at_this_checkout(tmp_path: Path) -> None:
    """--compare COMMIT: one command gives the sitting's before and after, row beside row, with
    a package older than the modules the script itself imports (it parses its options with
    rescorer/cli/ranges.py; its child takes them parsed)."""
    known = subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", f"{BASELINE}^{{commit}}"])
    if known.returncode != 0:
        pytest.skip(f"commit {BASELINE} is not in this clone (a shallow one?)")
    proc = subprocess.run(
        [
            sys.executable, str(ROOT / "scripts" / "bench_train.py"), "--table", str(SLICE),
            "--pairs", "300", "--hidden-size", "8", "12", "--updates", "1", "--warmup", "1",
            "--precision", "fp32", "--compile", "no", "--gemm-size", "64",
            "--compare", BASELINE, "--work", str(tmp_path),
        ],
        capture_output=True, text=True, cwd=ROOT, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / BASELINE / "rescorer" / "__init__.py").is_file()
    assert not (tmp_path / BASELINE / "rescorer" / "cli" / "ranges.py").exists()
    out = proc.stdout
    assert out.count("### Training throughput") == 2  # one block per hidden size
    for variant in ("straightforward", "train"):  # the baseline's row, then this checkout's
        assert re.search(rf"^\| {BASELINE} \| - \| 64 \| fp32 \| no \| {variant} \|", out, re.M)
        assert re.search(rf"^\| \w+ \| [\d.]+ \| 64 \| fp32 \| no \| {variant} \|", out, re.M)
    assert out.count("| GEMMs |") + out.count("| memory |") == 8  # 2 sizes x 2 codes x 2
