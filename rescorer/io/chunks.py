"""Cut a decompressed phrase table into source-contiguous chunks, deterministically.

Chunk ends are a pure function of the bytes: for every multiple k of ``chunk_bytes``, the start
of the source group that holds offset k (Moses' own splitting rule, score-parallel.perl, cuts
only at a new source phrase too). So a resumed run or a shard cuts exactly where a single run
would: batches are formed identically and scores are identical to the last bit.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

import numpy as np

from rescorer.constants import FIELD_SEP_B
from rescorer.errors import RescorerError
from rescorer.io.inputs import MAX_READ_LINE, line_too_long, open_binary
from rescorer.io.shared import SharedText

NEWLINE = 10


@dataclass(frozen=True)
class Chunk:
    offset: int  # byte offset of the chunk in the decompressed input
    first_line: int  # 1-based number of the chunk's first line
    data: bytes  # whole lines (the last one may lack its newline at end of input)
    # Where the main process put them in shared memory for a worker (rescorer.io.shared): their
    # handle, and ``data`` is empty.
    shared: SharedText | None = None

    def content(self) -> bytes:
        """The chunk's bytes (in a worker, copied out of its shared-memory slot)."""
        return self.data if self.shared is None else self.shared.tobytes()


def count_lines(data: bytes) -> int:
    """The newlines in ``data`` (numpy: several times bytes.count's speed on a chunk)."""
    return int(np.count_nonzero(np.frombuffer(data, dtype=np.uint8) == NEWLINE))


def _source_at(buf: bytes | bytearray, start: int) -> bytes | None:
    """The source field of the line starting at ``start``, or None if it is not complete."""
    sep = buf.find(FIELD_SEP_B, start)
    nl = buf.find(b"\n", start)
    if sep < 0 and nl < 0:
        return None
    end = sep if (sep >= 0 and (nl < 0 or sep < nl)) else nl
    return bytes(buf[start:end])


def _group_start(buf: bytearray, pos: int) -> int:
    """Start of the source group holding the line that starts at ``pos`` (not before 0)."""
    src = _source_at(buf, pos)
    while pos > 0:
        prev = buf.rfind(b"\n", 0, pos - 1) + 1
        if _source_at(buf, prev) != src:
            break
        pos = prev
    return pos


def iter_chunks(
    stream: BinaryIO,
    chunk_bytes: int,
    *,
    start: int = 0,
    first_line: int = 1,
    name: str = "<input>",
) -> Iterator[Chunk]:
    """Cut a binary stream into source-contiguous chunks (see the module docstring).

    ``start`` must be a chunk boundary of the same stream (a resume point); the bytes before it
    are read and dropped. A line over MAX_READ_LINE bytes is an InputError naming ``name`` and
    the line: memory stays bounded by about chunk_bytes + MAX_READ_LINE.
    """
    read = stream.read
    skipped = 0
    while skipped < start:
        data = read(min(1 << 22, start - skipped))
        if not data:
            raise RescorerError("the input is shorter than the recorded resume point")
        skipped += len(data)
    buf = bytearray()
    pos = start  # absolute offset of buf[0]
    line_no = first_line
    k = start // chunk_bytes + 1
    eof = False
    while not eof:
        target = k * chunk_bytes
        while pos + len(buf) < target and not eof:
            data = read(target - pos - len(buf))
            if not data:
                eof = True
            buf += data
        if eof:
            break
        # The line that holds offset k*chunk_bytes must be readable up to its source field.
        rel = target - pos
        line_start = buf.rfind(b"\n", 0, rel) + 1
        if rel - line_start > MAX_READ_LINE:  # an endless line holding every target
            raise line_too_long(name, line_no + buf.count(b"\n", 0, line_start))
        while _source_at(buf, line_start) is None:
            if len(buf) - line_start > MAX_READ_LINE:
                raise line_too_long(name, line_no + buf.count(b"\n", 0, line_start))
            data = read(1 << 16)
            if not data:
                eof = True
                break
            buf += data
        if eof:
            break
        cut = _group_start(buf, line_start)
        k += 1
        if cut == 0:
            continue  # one source group spans the whole stretch: the chunk grows
        with memoryview(buf) as view:  # one copy (bytes(buf[:cut]) made two)
            chunk = view[:cut].tobytes()
        yield Chunk(pos, line_no, chunk)
        line_no += count_lines(chunk)
        del buf[:cut]
        pos += cut
    if buf:
        yield Chunk(pos, line_no, bytes(buf))


@dataclass(frozen=True)
class ShardRange:
    """Where shard K of N lies in the decompressed input: bytes [start, end), its first line."""

    start: int
    first_line: int
    end: int
    input_bytes: int  # the whole decompressed input


def shard_bounds(path: str, chunk_bytes: int, shard: tuple[int, int]) -> ShardRange:
    """The byte range and first line of shard ``shard`` = (K, N), 1-based K.

    A chunk of a T-byte stream whose middle is at byte m belongs to shard floor(m N / T) + 1:
    shards are runs of whole chunks, so the concatenated shard outputs equal the single-run
    output byte for byte, and each boundary is the chunk boundary nearest to k T / N. (By the
    chunk's start, a 3.5 MiB table in 1 MiB chunks made shards of 2, 1 and 0.5 MiB; by its
    middle they are 1, 1 and 1.5: :func:`shard_note` says why they still differ.) A shard that
    gets no chunk (more shards than chunks) is the empty range where the next one starts.
    Costs one pass to measure T and one cutting pass up to the shard's end.
    """
    k, n = shard
    with open_binary(path) as stream:
        total = 0
        while data := stream.read(1 << 22):
            total += len(data)
    start, start_line, end = total, 1, total
    with open_binary(path) as stream:
        line = 1
        for chunk in iter_chunks(stream, chunk_bytes, name=path):
            middle = 2 * chunk.offset + len(chunk.data)  # twice the chunk's middle byte
            index = middle * n // max(2 * total, 1)  # 0-based shard of this chunk
            if index == k - 1 and start == total:
                start, start_line = chunk.offset, line
            if index >= k:
                end = chunk.offset
                break
            line += count_lines(chunk.data)
    if start == total:  # no chunk of its own
        start, start_line = end, line
    return ShardRange(start, start_line, end, total)


def shard_note(shard_range: ShardRange, chunk_bytes: int, shard: tuple[int, int]) -> str | None:
    """Why this shard's size is far (over a quarter) from the input's share per shard, or None:
    a shard is whole chunks cut at source boundaries, so shards of a table a few chunks long
    cannot be even."""
    k, n = shard
    share = shard_range.input_bytes / n
    size = shard_range.end - shard_range.start
    if share == 0 or abs(size - share) <= share / 4:
        return None

    def mib(value: float) -> str:
        return f"{value / (1 << 20):,.2f} MiB"

    return (
        f"shard {k}/{n} holds {mib(size)} of the {mib(shard_range.input_bytes)} input (a share "
        f"is {mib(share)}): a shard is whole chunks of --chunk-bytes ({mib(chunk_bytes)}) cut "
        "at source-phrase boundaries, so the shards of a table a few chunks long differ; a "
        "smaller --chunk-bytes evens them"
    )
