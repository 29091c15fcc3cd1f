"""``rescorer train`` under the real torchrun (gloo on CPU): two ranks are one process with twice
the batch, a rank that dies ends the job with one clear line, and --resume goes on."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import TINY_SYSTEM
from safetensors.torch import load_file

from rescorer.constants import WEIGHTS_FILE

pytestmark = pytest.mark.slow

TABLE = TINY_SYSTEM / "phrase-table.gz"
SIZES = [
    "--hidden-size", "8", "--embed-size", "6", "--maxout-units", "5", "--src-vocab-size", "200",
    "--tgt-vocab-size", "200", "--device", "cpu", "--precision", "fp32",
]  # fmt: skip
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def torchrun(*args: str) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
            "2", "-m", "rescorer", "train", str(TABLE), *SIZES, *args]  # fmt: skip


def log_of(model: Path) -> list[dict[str, object]]:
    path = model / "train.log.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.parametrize("direction", ["forward", "inverse"])
def test_two_ranks_train_as_one_process_with_twice_the_batch(
    tmp_path: Path, direction: str
) -> None:
    """Each rank takes its own half of every group of batches and the loss is scaled so the
    summed gradient is the single process's: same weights after 30 updates, loss falling. An
    inverse model (issue 24) trains under torchrun the same way."""
    flags = ["--max-updates", "30", "--valid-every", "30", "--log-every", "10"]
    flags += ["--direction", direction]
    ddp, single = tmp_path / "ddp", tmp_path / "single"
    proc = subprocess.run(
        torchrun("-o", str(ddp), "--batch-size", "8", *flags),
        env=ENV,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "x 2 ranks" in proc.stderr
    assert proc.stderr.count("update 30: validation perplexity") == 1  # rank 0 alone speaks
    cmd = [sys.executable, "-m", "rescorer", "train", str(TABLE), *SIZES, "-o", str(single)]
    subprocess.run([*cmd, "--batch-size", "16", *flags], env=ENV, check=True, timeout=300)

    a, b = load_file(ddp / WEIGHTS_FILE), load_file(single / WEIGHTS_FILE)
    assert a.keys() == b.keys()
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=1e-4, atol=1e-5, msg=name)
    losses = [r["train_loss"] for r in log_of(ddp) if "train_loss" in r]
    assert len(losses) == 3 and losses[-1] < losses[0]
    assert [r["update"] for r in log_of(ddp)] == [r["update"] for r in log_of(single)]
    assert json.loads((ddp / "provenance.json").read_text())["world_size"] == 2
    assert json.loads((ddp / "config.json").read_text())["direction"] == direction


def rank_pid(rank: int, parent: int) -> int | None:
    """The pid of the torchrun worker with RANK=rank under ``parent``."""
    out = subprocess.run(["pgrep", "-P", str(parent)], capture_output=True, text=True).stdout
    for pid in map(int, out.split()):
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"RANK={rank}".encode() in env:
            return pid
    return None


def test_a_killed_rank_ends_the_job_and_resume_continues(tmp_path: Path) -> None:
    model = tmp_path / "model"
    flags = ["--batch-size", "8", "--valid-every", "20", "--log-every", "20"]
    proc = subprocess.Popen(
        torchrun("-o", str(model), *flags, "--max-time", "3m"),
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    # a hang guard only (the job ends by itself at --max-time): minutes for a slow machine
    # to start two ranks and reach the first validation (issue 68)
    deadline = time.monotonic() + 600
    while (
        time.monotonic() < deadline
        and proc.poll() is None
        and not any("valid_ppl" in r for r in log_of(model))
    ):
        time.sleep(0.1)
    victim = rank_pid(1, proc.pid)
    assert victim is not None, "no worker with RANK=1 found"
    os.kill(victim, signal.SIGKILL)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode != 0
    assert "rank      : 1" in err and "SIGKILL" in err  # torchrun's report names the dead rank
    # Rank 0 learns of the death either from its failed collective or from the SIGTERM that
    # torchrun sends the surviving ranks, whichever comes first; both end it with its state
    # saved for --resume.
    line = next(
        (ln for ln in err.splitlines() if ln.startswith("rescorer train: error: rank 0")), ""
    )
    died = "another rank died" in line and "continues with --resume" in line
    assert died or "rescorer train: interrupted by SIGTERM" in err, err[-3000:]

    saved = torch.load(model / "train-state.pt", weights_only=True)["run"]["update"]
    assert saved >= 20
    target = saved + 20
    done = subprocess.run(
        torchrun("-o", str(model), *flags, "--resume", "--max-updates", str(target)),
        env=ENV,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"resuming at update {saved:,}" in done.stderr
    assert f"stopped (max-updates) after {target:,} updates" in done.stderr
    assert log_of(model)[-1]["update"] == target
