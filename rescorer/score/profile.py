"""``score --profile``: where the wall time of a run goes.

The timer is rescorer/phases.py's (a profiled run synchronises a GPU at every phase, so it is
slower). Work in ``--workers`` processes shows as the main process waiting for it.
"""

from __future__ import annotations

from typing import Any

from rescorer.phases import PhaseTimer, nothing

__all__ = ["PHASES", "Phases", "nothing"]

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
