"""The workers' pool (rescorer/job/pool.py) says which worker died and how, or why it broke
where none died: the words a run ends with (tests/score/test_worker_faults.py kills the
workers of real runs)."""

from __future__ import annotations

import os
import signal
import time
from concurrent.futures.process import BrokenProcessPool

import pytest

from rescorer.job import pool as pool_module
from rescorer.job.pool import Workers

OOM = "(what the out-of-memory killer sends)"


def _nothing() -> None:  # each worker's start
    pass


def _refuse() -> None:
    raise ValueError("this result cannot be read back")


class Unreadable:
    def __reduce__(self) -> tuple[object, ...]:
        return _refuse, ()


def _unreadable() -> Unreadable:  # in a worker
    return Unreadable()


def test_a_killed_worker_is_named_with_its_signal() -> None:
    pool = Workers(1, _nothing, ())
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
    pool = Workers(1, _nothing, ())
    try:
        with pytest.raises(BrokenProcessPool) as broken:
            pool.submit(_unreadable).result(timeout=120)
        said = pool.death(broken.value)
    finally:
        pool.terminate()
    assert said == "the worker pool broke: ValueError: this result cannot be read back", said


def test_an_early_end_lets_the_task_in_flight_finish() -> None:
    """terminate() (Ctrl-C, an error) ends the workers after their task in flight, not during
    it: one killed while it writes its result left half a message that the executor's reader
    waited on forever."""
    pool = Workers(1, _nothing, ())
    pool.submit(os.getpid).result(timeout=120)  # started
    in_flight = pool.submit(time.sleep, 0.5)
    time.sleep(0.1)
    pool.terminate()
    assert in_flight.result(timeout=0) is None
    assert list(pool._ended.values()) == [0]  # ended by the pool's sentinel, not a signal


def test_a_worker_that_never_finishes_is_killed_after_the_grace(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(pool_module, "GRACE", 0.5)
    pool = Workers(1, _nothing, ())
    pool.submit(os.getpid).result(timeout=120)
    pool.submit(time.sleep, 3600)
    time.sleep(0.1)
    started = time.monotonic()
    pool.terminate()
    assert time.monotonic() - started < 60  # a hang, not a speed limit
    assert list(pool._ended.values()) == [-signal.SIGKILL]
