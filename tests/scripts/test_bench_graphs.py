"""scripts/gpu_check.sh's graphs section (issue 57, item 3: scripts/bench_graphs.py, the model
alone eager against captured) on a machine without CUDA: said to be skipped; and its CPU dry run
at tiny sizes, which runs every command the GPU call makes (``--capture on`` runs the bucketed
shapes eagerly on a CPU) and writes its table."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from conftest import SLICE
from test_gpu_check import gpu_check

TITLE = "The model alone, eager against captured"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the machine without CUDA")
def test_without_cuda_the_graphs_section_says_it_is_skipped(tmp_path: Path) -> None:
    out = tmp_path / "check.md"
    proc = gpu_check(out, GPU_CHECK_TABLE=str(SLICE), GPU_CHECK_SECTIONS="graphs")
    assert proc.returncode == 0, proc.stderr
    block = out.read_text()
    assert TITLE in block and "skipped: no CUDA device here" in block, block
    assert "unknown section" not in proc.stderr


@pytest.mark.slow
def test_the_cpu_dry_run_of_the_graphs_section(tmp_path: Path) -> None:
    out = tmp_path / "dry.md"
    proc = gpu_check(
        out,
        GPU_CHECK_DEVICE="cpu",
        GPU_CHECK_SECTIONS="graphs",
        GPU_CHECK_SIZE="tiny",
        GPU_CHECK_TABLE=str(SLICE),
        GPU_CHECK_PRECISIONS="fp32 bf16",
        GPU_CHECK_GEMM="64",
        GPU_CHECK_GRAPHS_LINES="1200",
        GPU_CHECK_GRAPHS_CHUNK_LINES="500",
        GPU_CHECK_GRAPHS_REPEATS="1",
    )
    assert proc.returncode == 0, proc.stderr
    block = out.read_text()
    assert "FAILED" not in block, block
    assert f"##### {TITLE}" in block and "1,200 pairs" in block and "3 chunks" in block, block
    for precision in ("fp32", "bf16"):  # the eager row, the base; then the bucketed one
        number = r"[\d,.]+"
        for capture, ratio in (("off", r"1\.00"), ("on", number)):
            row = rf"^\| {precision} \| {capture} \| {number} \| {ratio} \| {number} \| {number} \|"
            # no graphs on a CPU; the bucketed scores equal the exact ones (1e-5)
            row += rf" {number} \| 0 \| (\d\.\d\de[+-]\d\d) \|$"
            found = re.search(row, block, re.M)
            assert found, block
            assert float(found[1]) < 1e-5
    padding = r"Bucket padding \(rows run per real row, --capture on\): encoder (\d\.\d\d), "
    found = re.search(padding, block)
    assert found and 1 <= float(found[1]) < 2, block
    assert re.search(r"`pytest tests/score/test_gpu.py -k captured` \(exit 0\): .*skipped", block)
