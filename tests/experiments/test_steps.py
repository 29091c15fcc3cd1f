"""The work folder's steps run several chains at once (WorkDir.run_chains, table1.py --jobs):
real commands (``sh``, ``sleep``), no Moses needed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

import pytest
from conftest import DATA_DIR, ROOT, TINY_SYSTEM

from rescorer.errors import RescorerError
from rescorer.experiments.processes import descendants
from rescorer.experiments.steps import StepError, WorkDir


def say_lines(work: WorkDir, tag: str) -> None:
    for i in range(300):
        work.say(f"table1: {tag} line {i} " + "x" * 200)


def test_two_chains_print_whole_lines(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """Each line of the driver is written whole: two chains' lines never run into each
    other (print() writes a line and its end apart)."""
    work = WorkDir(tmp_path / "work")
    work.run_chains([partial(say_lines, work, "a"), partial(say_lines, work, "b")], jobs=2)
    lines = capfd.readouterr().err.splitlines()
    assert len(lines) == 600
    assert all(line.startswith("table1: ") and line.endswith("x" * 200) for line in lines)


def run_step(work: WorkDir, name: str, *argv: str) -> None:
    work.step(name, lambda step: (step.run(list(argv)), {})[1])


def test_a_failing_chain_ends_the_running_one_and_its_error_is_raised(tmp_path: Path) -> None:
    work = WorkDir(tmp_path / "work", echo=lambda msg: None)
    chains = [
        partial(run_step, work, "slow", "sleep", "60"),  # ended, never recorded as done
        partial(run_step, work, "fails", "sh", "-c", "sleep 0.5; echo broken >&2; exit 3"),
        partial(run_step, work, "later", "true"),  # waits for a free worker: never starts
    ]
    start = time.monotonic()
    with pytest.raises(StepError, match=r"step fails: sh exited with status 3 \(broken\)"):
        work.run_chains(chains, jobs=2)
    assert time.monotonic() - start < 30  # not the 60 s of the slow one
    assert not (work.root / "slow" / "done.json").exists()
    assert not (work.root / "later").exists()


def test_one_job_runs_the_chains_in_order_in_this_thread(tmp_path: Path) -> None:
    order: list[str] = []
    work = WorkDir(tmp_path / "work", echo=order.append)
    work.run_chains([partial(run_step, work, name, "true") for name in "abc"], jobs=1)
    assert [line.split(":")[1].strip() for line in order if "running" in line] == list("abc")


def test_a_second_driver_on_the_same_work_folder_is_refused(tmp_path: Path) -> None:
    """Two drivers in one work folder would run the same steps at once; the lock is held
    by a process (here one that sleeps) and ends with it, even killed."""
    root = tmp_path / "work"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import time; from pathlib import Path; "
         "from rescorer.experiments.steps import WorkDir; "
         f"WorkDir(Path({str(root)!r})).lock(); print('held', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        with pytest.raises(RescorerError) as refused:
            WorkDir(root).lock()
        assert str(refused.value) == (
            f"{root} is in use by another table1 run (pid {holder.pid}, {root / 'driver.lock'}): "
            "wait for it to end, or end it and run this command again"
        )
    finally:
        holder.kill()
        holder.wait()
    WorkDir(root).lock()  # the killed holder's lock ended with it
    assert (root / "driver.lock").read_text() == f"{os.getpid()}\n"


@pytest.mark.parametrize("script", ["help_system.py", "baseline.py", "table1.py"])
def test_a_work_folder_that_is_a_file_is_refused_by_name(tmp_path: Path, script: str) -> None:
    """Each driver (and table1's --plan) says the work path is no folder, without a traceback,
    and leaves the file as it was."""
    afile = tmp_path / "work"
    afile.write_text("not a folder\n")
    argv = {
        "help_system.py": ["--work", str(afile)],
        "baseline.py": [str(DATA_DIR / "tiny-bitext"), "--work", str(afile)],
        "table1.py": [str(TINY_SYSTEM), "--train", "1m", "--work", str(afile), "--plan"],
    }[script]
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / script), *argv],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 1, proc.stderr
    assert f"{afile}: not a folder (expected a work folder" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert afile.read_text() == "not a folder\n"


# A driver (rescorer.cli.drivers.drive, as every scripts/ driver ends) whose step runs a real
# long command: sh, which starts two sleeps and waits
DRIVER = """
import sys
from pathlib import Path
from rescorer.cli.drivers import drive
from rescorer.experiments.steps import WorkDir

work = WorkDir(Path(sys.argv[1]), prog="demo")
def action():
    work.lock()
    work.step("sleep", lambda s: (s.run(["sh", "-c", "sleep 60 & sleep 60; wait"]), {})[1])
drive("demo", work.root, action)
"""


@pytest.mark.parametrize(("signum", "status"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_driver_interrupted_in_a_step_leaves_no_process_of_the_step_running(
    tmp_path: Path, signum: int, status: int
) -> None:
    """Issue 58.11: the shared piece every driver ends through. The signal goes to the driver
    alone (not its process group, as ``kill PID`` sends it): the step's command and what it
    started end, the driver says so in one line and exits 128+signal; a re-run runs the step
    again (here: it is interrupted again, the lock free)."""
    work = tmp_path / "work"
    for _ in range(2):
        proc = subprocess.Popen(
            [sys.executable, "-c", DRIVER, str(work)], stderr=subprocess.PIPE, text=True
        )
        deadline = time.monotonic() + 60
        while len(started := descendants(proc.pid)) < 3:  # sh and its two sleeps
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr
            time.sleep(0.05)
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == status, err
        name = signal.Signals(signum).name
        assert err.splitlines()[-1] == (
            f"demo: interrupted by {name}; the finished steps in {work} are kept: run the same "
            "command again to go on"
        ), err
        left = [pid for pid in started if os.path.exists(f"/proc/{pid}") and not zombie(pid)]
        assert not left, f"still running: {left}"


def zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] == b"Z"
    except OSError:
        return True
