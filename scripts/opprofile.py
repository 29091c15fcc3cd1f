"""Where each millisecond of a training update goes, by operation: torch's profiler over the
updates, each operation charged to the phase of ``train --profile`` it ran in.

:class:`OpPhases` is a :class:`~rescorer.train.profile.TrainPhases` that also opens a
``torch.profiler.record_function`` range per phase, so one profiled run gives both tables:
the phases' seconds, and per (phase, operation) the self CPU time of every call (an
operation's own time, its children's left out). A phase's ``(Python)`` row is the time the
range itself holds outside any operation: the interpreter between calls. Compiled code shows
as the operations that call it (``CompiledFunction``, ``## Call CompiledFxGraph ... ##``).
The profiler slows small operations down, so the table's total is above the unprofiled wall.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from torch.profiler import ProfilerActivity, profile, record_function

from rescorer.train.profile import TrainPhases

PREFIX = "phase: "


class OpPhases(TrainPhases):
    """TrainPhases whose phases are also ranges of torch's profiler."""

    def __init__(self, device: Any = None) -> None:
        super().__init__(device)
        self._ranges: list[AbstractContextManager[Any]] = []

    def start(self, name: str) -> None:
        super().start(name)
        rng = record_function(PREFIX + name)
        rng.__enter__()
        self._ranges.append(rng)

    def stop(self) -> None:
        self._ranges.pop().__exit__(None, None, None)
        super().stop()


def _phase_of(event: Any) -> str:
    """The innermost phase range around ``event`` (``other`` outside every phase)."""
    parent = event.cpu_parent
    while parent is not None and not parent.name.startswith(PREFIX):
        parent = parent.cpu_parent
    return parent.name[len(PREFIX) :] if parent is not None else "other"


def _shapes(event: Any) -> str:
    dims = [s for s in getattr(event, "input_shapes", None) or [] if s]
    return " ".join("x".join(map(str, s)) for s in dims[:3])


def profile_updates(
    run: Callable[[TrainPhases], Any], updates: int, device: Any = None, rows: int = 30
) -> tuple[TrainPhases, float, list[str]]:
    """Run ``run(phases)`` (``updates`` updates, each ``train_step(..., phase=phases)``) under
    torch's profiler: the phases, the profiled wall and the table of the ``rows`` costliest
    (phase, operation) pairs, per update. ``rows`` 0: the phases only, no profiler."""
    if not rows:
        plain = TrainPhases(device)
        began = time.perf_counter()
        run(plain)
        return plain, time.perf_counter() - began, []
    phases = OpPhases(device)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        began = time.perf_counter()
        run(phases)
        wall = time.perf_counter() - began
    micros: dict[tuple[str, str], float] = defaultdict(float)
    calls: dict[tuple[str, str], int] = defaultdict(int)
    by_shape: dict[tuple[str, str, str], float] = defaultdict(float)
    for event in prof.events():
        if event.name.startswith(PREFIX):  # the range's own time: Python between operations
            key = (event.name[len(PREFIX) :], "(Python)")
        else:
            key = (_phase_of(event), event.name)
            by_shape[(*key, _shapes(event))] += event.self_cpu_time_total
        micros[key] += event.self_cpu_time_total
        calls[key] += 1
    top_shape: dict[tuple[str, str], tuple[float, str]] = {}
    for (phase, name, shapes), us in by_shape.items():
        if us > top_shape.get((phase, name), (-1.0, ""))[0]:
            top_shape[(phase, name)] = (us, shapes)
    total = sum(micros.values())
    n = max(updates, 1)
    lines = [
        f"{'phase':<10} {'operation':<38} {'ms/update':>9} {'share':>6} {'calls':>6}"
        "  costliest inputs (their share)"
    ]
    for key, us in sorted(micros.items(), key=lambda kv: -kv[1])[:rows]:
        phase, name = key
        best, shapes = top_shape.get(key, (0.0, ""))
        where = f"{shapes} ({best / us:.0%})" if shapes and us else ""
        lines.append(
            f"{phase:<10} {name[:38]:<38} {us / 1000 / n:9.2f} {us / max(total, 1e-9):6.1%}"
            f" {calls[key] / n:6.1f}  {where}"
        )
    lines.append(f"{'total':<10} {'(self CPU time of every event)':<38} {total / 1000 / n:9.2f}")
    return phases, wall, lines
