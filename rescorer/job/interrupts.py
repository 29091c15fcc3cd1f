"""Ctrl-C and SIGTERM held while the main thread is inside the worker pool's machinery
(:func:`held`), and taken as soon as it is out. No torch here.

Python raises KeyboardInterrupt (and the CLI's Terminated, on SIGTERM) between any two bytecodes
of the main thread, also between a lock's acquisition and the ``with`` that would release it.
Inside ``concurrent.futures`` that leaves a lock the executor's own thread needs held forever
(a future's condition, the idle-worker semaphore), and the job hung at its clean-up instead of
ending with its "interrupted" line: 1 Ctrl-C in 40 on a busy machine (issue 65's pool). So the
calls into the pool (submit, a future's result or state) run with the handlers
of SIGINT and SIGTERM replaced by one that notes the signal; the first one noted is raised
when the call returns, by the handler that was there, at a point where nothing is held. A second
signal during the call is raised at once (a worker that never answers cannot make Ctrl-C wait
forever). Outside the main thread, which alone receives them, and for a signal that is ignored
or has the system's default action (SIGTERM outside the CLI), nothing changes.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from types import FrameType
from typing import Any, TypeVar

__all__ = ["done", "held", "result"]

T = TypeVar("T")
_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_Handler = Callable[[int, FrameType | None], Any]


@contextlib.contextmanager
def held() -> Iterator[None]:
    """The block runs with SIGINT and SIGTERM noted, not raised; the first noted is raised
    after it (module docstring)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before: dict[int, _Handler] = {}
    for signum in map(int, _SIGNALS):
        handler = signal.getsignal(signum)
        if callable(handler):  # not SIG_IGN, SIG_DFL or one set outside Python
            before[signum] = handler
    noted: list[int] = []

    def note(signum: int, frame: FrameType | None) -> None:
        if noted:  # the second: at once
            _restore(before)
            before[signum](signum, frame)
        noted.append(signum)

    for signum in before:
        signal.signal(signum, note)
    try:
        yield
    finally:
        _restore(before)
        if noted:
            before[noted[0]](noted[0], None)


def _restore(before: dict[int, _Handler]) -> None:
    for signum, handler in before.items():
        signal.signal(signum, handler)


def result(future: Future[T]) -> T:
    """``future.result()``, Ctrl-C held until it returns (:func:`held`)."""
    with held():
        return future.result()


def done(future: Future[Any]) -> bool:
    """``future.done()``, Ctrl-C held until it returns (:func:`held`)."""
    with held():
        return future.done()
