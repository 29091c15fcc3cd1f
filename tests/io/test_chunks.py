"""Chunk cuts: exact cover, source boundaries only, the same cuts after a resume or in a shard."""

from __future__ import annotations

import gzip
import io
import itertools
from pathlib import Path

import pytest
from conftest import SLICE

from rescorer.io.chunks import Chunk, iter_chunks, shard_bounds

DATA = gzip.decompress(SLICE.read_bytes())


def source(line: bytes) -> bytes:
    return line.split(b" ||| ", 1)[0]


def chunks_of(data: bytes, size: int, start: int = 0, first_line: int = 1) -> list[Chunk]:
    return list(iter_chunks(io.BytesIO(data), size, start=start, first_line=first_line))


@pytest.mark.parametrize("size", [100, 1000, 4096, 1 << 20])
def test_chunks_cover_input_and_cut_between_sources(size: int) -> None:
    chunks = chunks_of(DATA, size)
    assert b"".join(c.data for c in chunks) == DATA
    line = 1
    for before, after in itertools.pairwise(chunks):
        assert source(before.data.splitlines()[-1]) != source(after.data.splitlines()[0])
    for c in chunks:
        assert c.first_line == line
        assert DATA[c.offset : c.offset + len(c.data)] == c.data
        line += c.data.count(b"\n")
    if size < len(DATA) // 4:
        assert len(chunks) > 3


@pytest.mark.parametrize("size", [100, 1500])
def test_resuming_at_any_boundary_gives_the_same_cuts(size: int) -> None:
    chunks = chunks_of(DATA, size)
    for i in range(1, len(chunks), max(1, len(chunks) // 7)):
        resumed = chunks_of(DATA, size, start=chunks[i].offset, first_line=chunks[i].first_line)
        assert resumed == chunks[i:]


def test_a_source_group_longer_than_a_chunk_stays_whole() -> None:
    group = b"".join(b"the ||| t%d ||| 0.5\n" % i for i in range(100))
    data = b"a ||| x ||| 1\n" + group + b"z ||| y ||| 1\n"
    chunks = chunks_of(data, 64)
    assert any(c.data.count(b"the ||| ") == 100 for c in chunks)
    assert b"".join(c.data for c in chunks) == data


def test_last_line_without_newline() -> None:
    data = b"a ||| x ||| 1\nb ||| y ||| 1\nc ||| z ||| 1"
    assert b"".join(c.data for c in chunks_of(data, 10)) == data


def test_shards_partition_the_table_at_chunk_boundaries(tmp_path: Path) -> None:
    size = 2000
    offsets = {c.offset for c in chunks_of(DATA, size)} | {len(DATA)}
    pieces = []
    previous_end = 0
    for k in range(1, 5):
        r = shard_bounds(str(SLICE), size, (k, 4))
        start, first_line, end = r.start, r.first_line, r.end
        assert start == previous_end and start in offsets and end in offsets
        assert first_line == DATA[:start].count(b"\n") + 1
        pieces.append(DATA[start:end])
        previous_end = end
    assert b"".join(pieces) == DATA
    assert all(pieces)


def test_a_shard_without_a_chunk_is_the_empty_range_where_the_next_one_starts() -> None:
    """More shards than chunks: the ranges still meet end to start and cover the input once."""
    chunk_bytes = len(DATA) // 2  # two chunks, four shards
    ranges = [shard_bounds(str(SLICE), chunk_bytes, (k, 4)) for k in range(1, 5)]
    assert ranges[0].start == 0 and ranges[-1].end == len(DATA) == ranges[0].input_bytes
    for before, after in itertools.pairwise(ranges):
        assert after.start == before.end
        assert after.first_line == DATA[: after.start].count(b"\n") + 1
    assert sum(r.end > r.start for r in ranges) == 2


def test_an_endless_line_stops_the_cutter_with_its_number() -> None:
    """Issue 28, item 3: a line with no newline grew the buffer until memory ran out."""
    from rescorer.errors import InputError
    from rescorer.io.inputs import MAX_READ_LINE

    head = DATA[:5000]
    lines_before = head.count(b"\n")
    for endless in (
        b"\0" * (MAX_READ_LINE + (1 << 18)),
        b"a ||| " + b"b" * (MAX_READ_LINE + (1 << 18)),
    ):
        data = head + endless
        with pytest.raises(InputError, match=rf"^pt:{lines_before + 1}: a line longer than"):
            list(iter_chunks(io.BytesIO(data), 1 << 16, name="pt"))
