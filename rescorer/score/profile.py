"""``score --profile``: where the wall time of a run goes.

Each phase is timed around the code that does it. On a GPU the host queues work and returns at
once, so with profiling on every device phase ends with a synchronisation: time lands on the
phase that did the work, at the price of the overlap a normal run has (a profiled run is
slower). Work in ``--workers`` processes shows as the main process waiting for it.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

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


class Phases:
    """Seconds per phase; ``phases("encoder")`` is a context manager timing one stretch."""

    def __init__(self, device: Any = None) -> None:
        self.seconds = dict.fromkeys(PHASES, 0.0)
        self.cuda = device is not None and getattr(device, "type", "") == "cuda"
        self.device = device

    def _sync(self) -> None:
        if self.cuda:
            import torch

            torch.cuda.synchronize(self.device)

    @contextlib.contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        self._sync()
        t = time.perf_counter()
        try:
            yield
        finally:
            self._sync()
            self.seconds[name] += time.perf_counter() - t

    def report(self, wall: float) -> list[str]:
        """A table of the phases against the run's wall time."""
        lines = [f"{'phase':<9} {'seconds':>9} {'share':>6}  what"]
        for name, what in PHASES.items():
            sec = self.seconds[name]
            lines.append(f"{name:<9} {sec:9.2f} {sec / max(wall, 1e-9):6.1%}  {what}")
        rest = wall - sum(self.seconds.values())
        lines.append(f"{'other':<9} {rest:9.2f} {rest / max(wall, 1e-9):6.1%}  everything else")
        lines.append(f"{'wall':<9} {wall:9.2f}")
        return lines


@contextlib.contextmanager
def nothing(name: str) -> Iterator[None]:
    """The stand-in for Phases when profiling is off."""
    yield
