"""The chunk loop of a streamed job (:mod:`rescorer.job.run`): parse ahead in the workers
(:mod:`rescorer.job.pool`), submit to the device in input order, format in the workers, write
in order (:func:`stream_chunks`); and the score count every line must have
(:func:`first_num_scores`). No torch here."""

from __future__ import annotations

import contextlib
import sys
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future
from typing import Any

from rescorer.errors import InputError
from rescorer.io.chunks import Chunk
from rescorer.io.inputs import iter_raw_lines, open_binary
from rescorer.io.shared import SharedText, Slots, loaded, output_into, result_into
from rescorer.io.table import parse_raw_line
from rescorer.job import interrupts
from rescorer.job.output import Output
from rescorer.job.pool import Inline, Pool
from rescorer.job.shards import chain_sha256
from rescorer.job.stats import MAX_AHEAD_BYTES, JobStats
from rescorer.job.work import ChunkWork, JobConfig, Parsed, Phase, nothing


def stream_chunks(
    chunks: Iterator[Chunk],
    pool: Pool,
    work: ChunkWork,
    output: Output,
    config: JobConfig,
    num_scores: int | None,
    gz_level: int | None,
    name: str,
    stats: JobStats,
    progress: Callable[[], None],
    phase: Phase = nothing,
    mark: Callable[[str], None] | None = None,
) -> None:
    """Parse ahead in the pool, submit to the device in order (chunk k+1 before chunk k is
    collected, with ``config.overlap``), format in the pool, write in order, record progress
    by time; ``mark`` is told when the input's last chunk is parsed and submitted (the steady
    state ends) and when all is written (the drain)."""
    loop = _Loop(
        chunks, pool, work, output, config, num_scores, gz_level, name, stats, progress, phase
    )
    with loop.slots if loop.slots is not None else contextlib.nullcontext():
        loop.read_ahead()
        while loop.parsing:
            with phase("parse"):
                waiting, slot = loop.parsing.popleft()
                parsed: Parsed = loaded(interrupts.result(waiting))
            loop.read_ahead()
            if parsed.bad and config.skip_bad_lines is None:
                lineno, message, _ = parsed.bad[0]
                raise InputError(name, lineno, message)
            loop.working.append((work.submit(parsed), parsed, slot))
            while len(loop.working) > (1 if config.overlap else 0):
                loop.collect()
        if mark is not None:
            mark("steady state")
        while loop.working:
            loop.collect()
        loop.write_ready(limit=0)
    with phase("write"):
        output.checkpoint()  # the end: everything written is on disk before OUT is renamed
    if mark is not None:
        mark("drain")


class _Loop:
    """:func:`stream_chunks`'s chunks in flight, each with its shared-memory slot (None: its
    bytes cross the pipe), and the steps that move them on."""

    def __init__(
        self,
        chunks: Iterator[Chunk],
        pool: Pool,
        work: ChunkWork,
        output: Output,
        config: JobConfig,
        num_scores: int | None,
        gz_level: int | None,
        name: str,
        stats: JobStats,
        progress: Callable[[], None],
        phase: Phase,
    ) -> None:
        """:func:`stream_chunks`'s arguments."""
        self.chunks, self.pool, self.work, self.output = chunks, pool, work, output
        self.num_scores, self.gz_level, self.name = num_scores, gz_level, name
        self.stats, self.progress, self.phase = stats, progress, phase
        workers, chunk_bytes = config.workers, config.chunk_bytes
        assert isinstance(workers, int) and chunk_bytes is not None
        self.workers = workers
        # Chunks being parsed at once: enough to keep the workers busy, at most MAX_AHEAD_BYTES.
        self.ahead = max(2, min(2 * workers, MAX_AHEAD_BYTES // chunk_bytes))
        self.parsing: deque[tuple[Future[Any], SharedText | None]] = deque()
        self.working: deque[tuple[Any, Parsed, SharedText | None]] = deque()  # not collected
        self.formatting: deque[tuple[Future[Any], Parsed, int, SharedText | None]] = deque()
        self.digest = config.shard is not None  # a shard's manifest vouches for its bytes
        # In flight at once, at most: parsing, working, formatting, and one read ahead.
        self.slots = _slots(pool, work, config, self.ahead + 2 + max(1, workers) + 2)

    def read_ahead(self) -> None:
        """Chunks read and sent to be parsed, up to ``ahead`` at once."""
        pool, work, slots = self.pool, self.work, self.slots
        while len(self.parsing) < self.ahead:
            with self.phase("read"):
                chunk = next(self.chunks, None)
            if chunk is None:
                return
            with self.phase("parse"):
                slot = slots.put(chunk.data) if slots is not None else None
                args = (chunk, self.num_scores, self.name, self.digest)
                if slot is None:
                    self.parsing.append((pool.submit(work.parse, *args), None))
                    continue
                # The bytes cross in shared memory; the result's arrays come back there too.
                args = (Chunk(chunk.offset, chunk.first_line, b"", slot), *args[1:])
                self.parsing.append((pool.submit(result_into, slot, work.parse, args), slot))

    def collect(self) -> None:
        """The oldest submitted chunk's results (waiting for the device only here) go to
        the formatter."""
        pending, parsed, slot = self.working.popleft()
        func, args, lines_out = self.work.collect(pending, parsed, self.gz_level)
        with self.phase("format"):
            if slot is not None:  # the output comes back in the chunk's slot
                result = self.pool.submit(output_into, slot, func, args)
            else:
                result = self.pool.submit(func, *args)
        self.formatting.append((result, parsed, lines_out, slot))
        self.write_ready(limit=max(1, self.workers))

    def write_ready(self, limit: int) -> None:
        """The formatted chunks written in order: all but ``limit``, and any done already."""
        formatting, output, stats, phase = self.formatting, self.output, self.stats, self.phase
        while len(formatting) > limit or (formatting and interrupts.done(formatting[0][0])):
            result, parsed, lines_out, slot = formatting.popleft()
            with phase("format"):
                data = interrupts.result(result)
            with phase("write"):
                _write(output, data, [raw for _, _, raw in parsed.bad])
            if slot is not None and self.slots is not None:
                self.slots.free(slot.name)
            _count(stats, parsed, lines_out, self.name)
            with phase("write"):  # a record only every --checkpoint-every seconds
                output.advance(stats.next_offset, parsed.first_line + parsed.lines_in, stats)
            self.progress()


def _slots(pool: Pool, work: ChunkWork, config: JobConfig, in_flight: int) -> Slots | None:
    """Shared-memory slots for the chunks in flight, where a pool of worker processes runs a
    work whose stages take them (:mod:`rescorer.io.shared`); None otherwise. A note on stderr
    (but with --quiet) if the system refuses one."""
    if isinstance(pool, Inline) or not work.shared_chunks:
        return None
    assert config.chunk_bytes is not None
    note = None if config.quiet else _note
    # A chunk is at most chunk_bytes but for a source group spanning more; its output a little
    # more (the new columns): half a chunk more holds both but for the rare, which use the pipe.
    # Its parse result's arrays take about 0.7 chunk_bytes a model (more with plans on a GPU):
    # what does not fit in a chunk's worth crosses the pipe.
    text = config.chunk_bytes + config.chunk_bytes // 2
    return Slots(text, in_flight, note, results=config.chunk_bytes)


def _note(text: str) -> None:
    print(f"rescorer: note: {text}", file=sys.stderr, flush=True)


def _write(output: Output, data: bytes | SharedText, bad: list[bytes]) -> None:
    """A chunk's output, from its slot where it came back in one."""
    if isinstance(data, SharedText):
        with data.view() as view:
            output.write(view, bad)
    else:
        output.write(data, bad)


def _count(stats: JobStats, parsed: Parsed, lines_out: int, name: str) -> None:
    """A chunk written: its lines, bad lines, where the output now ends in the input."""
    stats.lines_in += parsed.lines_in
    stats.lines_out += lines_out
    stats.bad += len(parsed.bad)
    stats.next_offset = parsed.chunk_offset + parsed.chunk_len
    if parsed.chunk_sha256:  # shards only: their manifest vouches for the range
        stats.range_sha256 = chain_sha256(stats.range_sha256, parsed.chunk_sha256)
    for lineno, message, _ in parsed.bad[: max(0, 5 - len(stats.bad_examples))]:
        stats.bad_examples.append(f"{name}:{lineno}: {message}")


def first_num_scores(path: str) -> int | None:
    """The score count of the input's first well-formed line (what every line must match)."""
    with open_binary(path) as stream:
        return num_scores_of(iter_raw_lines(stream, path), 1)


def num_scores_of(raw_lines: Iterable[bytes], first_line: int) -> int | None:
    """The score count of the first well-formed line among ``raw_lines``."""
    for lineno, raw in enumerate(raw_lines, start=first_line):
        entry = parse_raw_line(raw, lineno, None) if raw.strip(b"\n") else ""
        if not isinstance(entry, str):
            return len(entry.scores)
    return None
