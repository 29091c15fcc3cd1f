"""The workers' pool (rescorer/job/pool.py) says which worker died and how, or why it broke
where none died: the words a run ends with (tests/score/test_worker_faults.py kills the
workers of real runs)."""

from __future__ import annotations

import os
import signal
from concurrent.futures.process import BrokenProcessPool

import pytest

from rescorer.job.pool import Workers

OOM = "(what the out-of-memory killer sends)"


def _refuse() -> None:
    raise ValueError("this result cannot be read back")


class Unreadable:
    def __reduce__(self) -> tuple[object, ...]:
        return _refuse, ()


def _unreadable() -> Unreadable:  # in a worker
    return Unreadable()


def test_a_killed_worker_is_named_with_its_signal() -> None:
    pool = Workers(1, int, ())
    try:
        pid = pool.submit(os.getpid).result(timeout=120)
        os.kill(pid, signal.SIGKILL)
        with pytest.raises(BrokenProcessPool) as broken:
            pool.submit(os.getpid).result(timeout=60)  # a hang, not a speed limit
        said = pool.death(broken.value)
    finally:
        pool.terminate()
    assert said == f"worker process {pid} was killed by SIGKILL " + OOM


def test_a_pool_broken_with_no_worker_dead_says_why() -> None:
    pool = Workers(1, int, ())
    try:
        with pytest.raises(BrokenProcessPool) as broken:
            pool.submit(_unreadable).result(timeout=120)
        said = pool.death(broken.value)
    finally:
        pool.terminate()
    assert said == "the worker pool broke: ValueError: this result cannot be read back", said
