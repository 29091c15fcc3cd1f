"""``train --profile``: where the time of the updates goes, phase by phase.

The forward pass runs piece by piece (``loop.batch_loss``), the embedding lookups are timed by
hooks on the two embedding tables, and the first update (which compiles) is left out. The
timer is rescorer/phases.py's; on a GPU it synchronises at every phase, so a profiled run is
slower there.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any

from torch import nn

from rescorer.phases import PhaseTimer, nothing

# The phases of one update in the order they run, with what each covers.
PHASES = {
    "data": "pad the batch's pairs and copy them to the device",
    "embedding": "word-embedding lookups (source and target)",
    "encoder": "the encoder: input projection, recurrence, summary vector c",
    "decoder": "decoder terms of c, input projection and recurrence",
    "readout": "deep output, maxout, softmax and log-sum-exp (packed); the loss",
    "backward": "zero the gradients; the gradients of all of the above",
    "clip": "the global gradient norm and the clipping (with the optimizer when fused)",
    "optimizer": "Adadelta's update of every parameter",
}


class TrainPhases(PhaseTimer):
    """Seconds per phase of the timed updates; ``updates`` counts them."""

    def __init__(self, device: Any = None) -> None:
        super().__init__(PHASES, device)
        self.updates = 0
        self.wall = 0.0  # seconds of the timed updates, start to end


@contextlib.contextmanager
def embedding_timed(
    model: nn.Module, phase: Callable[[str], AbstractContextManager[None]]
) -> Iterator[None]:
    """Inside this block, the model's embedding lookups count as phase ``embedding`` (when
    ``phase`` is a PhaseTimer; with ``nothing`` this does nothing)."""
    if not isinstance(phase, PhaseTimer):
        yield
        return
    timer = phase
    tables = [m for m in model.modules() if isinstance(m, nn.Embedding)]
    handles = []
    for table in tables:
        handles.append(table.register_forward_pre_hook(lambda *_: timer.start("embedding")))
        handles.append(table.register_forward_hook(lambda *_: timer.stop()))
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


__all__ = ["PHASES", "TrainPhases", "embedding_timed", "nothing"]
