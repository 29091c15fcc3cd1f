"""Where the wall time of a run goes, phase by phase (``score --profile``, ``train --profile``).

Each phase is timed around the code that does it. Phases nest: time spent in an inner phase
(the embedding lookups inside the encoder) counts for the inner one only, so the shares add up
to the wall time. On a GPU the host queues work and returns at once, so every phase starts and
ends with a synchronisation: time lands on the phase that did the work, at the price of the
overlap a normal run has (a profiled run is slower).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Mapping
from typing import Any


class PhaseTimer:
    """Seconds per phase of ``phases`` (name -> what it covers, in report order);
    ``timer("encoder")`` is a context manager timing one stretch, ``start``/``stop`` the same
    for code that cannot be wrapped (hooks)."""

    def __init__(self, phases: Mapping[str, str], device: Any = None) -> None:
        self.phases = dict(phases)
        self.seconds = dict.fromkeys(self.phases, 0.0)
        self.cuda = device is not None and getattr(device, "type", "") == "cuda"
        self.device = device
        self._open: list[list[Any]] = []  # [name, start] of the open phases, innermost last

    def _sync(self) -> None:
        if self.cuda:
            import torch

            torch.cuda.synchronize(self.device)

    def start(self, name: str) -> None:
        """Open phase ``name``; the enclosing phase, if any, stops counting until it closes."""
        if name not in self.seconds:
            raise KeyError(f"unknown phase {name!r}")
        self._sync()
        now = time.perf_counter()
        if self._open:
            outer = self._open[-1]
            self.seconds[outer[0]] += now - outer[1]
        self._open.append([name, now])

    def stop(self) -> None:
        """Close the innermost open phase; the enclosing one counts again."""
        self._sync()
        now = time.perf_counter()
        name, began = self._open.pop()
        self.seconds[name] += now - began
        if self._open:
            self._open[-1][1] = now

    @contextlib.contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        self.start(name)
        try:
            yield
        finally:
            self.stop()

    def report(self, wall: float) -> list[str]:
        """A table of the phases against the run's wall time."""
        width = max(9, *(len(name) for name in self.phases))
        lines = [f"{'phase':<{width}} {'seconds':>9} {'share':>6}  what"]
        for name, what in self.phases.items():
            sec = self.seconds[name]
            lines.append(f"{name:<{width}} {sec:9.2f} {sec / max(wall, 1e-9):6.1%}  {what}")
        rest = wall - sum(self.seconds.values())
        share = rest / max(wall, 1e-9)
        lines.append(f"{'other':<{width}} {rest:9.2f} {share:6.1%}  everything else")
        lines.append(f"{'wall':<{width}} {wall:9.2f}")
        return lines


@contextlib.contextmanager
def nothing(name: str) -> Iterator[None]:
    """The stand-in for a PhaseTimer when profiling is off."""
    yield
