"""SIGINT and SIGTERM end every command with one line and exit 130 or 143 (issue 27, item 6),
in real processes. train's and score's own handling (state saved, --resume) is tested in
tests/train/test_train.py and tests/score/test_pipeline.py; score's SIGTERM is tested here."""

from __future__ import annotations

import fcntl
import gzip
import os
import re
import signal
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest
from conftest import REAL_INI, SLICE, default_sigint

LINES = gzip.decompress(SLICE.read_bytes()).decode("utf-8").splitlines(keepends=True)
ONE_THREAD = {**os.environ, "OMP_NUM_THREADS": "1"}


def unread(fd: int) -> int:
    """Bytes written to a pipe that its reader has not read yet."""
    return int(struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0])


def interrupt_while_reading_stdin(args: list[str], signum: int) -> tuple[int, str]:
    """Run ``rescorer ARGS`` on a pipe, give it 50 lines and keep the pipe open: once it has
    read them it is inside the command, waiting for more; then send ``signum``."""
    read_end, write_end = os.pipe()
    proc = subprocess.Popen(
        [sys.executable, "-m", "rescorer", *args],
        stdin=read_end,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=ONE_THREAD,
        preexec_fn=default_sigint,
    )
    try:
        os.write(write_end, "".join(LINES[:50]).encode("utf-8"))
        deadline = time.monotonic() + 120
        while unread(read_end) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert proc.poll() is None, proc.communicate()[1]
        time.sleep(0.2)  # past the read, blocked in the next one
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(write_end)
        os.close(read_end)
    return proc.returncode, err


@pytest.mark.slow
@pytest.mark.parametrize(("signum", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
@pytest.mark.parametrize("command", ["check", "filter", "combine", "plot scatter"])
def test_a_signal_ends_a_command_with_one_line_and_128_plus_the_signal(
    command: str, signum: int, status: int, tmp_path: Path, tiny_model_dir: Path
) -> None:
    """Before: exit 1 with click's 'Aborted!' on SIGINT; killed silently by SIGTERM."""
    out = tmp_path / "out"
    args = {
        "check": ["check", "-"],
        "filter": ["filter", "-", "--min-score", "2:0.001", "-o", str(out)],
        "combine": ["combine", "-", "--weights", str(REAL_INI), "--no-lm", "-o", str(out)],
        "plot scatter": ["plot", "scatter", "-", "-m", str(tiny_model_dir), "-o", str(out)],
    }[command]
    code, err = interrupt_while_reading_stdin(args, signum)
    name = signal.Signals(signum).name
    assert (code, err) == (status, f"rescorer {command}: interrupted by {name}\n")
    assert list(tmp_path.iterdir()) == []  # no output, no temporary file left


@pytest.mark.slow
def test_sigterm_stops_score_as_ctrl_c_does_and_resume_finishes(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    """SIGTERM (Slurm's preemption, kill) keeps OUT.partial, says how to resume and exits 143.
    Before: the process died at once (-15) without a word."""
    big = tmp_path / "big.gz"
    big.write_bytes(gzip.compress("".join(LINES * 10).encode("utf-8"), mtime=0))
    cmd = [sys.executable, "-m", "rescorer", "score", str(big), "-m", str(tiny_model_dir),
           "--device", "cpu", "--chunk-bytes", "8192", "--checkpoint-every", "0.02",
           "-q", "--ignore-coverage"]  # fmt: skip
    out = tmp_path / "out.gz"
    record = Path(f"{out}.partial.json")
    proc = subprocess.Popen(
        [*cmd, "-o", str(out)], stderr=subprocess.PIPE, text=True, env=ONE_THREAD
    )
    deadline = time.monotonic() + 120
    while not record.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    # The tiny model has not learned: score warns first (model/verdict.py); then one line.
    lines = [ln for ln in err.strip().splitlines() if not ln.startswith("rescorer score: warning")]
    assert len(lines) == 1 and "--resume" in lines[0] and f"{out}.partial" in lines[0], err
    assert Path(f"{out}.partial").exists() and not out.exists()
    loud = [arg for arg in cmd if arg != "-q"]
    resumed = subprocess.run(
        [*loud, "-o", str(out), "--resume"], check=True, env=ONE_THREAD, capture_output=True
    )
    # The summary says the run resumed, and its pair count is this run's: the two add up.
    said = re.search(rb"resumed at line ([\d,]+), this run scored ([\d,]+) pairs", resumed.stderr)
    assert said, resumed.stderr
    first, pairs = (int(n.replace(b",", b"")) for n in said.groups())
    assert first > 1 and first - 1 + pairs == len(LINES) * 10
    whole = tmp_path / "whole.gz"
    subprocess.run([*cmd, "-o", str(whole)], check=True, env=ONE_THREAD)
    assert out.read_bytes() == whole.read_bytes()
