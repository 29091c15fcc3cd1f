"""tests/faults.py's hang guard tells a hang from slowness (issue 59, item 7): real children,
one blocked and one busy, on whatever load the machine has."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest
from faults import HangError, run_unless_hung


def python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_a_child_blocked_on_a_fifo_is_a_hang(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    start = time.monotonic()
    with pytest.raises(HangError, match="hung: no CPU time and nothing runnable for 3 s"):
        run_unless_hung(python(f"open({str(fifo)!r}).read()"), python=False, quiet=3)
    assert time.monotonic() - start < 600


def test_a_sleeping_child_is_a_hang_and_its_tree_is_killed(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    code = (
        "import subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
        f"open({str(pid_file)!r}, 'w').write(str(child.pid))\n"
        "child.wait()\n"
    )
    with pytest.raises(HangError, match="hung"):
        run_unless_hung(python(code), python=False, quiet=3)
    grandchild = int(pid_file.read_text())
    for _ in range(100):  # reaped by init once killed
        if (
            not os.path.exists(f"/proc/{grandchild}")
            or " Z " in Path(f"/proc/{grandchild}/stat").read_text()
        ):
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"pid {grandchild} outlived the hang")


def test_a_busy_child_is_slow_not_hung_however_long_it_takes() -> None:
    """About 4 s of CPU time, longer than ``quiet`` on any machine, at the lowest priority: on
    a loaded machine far longer in wall time. A wall-clock guard of ``quiet`` would fail it."""
    code = (
        "import os, time\nos.nice(19)\nend = time.process_time() + 4\n"
        "while time.process_time() < end: pass\nprint('done')\n"
    )
    done = run_unless_hung(python(code), python=False, quiet=2)
    assert done.returncode == 0 and done.stdout == "done\n"


def test_a_busy_child_whose_children_compute_is_not_hung() -> None:
    """The parent waits (asleep) while its child computes: the tree's CPU time counts."""
    inner = "import time\\nend = time.process_time() + 4\\nwhile time.process_time() < end: pass"
    code = f"import subprocess, sys\nsubprocess.run([sys.executable, '-c', '{inner}'], check=True)"
    done = run_unless_hung(python(code), python=False, quiet=2)
    assert done.returncode == 0, done.stderr


def test_a_child_that_never_stops_computing_runs_away() -> None:
    with pytest.raises(HangError, match="ran away: over 2 s of CPU time"):
        run_unless_hung(python("while True: pass"), python=False, cpu_limit=2)


def test_output_larger_than_a_pipe_is_drained_not_taken_for_a_hang() -> None:
    done = run_unless_hung(python("print('x' * 1_000_000)"), python=False, quiet=3)
    assert len(done.stdout) == 1_000_001
