"""scripts/train_snapshots.py: a signal sent to the script reaches the training it runs, which
saves its state and stops; the script stops too, and nothing is left running."""

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
from conftest import ROOT, TINY_SYSTEM

SCRIPT = ROOT / "scripts" / "train_snapshots.py"
FLAGS = [
    "--hidden-size", "8", "--embed-size", "6", "--maxout-units", "5", "--src-vocab-size", "200",
    "--tgt-vocab-size", "200", "--batch-size", "16", "--valid-every", "1000000", "--log-every", "1",
]  # fmt: skip


def running(pattern: str) -> list[int]:
    """Pids of the processes whose command line holds ``pattern``, this test's own aside."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if pattern in cmdline:
            found.append(int(pid))
    return found


def group_and_session(pid: int) -> tuple[int, int]:
    """A process's group and session ids (/proc/PID/stat's 5th and 6th fields)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[2]), int(fields[3])


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_signal_to_the_script_stops_the_training_with_its_state_saved(
    tmp_path: Path, signum: signal.Signals
) -> None:
    model = tmp_path / "fwd"
    argv = [
        sys.executable,
        str(SCRIPT),
        str(model),
        "--table",
        str(TINY_SYSTEM / "phrase-table.gz"),
    ]
    proc = subprocess.Popen(
        [*argv, "--snapshot", "1h", "--", *FLAGS],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_DFL),  # not nohup's
    )
    log = model / "train.log.jsonl"
    deadline = time.monotonic() + 240
    while not (log.exists() and "pairs_per_s" in log.read_text()):  # updates are being made
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.2)
    # the training: its own process group (a terminal's Ctrl-C reaches it once, through the
    # script), the script's session (the scheduler's autogroup, which nice-19 jobs set)
    (child,) = [pid for pid in running(str(model)) if pid != proc.pid]
    assert group_and_session(child) == (child, group_and_session(proc.pid)[1])
    proc.send_signal(signum)  # to the script alone, as `kill PID` (or a hangup) sends it
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signum, err
    assert f"train_snapshots: {signum.name}: the training stopped" in out
    assert "the state is saved" in err  # the training's own last line
    assert running(str(model)) == []  # no training left behind
    # the state holds the last update made, not the last periodic save's
    records = [json.loads(line) for line in log.read_text().splitlines()]
    state = torch.load(model / "train-state.pt", map_location="cpu", weights_only=True)
    assert state["run"]["update"] == max(r["update"] for r in records if "update" in r)
    assert not (tmp_path / "fwd@1h").exists()
