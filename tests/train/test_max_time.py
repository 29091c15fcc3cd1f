"""Issue 59, item 1: ``train --max-time`` bounds the whole command, on a table that arrives
slowly (a FIFO fed line by line by a thread, as a slow disk or a busy machine delivers it):
reading, counting and encoding are charged, training stops early enough for the final save,
and a setup that eats the whole budget stops at it with one error line, nothing written.
The budgets are sized from what the same command takes here doing nothing (issue 68), so that
a slow, cold or busy machine keeps the margins. Issue 64, item 1: a slow first update leaves
the rest of the budget to the updates."""

from __future__ import annotations

import contextlib
import gzip
import math
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import SAMPLE_TABLE, SLICE

from rescorer.cli.common import command_start
from rescorer.model.encdec import ModelConfig
from rescorer.train.config import TrainConfig
from rescorer.train.deadline import EXIT_RESERVE

FLAGS = ["--hidden-size", "8", "--embed-size", "6", "--maxout-units", "5",
         "--src-vocab-size", "200", "--tgt-vocab-size", "200", "--device", "cpu",
         "--threads", "1", "--precision", "fp32", "--compile", "no",
         "--valid-fraction", "0.1"]  # fmt: skip


class SlowFeeder:
    """Writes ``lines`` into the FIFO ``path`` one every ``delays[k]`` seconds on its k-th full
    pass (the last delay for the passes after), again for every reader that opens it (train
    reads a table three times; the CLI sniffs its first lines and closes it)."""

    def __init__(self, path: Path, lines: list[str], delays: list[float]) -> None:
        self.path, self.lines, self.delays = path, lines, delays
        self.stopped = threading.Event()
        self.passes = 0
        os.mkfifo(path)
        self.thread = threading.Thread(target=self.feed, daemon=True)
        self.thread.start()

    def feed(self) -> None:
        while not self.stopped.is_set():
            try:
                with open(self.path, "w", encoding="utf-8") as fifo:
                    for line in self.lines:
                        if self.stopped.is_set():
                            return
                        fifo.write(line)
                        fifo.flush()
                        time.sleep(self.delays[min(self.passes, len(self.delays) - 1)])
                self.passes += 1
            except BrokenPipeError:  # the reader closed early (the sniff, or a stopped run)
                continue

    def stop(self) -> None:
        self.stopped.set()
        with contextlib.suppress(OSError):  # unblock an open() waiting for a reader
            os.close(os.open(self.path, os.O_RDONLY | os.O_NONBLOCK))
        self.thread.join(10)


def run_train(
    table: Path, out: Path, *flags: str, budget: int = 0
) -> tuple[subprocess.CompletedProcess[str], float]:
    """The command on ``table`` with FLAGS and ``flags`` (``--max-time {budget}s`` if given);
    a hang guard of ten minutes past twice the budget."""
    t0 = time.monotonic()
    argv = ["train", str(table), "-o", str(out), *FLAGS, *flags]
    if budget:
        argv += ["--max-time", f"{budget}s"]
    proc = subprocess.run(
        [sys.executable, "-m", "rescorer", *argv],
        capture_output=True,
        text=True,
        timeout=2 * budget + 600,
    )
    return proc, time.monotonic() - t0


def duration(seconds: int) -> str:
    """``seconds`` as rescorer writes a duration (``1m36s``)."""
    return f"{seconds // 60}m{seconds % 60:02d}s"


@pytest.fixture(scope="module")
def do_nothing(tmp_path_factory: pytest.TempPathFactory) -> float:
    """Seconds the same command takes here doing nothing (no update: the interpreter and torch
    starting, reading, building, the validation and the save), the yardstick of the budgets
    below (issue 68: a fixed 30 s failed on a cold, busy 2-core machine)."""
    out = tmp_path_factory.mktemp("do-nothing") / "model"
    proc, wall = run_train(SAMPLE_TABLE, out, "--max-updates", "0")
    assert proc.returncode == 0, proc.stderr
    return wall


@pytest.mark.slow
def test_a_setup_slower_than_the_budget_stops_at_it(tmp_path: Path, do_nothing: float) -> None:
    """A budget of 30 s (more on a machine slow to do nothing), the table 200 lines at 0.5 s
    each (slower for a larger budget: a pass takes over three budgets), three passes. The old
    code read for 5 minutes and then trained; now the command stops at its budget, inside the
    first pass."""
    budget = max(30, math.ceil(3 * do_nothing))
    lines = SAMPLE_TABLE.read_text().splitlines(True)
    feeder = SlowFeeder(tmp_path / "table.fifo", lines, [max(0.5, 3.3 * budget / len(lines))])
    try:
        proc, wall = run_train(tmp_path / "table.fifo", tmp_path / "model", budget=budget)
    finally:
        feeder.stop()
    assert proc.returncode == 1, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1, proc.stderr
    said = f"rescorer train: error: --max-time {duration(budget)} ran out while reading"
    assert errors[0].startswith(said), errors[0]
    assert "nothing was trained or written" in errors[0]
    assert not (tmp_path / "model").exists()
    assert feeder.passes == 0  # stopped inside the first pass of the table
    # a bound that the old code (three passes, over nine budgets) could not meet
    assert wall < budget + do_nothing + 60, (wall, do_nothing)


@pytest.mark.slow
def test_a_slow_setup_is_charged_warned_about_and_the_run_ends_in_its_budget(
    tmp_path: Path, do_nothing: float
) -> None:
    """The first pass (the fingerprint) of the 200 lines takes S = 16 s (3 times a do-nothing
    run here, if more) of a budget of 2 S, the other passes are fast: a warning says the setup
    took most of it, and the run stops (max-time) with the model saved, within the budget.
    The rest of the command has S, at least twice what it takes here (issue 68: 14 s did not
    hold it on a cold, busy machine)."""
    lines = SAMPLE_TABLE.read_text().splitlines(True)
    slow = max(16, math.ceil(3 * do_nothing))
    budget = 2 * slow
    feeder = SlowFeeder(tmp_path / "table.fifo", lines, [slow / len(lines), 0.0])
    try:
        proc, _ = run_train(tmp_path / "table.fifo", tmp_path / "model", budget=budget)
    finally:
        feeder.stop()
    assert proc.returncode == 0, proc.stderr
    warning = re.search(r"warning: the setup \(reading, counting, encoding, building\) took "
                        rf"(\d+)m(\d\d)s, (\d+)% of --max-time {duration(budget)}",
                        proc.stderr)  # fmt: skip
    assert warning, proc.stderr
    assert 60 * int(warning[1]) + int(warning[2]) >= slow - 1 and int(warning[3]) >= 50
    stopped = re.search(r"stopped \(max-time\) after ([\d,]+) updates, [\d.]+ epochs, "
                        r"(\d+)m(\d\d)s", proc.stderr)  # fmt: skip
    assert stopped, proc.stderr
    # the final validation and save included
    assert 60 * int(stopped[2]) + int(stopped[3]) <= budget + 1, proc.stderr
    assert (tmp_path / "model" / "model.safetensors").exists()


class FakeClock:
    """rescorer.train's ``time``: a monotonic clock that only the test advances (``offset``),
    so that what a run does with its budget does not depend on how fast this machine is."""

    def __init__(self) -> None:
        self.offset = 1000.0

    def __getattr__(self, name: str) -> object:
        return getattr(time, name)

    def monotonic(self) -> float:
        return self.offset


@pytest.mark.slow
def test_a_slow_first_update_leaves_the_budget_to_the_updates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 64, item 1: 'train --max-time 15m' on 1,063,617 pairs stopped after one update:
    the reserve for the final validation (5,000 pairs) was priced at a rate that counted the
    first update's compile (64 pairs in about 50 s), so it looked like an hour. Here a
    validation set of real size (thousands of pairs), a first update of 60 s, 0.25 s for each
    after it and 5 s for a validation (a fake clock, which nothing else advances) under a
    budget of 3 minutes: the updates go on to the last tenth of the budget, and the run ends
    inside it, its exit included."""
    import rescorer.train.budget as budget
    import rescorer.train.loop as loop
    import rescorer.train.setup as setup

    lines = gzip.decompress(SLICE.read_bytes()).decode("utf-8").splitlines(keepends=True)
    table = tmp_path / "pt.txt"  # three copies of the real slice, each with its own sources
    table.write_text("".join(ln.replace(" |||", f" {k} |||", 1) for k in range(3) for ln in lines))
    clock = FakeClock()
    for module in (setup, loop, budget):
        monkeypatch.setattr(module, "time", clock)
    real_step = loop._Trainer.step

    def slow_step(self: loop._Trainer, index: np.ndarray) -> tuple[int, int, float | None]:
        clock.offset += 60.0 if self.run_state.update == 0 else 0.25
        return real_step(self, index)

    real_evaluate = loop.evaluate

    def slow_evaluate(*args: Any) -> tuple[float, int]:
        clock.offset += 5.0
        return real_evaluate(*args)

    monkeypatch.setattr(loop._Trainer, "step", slow_step)
    monkeypatch.setattr(loop, "evaluate", slow_evaluate)
    model = ModelConfig(src_vocab_size=200, tgt_vocab_size=200, hidden_size=8, embed_size=6,
                        maxout_units=5)  # fmt: skip
    budget_s = 180.0
    cfg = TrainConfig(device="cpu", precision="fp32", compile="no", valid_fraction=0.5,
                      max_time=budget_s, quiet=True)  # fmt: skip
    result = loop.train(str(table), tmp_path / "model", model, cfg)
    assert result.valid_pairs >= 2000, result
    assert result.stopped_by == "max-time", result
    # the old code: one update, 65 s of the 180; the process's exit is left its reserve
    assert 0.9 * budget_s <= result.seconds <= budget_s - EXIT_RESERVE, result
    assert (tmp_path / "model" / "model.safetensors").exists()


def test_the_budget_counts_from_the_process_start() -> None:
    """Issue 64, item 1: a 'train --max-time 3m' ended 183-186 s after it was started: the
    budget counted from the command's function, after the interpreter's start and imports, and
    the exit after the final save (torch's teardown) had no reserve (EXIT_RESERVE, the
    slow-first-update test). The console entry point, entered 1.5 s into its process, dates the
    command's start back to the process's; a command invoked in this longer-lived process
    counts from now."""
    code = (
        "import time; time.sleep(1.5)\n"
        "import rescorer.cli as c\n"
        "from rescorer.cli.common import command_start\n"
        "c.cli = lambda **kw: print(time.monotonic() - command_start())\n"
        "c.main()\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert float(proc.stdout) >= 1.5, proc.stdout
    assert abs(command_start() - time.monotonic()) < 5
