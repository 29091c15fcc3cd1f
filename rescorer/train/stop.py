"""How a training run is stopped by a signal, and how its durations are written."""

from __future__ import annotations

import signal
import threading
from typing import Any


class StopFlag:
    """Set by SIGINT/SIGTERM: the loop finishes its update, saves and stops (a second ^C kills)."""

    def __init__(self) -> None:
        self.set = False
        self.signum = 0  # the signal that set it
        self._old: dict[int, Any] = {}

    def __enter__(self) -> StopFlag:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._old[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, frame: object) -> None:
        self.set = True
        self.signum = self.signum or signum
        signal.signal(signum, self._old.get(signum, signal.SIG_DFL))

    def __exit__(self, *exc: object) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)


def fmt_time(seconds: float) -> str:
    m, s = divmod(int(seconds), 60)
    h, m = divmod(m, 60)
    return f"{h}h{m:02d}m{s:02d}s" if h else f"{m}m{s:02d}s"
