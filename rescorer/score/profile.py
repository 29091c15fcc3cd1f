"""``score --profile``: where the wall time of a run goes.

The timer is rescorer/phases.py's (a profiled run synchronises a GPU at every phase, so it is
slower). Work in ``--workers`` processes shows as the main process waiting for it.

:class:`WallClock` splits the whole run's wall time, from the process's start, into adjacent
stretches (imports, model load, worker start, first chunk, steady state, drain, rename): the
phases above are a breakdown of the main process's time inside the chunk stretches.
"""

from __future__ import annotations

import os
import time
from typing import Any

from rescorer.phases import PhaseTimer, nothing

__all__ = ["PHASES", "STRETCHES", "Phases", "WallClock", "nothing", "process_start"]

# The phases in pipeline order, with what each covers.
PHASES = {
    "read": "read and decompress the input (chunking)",
    "parse": "validate and encode lines (or wait for the workers that do)",
    "trees": "build the chunk's prefix trees and index arrays (host)",
    "h2d": "copy the chunk's index arrays to the device",
    "encoder": "the encoder over the prefix tree of sources",
    "decoder": "per-source decoder terms and the decoder recurrence",
    "readout": "deep output and softmax on packed positions",
    "d2h": "copy scores back",
    "format": "format lines and compress the gzip member (or wait for the workers)",
    "write": "write; fsync and record progress (every --checkpoint-every seconds)",
}


class Phases(PhaseTimer):
    """Seconds per phase of a scoring run; ``phases("encoder")`` times one stretch."""

    def __init__(self, device: Any = None) -> None:
        super().__init__(PHASES, device)


# The stretches of a whole run, in order: each ends where the next begins, so they add up to
# the wall time from the process's start to the summary (WallClock).
STRETCHES = {
    "start and imports": "the interpreter's start, the command line, the checks, the imports, the "
    "coverage check",
    "model load": "read the model(s) onto the device",
    "scorers": "set up the scorers (with --compile: wrap the kernels for torch.compile)",
    "worker start": "open the input and OUT.partial, start the workers (until they are ready)",
    "first chunk": "the first chunk read, parsed, scored and written (a first compile here)",
    "steady state": "the chunks after it, until the last one is parsed and submitted",
    "drain": "the chunks still on the device or in the workers, written; the last fsync",
    "final rename": "stop the workers; the manifest; OUT.partial renamed to OUT",
    "summary": "the lines above",
}


def process_start() -> float | None:
    """When this process started (``time.time()`` seconds), from /proc (Linux): its start in
    clock ticks after boot against the seconds since boot now, to 1/100 s; None elsewhere."""
    try:
        with open("/proc/self/stat") as f:
            stat = f.read()
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        ticks = int(stat[stat.rindex(")") + 2 :].split()[19])  # field 22, starttime
        return time.time() - (uptime - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return None


class WallClock:
    """The wall time of a whole run, stretch by stretch (STRETCHES): ``mark(name)`` ends the
    stretch ``name`` now. It starts when the process did (:func:`process_start`), or, where
    that is unknown, when it is made (and says so)."""

    def __init__(self) -> None:
        start = process_start()
        self.from_process = start is not None
        self.start = start if start is not None else time.time()
        self.last = self.start
        self.seconds = dict.fromkeys(STRETCHES, 0.0)

    def mark(self, name: str) -> None:
        now = time.time()
        self.seconds[name] += now - self.last
        self.last = now

    def report(self) -> list[str]:
        """The stretches against the wall time so far (the summary ends now); what the
        process does after these lines (its exit) is the only time not in them."""
        self.mark("summary")
        wall = self.last - self.start
        since = "the process's start" if self.from_process else "score's start (no /proc)"
        lines = [f"wall time {wall:.2f} s from {since}, stretch by stretch:"]
        width = max(map(len, STRETCHES))
        for name, what in STRETCHES.items():
            sec = self.seconds[name]
            lines.append(f"  {name:<{width}} {sec:8.2f} {sec / max(wall, 1e-9):6.1%}  {what}")
        rest = wall - sum(self.seconds.values())  # rounding only: the stretches are adjacent
        lines.append(f"  {'remainder':<{width}} {rest:8.2f} {rest / max(wall, 1e-9):6.1%}")
        lines.append("  then the interpreter's exit, after these lines: not timed here")
        return lines
