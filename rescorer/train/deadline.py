"""``train --max-time``: a bound on the whole command's wall time (issue 59).

The budget counts from the start of the process (:func:`process_age`: the interpreter's start
too, as a Slurm limit does): reading the table (its fingerprint and the two passes that count
the vocabularies and encode the pairs), building and compiling, the updates, the final
validation and save, and the exit (:data:`EXIT_RESERVE`). Three pieces keep it:

- :class:`Deadline`: while a stage that reports nothing runs (the passes over the data, a first
  compile), an interval timer (SIGALRM, the main thread only) raises :class:`OutOfTime` at the
  deadline, even inside a blocked read (a slow pipe, a stalled file system);
- the loop stops early enough for the next update and the final checkpoint (validation and
  save), priced at the rate of the updates after the first (whose compile would make a
  validation of thousands of pairs look like an hour: issue 64); before it stops on that
  estimate it validates once to measure the checkpoint's cost, and stops on the measurement
  (:func:`checkpoint_reserve`, rescorer/train/budget.py);
- ``--compile auto`` gives up compiling when the first compile runs far past its announced
  time (:data:`COMPILE_GIVE_UP`), and trains eagerly.
"""

from __future__ import annotations

import os
import signal
import threading
from types import FrameType, TracebackType

#: --compile auto stops compiling after this long (the announcement says 15 s to 1 minute on
#: an idle CPU, minutes on a busy one: issue 59 saw 17 minutes at load 5), or after half of
#: what is left of --max-time, whichever comes first; then the updates run eagerly.
COMPILE_GIVE_UP = 240.0

#: The reserve for the final checkpoint is its measured cost times this, and a second.
RESERVE_MARGIN = 1.25

#: Seconds kept for the process's exit after the final save, which the budget counts (a Slurm
#: limit does): torch's teardown took 1.3-3.8 s on a 2-core machine at load 6-9, the most
#: after a compile (issue 64: a 3-minute run ended 4 s past its budget).
EXIT_RESERVE = 5.0

#: The setup (reading, counting, encoding, building) is said to have taken most of --max-time
#: beyond this share of it.
SETUP_WARN_SHARE = 0.5


class OutOfTime(BaseException):
    """Raised by :class:`Deadline` at its deadline (a BaseException, as KeyboardInterrupt: no
    ``except Exception`` on the way swallows it)."""

    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what


class Deadline:
    """``with Deadline(seconds, what):`` raises OutOfTime(what) in the block once ``seconds``
    have passed (None: never). Only in the main thread (elsewhere it does nothing); the
    previous SIGALRM handler and timer come back on leaving."""

    def __init__(self, seconds: float | None, what: str) -> None:
        self.seconds, self.what = seconds, what
        self.armed = False
        self._old: object = None

    def _fire(self, signum: int, frame: FrameType | None) -> None:
        raise OutOfTime(self.what)

    def __enter__(self) -> Deadline:
        if self.seconds is None or threading.current_thread() is not threading.main_thread():
            return self
        if self.seconds <= 0:
            raise OutOfTime(self.what)
        self._old = signal.signal(signal.SIGALRM, self._fire)
        signal.setitimer(signal.ITIMER_REAL, self.seconds)
        self.armed = True
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.armed:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self._old)  # type: ignore[arg-type]
            self.armed = False


def process_age() -> float:
    """Seconds since this process started (the interpreter's start and the imports before the
    command runs), from /proc on Linux; 0 where it cannot tell."""
    try:
        with open("/proc/self/stat", encoding="ascii") as f:
            after_name = f.read().rsplit(")", 1)[1].split()  # fields 3.. (the name may hold spaces)
        with open("/proc/uptime", encoding="ascii") as f:
            uptime = float(f.read().split()[0])
        started = int(after_name[19]) / os.sysconf("SC_CLK_TCK")  # field 22: seconds after boot
    except (OSError, ValueError, IndexError):
        return 0.0
    return max(0.0, uptime - started)


def compile_give_up(budget_left: float | None) -> float:
    """Seconds after which --compile auto gives up a first compile, ``budget_left`` seconds of
    --max-time being left when it starts (None: no --max-time)."""
    if budget_left is None:
        return COMPILE_GIVE_UP
    return min(COMPILE_GIVE_UP, 0.5 * max(budget_left, 0.0))


def checkpoint_reserve(measured: float | None, valid_pairs: int, pairs_per_s: float) -> float:
    """Seconds to keep for the final checkpoint: the last one's measured cost, a quarter more
    and a second (a busy machine's jitter), else an estimate at ``pairs_per_s``, the training
    rate measured without the first update's compile (scoring a validation pair costs less
    than training on one: the training rate bounds it), plus a second for the save."""
    if measured is not None:
        return RESERVE_MARGIN * measured + 1.0
    if pairs_per_s <= 0:
        return 1.0
    return valid_pairs / pairs_per_s + 1.0
