"""encode_spans (issue 57, a worker core's rate) with what split_columns found (its spaces,
where each phrase's separators are) gives what it gives finding them again, and both give
what the pair-by-pair builder gives, on the real slice and on generated tables."""

from __future__ import annotations

import gzip

import numpy as np
from conftest import SLICE
from hypothesis import given, settings
from hypothesis import strategies as st

from rescorer.io.columns import split_columns
from rescorer.score.pairs import GroupedPairs, GroupedPairsBuilder, encode_spans
from rescorer.vocab import Vocab, build_vocabs

BUDGET = settings(max_examples=150, deadline=None, derandomize=True)


def by_builder(src_vocab: Vocab, tgt_vocab: Vocab, data: bytes) -> tuple[GroupedPairs, list[int]]:
    builder = GroupedPairsBuilder(src_vocab, tgt_vocab)
    unk = []
    for line in data.decode("utf-8").splitlines():
        src, tgt = line.split(" ||| ")[:2]
        builder.add(src, tgt.split(" "))
        unk.append(tgt_vocab.unk_count(tgt.split(" ")))
    return builder.build(), unk


def check(src_vocab: Vocab, tgt_vocab: Vocab, data: bytes) -> None:
    columns = split_columns(data, None, keep_spaces=True)
    assert columns is not None
    text = np.frombuffer(data, dtype=np.uint8)
    spans = (columns.starts, columns.src_ends, columns.tgt_starts, columns.tgt_ends)
    expected, unk = by_builder(src_vocab, tgt_vocab, data)
    assert split_columns(data, None).spaces is None  # not kept unless asked for
    for given_columns in (None, columns):
        pairs, got_unk = encode_spans(src_vocab, tgt_vocab, text, spans, given_columns)
        for name in ("src_ids", "src_off", "pair_src", "tgt_ids", "tgt_off"):
            np.testing.assert_array_equal(getattr(pairs, name), getattr(expected, name), name)
            assert getattr(pairs, name).dtype == getattr(expected, name).dtype, name
        assert got_unk.tolist() == unk and got_unk.dtype == np.int32


def test_encode_spans_on_the_real_slice() -> None:
    data = gzip.decompress(SLICE.read_bytes())
    lines = data.decode("utf-8").splitlines()
    pairs = [(line.split(" ||| ")[0], line.split(" ||| ")[1]) for line in lines]
    check(*build_vocabs(pairs, 300, 280), data)
    check(*build_vocabs(pairs, 5000, 5000), data)


words = st.sampled_from(["a", "b", "cc", "d\u00e9j\u00e0", "x" * 16, "y" * 17, "|", "||||"])
phrases = st.lists(words, min_size=1, max_size=4).map(" ".join)


@BUDGET
@given(
    st.lists(st.tuples(phrases, phrases), min_size=1, max_size=12),
    st.booleans(),
    st.integers(2, 8),
)
def test_encode_spans_on_generated_tables(
    pairs: list[tuple[str, str]], rest: bool, size: int
) -> None:
    """Sources repeated or not, words around 16 bytes, '|' words, with and without a rest."""
    pairs = sorted(pairs)
    tail = " ||| 0-0 ||| 1 1 1" if rest else ""
    data = "".join(f"{s} ||| {t} ||| 0.5 1e-05{tail}\n" for s, t in pairs).encode()
    check(*build_vocabs(pairs, size, size + 1), data)
