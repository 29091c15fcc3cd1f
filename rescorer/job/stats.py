"""What a streamed job counts as it goes: the counts its progress record and its shard manifest
hold, and where it stands in the input. Each command's stats extend it (score's
:class:`~rescorer.score.config.ScoreStats`, extend's ``ExtendStats``). No torch here."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

MAX_AHEAD_BYTES = 256 << 20  # input bytes being parsed ahead at once, at most (16 GPU chunks)
# Options that do not change the output's bytes: a --resume run may change them.
NOT_IN_RUN_KEY = (
    "resume",
    "quiet",
    "workers",
    "progress_every",
    "profile",
    "force",
    "restart",
    "threads",
    "ignore_coverage",
    "checkpoint_every",
    "overlap",
)


@dataclass
class JobStats:
    lines_in: int = 0
    lines_out: int = 0
    bad: int = 0
    seconds: float = 0.0
    resumed_from_line: int = 0
    bad_examples: list[str] = field(default_factory=list)
    next_offset: int = 0  # the input offset the output covers up to
    range_sha256: str = ""  # chained over the chunks written (shards.chain_sha256)
    earlier_seconds: float = 0.0  # spent by the runs this one resumed
    started: float = field(default_factory=time.monotonic)
    already_done: bool = False  # a finished shard found as its manifest says: nothing redone
