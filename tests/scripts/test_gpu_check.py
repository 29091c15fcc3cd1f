"""scripts/gpu_check.sh on a machine without CUDA: it says what it skips, and its CPU dry run
(GPU_CHECK_DEVICE=cpu, tiny sizes) runs every section and writes the Markdown block."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
import torch
from conftest import GOLDEN, ROOT, SLICE

SCRIPT = ROOT / "scripts" / "gpu_check.sh"
SECTIONS = ("extend", "score", "workers", "pipeline", "precision", "train", "batch")
TRAINING_SECTIONS = ("capture", "ttq", "paper")  # issue 56's: run when named


def gpu_check(out: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """The script writing ``out``, with ``env`` on top of ours (one OpenMP thread)."""
    full = {**os.environ, "OMP_NUM_THREADS": "1", "GPU_CHECK_TESTS": "tests/score/test_gpu.py"}
    full.pop("OUT", None)
    return subprocess.run(
        ["bash", str(SCRIPT), str(out)],
        env={**full, **env},
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the machine without CUDA")
def test_without_cuda_every_gpu_section_says_it_is_skipped(tmp_path: Path) -> None:
    out = tmp_path / "check.md"
    proc = gpu_check(out, GPU_CHECK_TABLE=str(SLICE))
    assert proc.returncode == 0, proc.stderr
    block = out.read_text()
    assert proc.stdout == block  # the same block on stdout and in the file
    assert block.startswith("### GPU check (") and "no CUDA device" in block.splitlines()[0]
    assert re.search(r"`pytest tests/score/test_gpu.py` \(exit 0\): \d+ skipped", block)
    skipped = "skipped: no CUDA device here (torch.cuda.is_available() is False)"
    assert block.count(skipped) == len(SECTIONS), block
    assert (tmp_path / "check.log").exists()


@pytest.mark.slow
def test_the_cpu_dry_run_runs_every_section(tmp_path: Path) -> None:
    """Every command the GPU run makes, made on the CPU at tiny sizes: a broken option or a
    renamed script fails here, not on the first GPU."""
    out = tmp_path / "dry.md"
    proc = gpu_check(
        out,
        GPU_CHECK_DEVICE="cpu",
        GPU_CHECK_SECTIONS=" ".join(SECTIONS),
        GPU_CHECK_SIZE="tiny",
        GPU_CHECK_TABLE=str(SLICE),
        GPU_CHECK_LINES="400",
        GPU_CHECK_BASELINE_LINES="100",
        GPU_CHECK_REPEATS="1",
        GPU_CHECK_PRECISIONS="fp32",
        GPU_CHECK_COMPILE="no",
        GPU_CHECK_WORKERS="1 0",  # 0, the ratio's base, runs first whatever its place
        GPU_CHECK_WORKER_LINES="400",
        GPU_CHECK_NOOP_WORKERS="2",
        GPU_CHECK_TRAIN_SECONDS="120",
        GPU_CHECK_TRAIN_UPDATES="6",
        GPU_CHECK_LOG_EVERY="2",
        GPU_CHECK_PROFILE_UPDATES="4",
        GPU_CHECK_MODEL=str((GOLDEN / "model").relative_to(ROOT)),  # relative, as a user gives it
        GPU_CHECK_PAIRS="100",
        GPU_CHECK_GEMM="64",
        GPU_CHECK_EXTEND_LINES="300",
        GPU_CHECK_EXTEND_BEAMS="2 3",
        GPU_CHECK_EXTEND_MODELS=str((GOLDEN / "model").relative_to(ROOT)),
        GPU_CHECK_BATCHES="2 4",
        GPU_CHECK_BATCH_SECONDS="120",
        GPU_CHECK_BATCH_VALID_EVERY="3",
    )
    assert proc.returncode == 0, proc.stderr
    block = out.read_text()
    assert "FAILED" not in block and "differs" not in block, block
    assert "A dry run on the CPU" in block
    assert "| end to end, gzip to gzip (fp32), the same lines | 400 |" in block  # bench_score
    # workers: the 0-worker row first, at 1.00, then the 1-worker row
    zero = r"^\| 0 \| [\d.]+ \| [\d,]+ \| 1\.00 \| [\d.]+ \|\n"
    assert re.search(zero + r"\| 1 \| [\d.]+ \| [\d,]+ \| [\d.]+ \| [\d.]+ \|$", block, re.M), block
    assert "byte-identical to the 0-worker run's (cmp): True" in block  # issue 57
    assert "/dev/shm (size, free): " in block
    noop = r"^\| read, cut, keep order, write \| 2 \| [\d.]+ \| [\d,]+ \| [\d.]+ \|$"
    assert re.search(noop, block, re.M), block
    assert re.search(r"^wall time [\d.]+ s from .*\n(.*\n)*  first chunk ", block, re.M), block
    assert re.search(r"^\| no overlap \| [\d.]+ \| [\d,]+ \| [\d.]+ \|$", block, re.M)  # pipeline
    assert "outputs identical: True" in block
    # extend: random weights of the tiny size, then the golden model, each at N = 2 and 3
    for model in ("hidden 16", "model"):
        for beam in (2, 3):
            counts = r" \| [\d,]+ \| [\d,.]+" * 2  # sources, sources/s, new pairs, new pairs/s
            row = rf"^\| {model} \| {beam}{counts} \| [\d,]+ \| [\d.]+x \|$"
            assert re.search(row, block, re.M), block
    assert "| abs(x - fp32), 99th percentile |" in block  # bench_precision
    assert re.search(r"where the time of 3 updates went.*\n(.*\n)*  backward ", block)  # --profile
    assert re.search(r"^\| no \| 6 \| [\d,]+ \| 2 \| [\d,]+ \|$", block, re.M), block  # train
    # batch: 6 updates each (GPU_CHECK_TRAIN_UPDATES), validated at 3 and 6; the epochs show
    # that --batch-size took effect: batch 4 went through twice the pairs of batch 2
    epochs = {}
    for batch in (2, 4):
        row = rf"^\| {batch} \| 6 \| [\d.]+ \| [\d,]+ \| ([\d.]+) \| 2 \| [\d.]+ \| [\d.]+ \|$"
        found = re.search(row, block, re.M)
        assert found, block
        epochs[batch] = float(found[1])
    assert epochs[2] > 0 and abs(epochs[4] / epochs[2] - 2) < 0.1, epochs


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the machine without CUDA")
def test_without_cuda_issue_56s_sections_say_they_are_skipped(tmp_path: Path) -> None:
    out = tmp_path / "check.md"
    proc = gpu_check(
        out, GPU_CHECK_TABLE=str(SLICE), GPU_CHECK_SECTIONS=" ".join(TRAINING_SECTIONS)
    )
    assert proc.returncode == 0, proc.stderr
    block = out.read_text()
    skipped = "skipped: no CUDA device here (torch.cuda.is_available() is False)"
    assert block.count(skipped) == len(TRAINING_SECTIONS), block
    for title in ("The captured update against the eager one", "Time to quality",
                  "The paper's model trained to its early stop"):  # fmt: skip
        assert title in block, block
    assert not (tmp_path / "paper-model").exists() and not (tmp_path / "ttq.csv").exists()


@pytest.mark.slow
def test_the_cpu_dry_run_of_the_training_sections(tmp_path: Path) -> None:
    """capture, ttq and paper on the CPU at tiny sizes: bench_train.py's eager and fixed-shape
    rows, the gpu test run (skipped here), one time-to-quality run per batch with its CSV and
    PNG, and the paper run's folder brought back with fp16 weights that load as fp32."""
    out = tmp_path / "dry.md"
    proc = gpu_check(
        out,
        GPU_CHECK_DEVICE="cpu",
        GPU_CHECK_SECTIONS=" ".join(TRAINING_SECTIONS),
        GPU_CHECK_SIZE="tiny",
        GPU_CHECK_TABLE=str(SLICE),
        GPU_CHECK_GEMM="64",
        GPU_CHECK_CAPTURE_BATCHES="4 8",
        GPU_CHECK_CAPTURE_MODES="off on",
        GPU_CHECK_CAPTURE_PRECISIONS="fp32",
        GPU_CHECK_CAPTURE_UPDATES="3",
        GPU_CHECK_CAPTURE_WARMUP="1",
        GPU_CHECK_CAPTURE_PAIRS="300",
        GPU_CHECK_TTQ_BATCHES="2 4",
        GPU_CHECK_TTQ_SECONDS="120",
        GPU_CHECK_TTQ_VALID_PAIRS="8",
        GPU_CHECK_TRAIN_UPDATES="6",
        GPU_CHECK_PAPER_SECONDS="120",
        GPU_CHECK_PAPER_VALID_EVERY="3",
        GPU_CHECK_LOG_EVERY="2",
    )
    assert proc.returncode == 0, proc.stderr
    block = out.read_text()
    assert "FAILED" not in block, block
    for batch in (4, 8):  # capture: the eager row, then the fixed-shape one against it
        for capture, vs_eager in (("off", r"1\.00"), ("on", r"[\d.]+")):
            row = rf"^\| {batch} \| fp32 \| no \| train \| {capture} \| [\d,]+ \| [\d.]+ \| - \|"
            assert re.search(row + rf" {vs_eager} \|", block, re.M), block
    assert re.search(r"`pytest tests/train/test_capture_gpu.py` \(exit 0\): \d+ skipped", block)
    rows = (tmp_path / "ttq.csv").read_text().splitlines()
    assert rows[0] == "run,batch,seconds,update,valid_ppl"
    assert {row.split(",")[1] for row in rows[1:]} == {"2", "4"}  # validated at 4, 6 and 2, 4, 6
    assert (tmp_path / "ttq.png").read_bytes()[:4] == b"\x89PNG"
    assert re.search(
        r"Lowest validation perplexity: batch [24]: validation perplexity [\d.]+", block
    )
    assert "stopped (max-updates) after 6 updates" in block
    folder = tmp_path / "paper-model"
    assert not (folder / "train-state.pt").exists()
    from safetensors.torch import load_file

    from rescorer.model.checkpoint import load_model_dir

    assert {t.dtype for t in load_file(str(folder / "model.safetensors")).values()} == {
        torch.float16
    }
    assert all(p.dtype == torch.float32 for p in load_model_dir(folder)[0].parameters())
    assert "loads as fp32 on the CPU" in block


def test_a_missing_dependency_is_named_and_nothing_is_measured(tmp_path: Path) -> None:
    """isal made unimportable (a module of that name that raises), no wheels to install from:
    exit 1 with what to carry, before any section."""
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / "isal.py").write_text("raise ImportError('isal is not installed here')\n")
    (tmp_path / "wheels").mkdir()
    proc = gpu_check(
        tmp_path / "check.md",
        PYTHONPATH=str(shadow),
        GPU_CHECK_WHEELS=str(tmp_path / "wheels"),
    )
    assert proc.returncode == 1
    assert "rescorer cannot be imported" in proc.stderr and "GPU_CHECK_WHEELS=DIR" in proc.stderr
    assert proc.stdout == ""
