"""``score``'s per-chunk stages without the model: ``parse_chunk`` takes a whole chunk at once
(split_columns, encode_columns) when it can and falls back to the line parser when it cannot;
both must give the same ParsedChunk, and ``format_chunk`` the bytes the entries would write."""

from __future__ import annotations

import gzip
import math
from dataclasses import fields

import numpy as np
import pytest
from conftest import SLICE

import rescorer.score.stages as stages
from rescorer.constants import INVERSE
from rescorer.io.chunks import Chunk
from rescorer.io.table import format_prob, format_score, parse_raw_line, read_table
from rescorer.score.stages import ModelSides, ParsedChunk, format_chunk, init_worker, parse_chunk
from rescorer.vocab import build_vocabs


def parse_both(chunk: Chunk, num_scores: int | None) -> tuple[ParsedChunk, ParsedChunk]:
    """parse_chunk's result, and the line parser's (the bulk path switched off)."""
    bulk = parse_chunk(chunk, num_scores, "t")
    saved = stages.split_columns
    stages.split_columns = lambda data, n, keep_spaces=False: None  # type: ignore[assignment]
    try:
        by_line = parse_chunk(chunk, num_scores, "t")
    finally:
        stages.split_columns = saved
    return bulk, by_line


def assert_same(a: ParsedChunk, b: ParsedChunk) -> None:
    for f in fields(ParsedChunk):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if f.name == "by_model":
            assert len(x) == len(y)
            for p, q in zip(x, y, strict=True):
                for g in fields(p):
                    np.testing.assert_array_equal(getattr(p, g.name), getattr(q, g.name), g.name)
                    assert getattr(p, g.name).dtype == getattr(q, g.name).dtype, g.name
        elif f.name == "orders":
            assert [o is None for o in x] == [o is None for o in y]
            for p, q in zip(x, y, strict=True):
                if p is not None:
                    np.testing.assert_array_equal(p, q)
        elif f.name == "unk":
            np.testing.assert_array_equal(x, y)
            assert x.dtype == y.dtype
        else:
            assert list(x) == list(y) if f.name == "cuts" else x == y, f.name


@pytest.fixture(scope="module")
def slice_chunk() -> Chunk:
    """The real slice as one chunk, with shortlists of 300 words so many words fall outside;
    a forward model and an inverse one (issue 24), each with its own shortlists."""
    entries = list(read_table(str(SLICE)))
    forward = ModelSides(*build_vocabs([(e.src, e.tgt) for e in entries], 300, 300))
    inverse = ModelSides(*build_vocabs([(e.tgt, e.src) for e in entries], 250, 280), INVERSE)
    init_worker([forward, inverse])
    return Chunk(0, 1, gzip.decompress(SLICE.read_bytes()))


def test_the_bulk_path_parses_a_real_chunk_as_the_line_parser_does(slice_chunk: Chunk) -> None:
    assert stages.split_columns(slice_chunk.data, 4) is not None  # the bulk path is taken
    bulk, by_line = parse_both(slice_chunk, 4)
    assert_same(bulk, by_line)
    assert bulk.lines_in == 2090 and int(bulk.unk.sum()) > 100
    forward, inverse = bulk.by_model
    assert len(forward.src_off) - 1 < forward.num_pairs  # sources are shared
    # The inverse model's pairs are grouped by target: each distinct target phrase once.
    targets = [e.tgt for e in read_table(str(SLICE))]
    assert len(inverse.src_off) - 1 == len(set(targets)) < len(targets)
    order = bulk.orders[1]
    assert order is not None and sorted(order.tolist()) == list(range(len(targets)))
    assert [targets[i] for i in order] == sorted(targets, key=lambda t: t.encode())


def test_sources_of_one_length_are_shared_only_when_their_bytes_match(
    slice_chunk: Chunk,
) -> None:
    """The bulk path finds runs of a source in the chunk's bytes (issue 57): neighbours of the
    same byte length that differ in one byte (here a French accent of two bytes, a last
    letter), an unknown word, an unterminated last line."""
    data = (
        "été ||| summer ||| 1 2 3 4\n"
        "été ||| summer time ||| 1 2 3 4\n"
        "èté ||| zzunknown ||| 1 2 3 4\n"
        "a b ||| x y ||| 1 2 3 4\n"
        "a c ||| x y ||| 1 2 3 4\n"
        "a c ||| x ||| 1 2 3 4\n"
        "a c d ||| y ||| 1 2 3 4"
    ).encode()
    assert stages.split_columns(data, 4) is not None  # the bulk path is taken
    bulk, by_line = parse_both(Chunk(0, 1, data), 4)
    assert_same(bulk, by_line)
    assert bulk.pairs.pair_src.tolist() == [0, 0, 1, 2, 3, 3, 4]


@pytest.mark.parametrize(
    "damage",
    [
        b"x ||| y ||| 1 2 3\n",
        b"x ||| y ||| 1 2 3 nan\n",
        b"x\tz ||| y ||| 1 2 3 4\n",
        b"\n",
        b"x\0z ||| y ||| 1 2 3 4\n",  # issue 65, item 5: accepted as an unknown word
    ],
)
def test_a_chunk_with_a_bad_or_unusual_line_goes_line_by_line(
    slice_chunk: Chunk, damage: bytes
) -> None:
    lines = slice_chunk.data.splitlines(keepends=True)
    data = b"".join([*lines[:700], damage, *lines[700:]])
    chunk = Chunk(0, 1, data)
    bulk, by_line = parse_both(chunk, 4)
    assert_same(bulk, by_line)
    assert len(bulk.lines) + len(bulk.bad) == 2091
    assert [lineno for lineno, _, _ in bulk.bad] == ([] if b"\t" in damage else [701])


def test_an_unterminated_last_line_is_kept_as_it_was(slice_chunk: Chunk) -> None:
    chunk = Chunk(0, 1, slice_chunk.data[:-1])
    bulk, by_line = parse_both(chunk, 4)
    assert_same(bulk, by_line)
    assert bulk.last_unterminated and bulk.lines_in == 2090


@pytest.mark.parametrize("column", ["prob", "logp"])
def test_format_chunk_writes_what_each_entry_writes(slice_chunk: Chunk, column: str) -> None:
    parsed = parse_chunk(slice_chunk, 4, "t")
    rng = np.random.default_rng(0)
    logp = -rng.exponential(8.0, len(parsed.lines))
    logp[:3] = [-1e9, 0.0, -100.0]  # the floor, a probability of 1, the floor exactly
    data = format_chunk(parsed.text, parsed.cuts, logp, parsed.unk, column, True, 1)
    expected = []
    for i, raw in enumerate(parsed.lines):
        entry = parse_raw_line(raw, i + 1, 4)
        assert not isinstance(entry, str)
        value = format_prob(logp[i]) if column == "prob" else f"{logp[i]:.8g}"
        texts = [value, format_score(math.exp(int(parsed.unk[i])))]
        expected.append(entry.line_with_columns(texts) + "\n")
    assert gzip.decompress(data) == "".join(expected).encode("utf-8")
    empty = np.zeros(0, dtype=np.int64)
    assert format_chunk(b"", empty, logp[:0], parsed.unk[:0], column, True, None) == b""
    # Two models: two columns in that order, then the word penalty.
    two = np.stack([logp, logp[::-1]], axis=1)  # (N,2)
    data = format_chunk(parsed.text, parsed.cuts, two, parsed.unk, column, True, None)
    for i, line in enumerate(data.decode("utf-8").splitlines()):
        values = [format_prob(v) if column == "prob" else f"{v:.8g}" for v in two[i]]
        penalty = format_score(math.exp(int(parsed.unk[i])))
        assert line.split(" ||| ")[2].split(" ")[-3:] == [*values, penalty]


def test_a_worker_plans_each_chunk_for_the_scorer(slice_chunk: Chunk) -> None:
    """Issue 57: with ModelSides.plan a parse worker also makes the chunk's trees
    (plan_chunk), for each model in its direction, so the main process only uploads them;
    the scores are the same (tests/score/test_pipeline.py: 0, 1 and 2 workers, same bytes)."""
    from rescorer.score.plan import plan_chunk

    sides = list(stages._models or [])
    try:
        init_worker([ModelSides(m.src_vocab, m.tgt_vocab, m.direction, (300, 512)) for m in sides])
        parsed = parse_chunk(slice_chunk, 4, "t")
    finally:
        init_worker(sides)
    assert len(parsed.plans) == 2
    for plan, pairs in zip(parsed.plans, parsed.by_model, strict=True):
        assert plan is not None
        again = plan_chunk(pairs, 300, 512)
        assert len(plan.arrays) == len(again.arrays) > 0 and plan.work == again.work
        assert all(np.array_equal(a, b) for a, b in zip(plan.arrays, again.arrays, strict=True))
    assert parse_chunk(slice_chunk, 4, "t").plans == []  # without: the scorer plans
