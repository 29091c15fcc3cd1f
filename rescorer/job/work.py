"""What a streamed job (:mod:`rescorer.job.run`) asks of the command it runs: the work done
with each chunk (:class:`ChunkWork`), what it reads of a parsed chunk (:class:`Parsed`), the
options every job has (:class:`JobConfig`) and the timer of its phases. No torch here."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any, Protocol

from rescorer.io.chunks import Chunk

Phase = Callable[[str], contextlib.AbstractContextManager[None]]


def nothing(name: str) -> contextlib.AbstractContextManager[None]:
    """A phase that is not timed."""
    return contextlib.nullcontext()


class Parsed(Protocol):
    """What the job reads of a parsed chunk (``work.parse``'s result); the rest is the work's."""

    chunk_offset: int
    chunk_len: int
    first_line: int
    lines_in: int
    bad: list[tuple[int, str, bytes]]  # (line number, message, raw line)
    chunk_sha256: str


class ChunkWork(Protocol):
    """What a command does with each chunk: the one part of a streamed job it writes."""

    @property
    def unit(self) -> str:
        """What the progress line counts ("pairs", "sources")."""

    @property
    def shared_chunks(self) -> bool:
        """Whether ``parse`` takes a chunk whose bytes are in shared memory
        (:attr:`Chunk.shared`) and the formatter the text it returns from it: the chunk's
        bytes, and the output, then cross without a pipe (:mod:`rescorer.io.shared`)."""

    @property
    def init_worker(self) -> Callable[..., None]:
        """A worker's start, called as ``init_worker(*init_args, in_pool)`` (module-level)."""

    @property
    def init_args(self) -> tuple[Any, ...]: ...

    @property
    def parse(self) -> Callable[[Chunk, int | None, str, bool], Any]:
        """``(chunk, num_scores, name, digest) -> Parsed``, run in a worker (module-level)."""

    def submit(self, parsed: Any) -> Any:
        """Start the device's work on a parsed chunk; return what ``collect`` waits for."""

    def collect(
        self, pending: Any, parsed: Any, gz_level: int | None
    ) -> tuple[Callable[..., bytes], tuple[Any, ...], int]:
        """Wait for the device; the call that formats the chunk's output bytes (in a worker),
        its arguments, and the number of lines it writes."""

    def progress(self) -> int:
        """The count the progress line shows."""


class JobConfig(Protocol):
    """The options every streamed job has (ScoreConfig's and ExtendConfig's fields)."""

    chunk_bytes: int | None
    workers: int | str
    shard: tuple[int, int] | None
    resume: bool
    compresslevel: int
    skip_bad_lines: str | None
    quiet: bool
    progress_every: float
    force: bool
    restart: bool
    checkpoint_every: float
    overlap: bool
