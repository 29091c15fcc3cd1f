"""Vocab.byte_table (issue 57): the numpy hash table that looks up a whole chunk's tokens at
once gives what ``byte_index.get`` gives token by token, on the real slice's words and on the
byte strings where a fixed-width key could go wrong (lengths around 8 and 16, NUL bytes,
prefixes of each other, multi-byte UTF-8, words longer than a key)."""

from __future__ import annotations

import gzip

import numpy as np
import pytest
from conftest import SLICE
from hypothesis import given, settings
from hypothesis import strategies as st

import rescorer.vocab as vocab_module
from rescorer.vocab import KEY_BYTES, ByteTable, Vocab, build_vocabs

BUDGET = settings(max_examples=200, deadline=None, derandomize=True)


def lookup_each(table: ByteTable, tokens: list[bytes]) -> list[int]:
    """table.lookup of ``tokens`` laid out one after another, each followed by a space."""
    joined = b" ".join(tokens) + b" "
    buf = np.frombuffer(joined + bytes(KEY_BYTES), dtype=np.uint8)
    lens = np.array([len(t) for t in tokens], dtype=np.int64)
    starts = np.cumsum(lens + 1) - lens - 1
    return table.lookup(buf, starts, lens).tolist()


def test_the_table_finds_what_the_dict_finds_on_the_real_slice() -> None:
    lines = gzip.decompress(SLICE.read_bytes()).decode("utf-8").splitlines()
    pairs = [(line.split(" ||| ")[0], line.split(" ||| ")[1]) for line in lines]
    src, tgt = build_vocabs(pairs, 300, 2000)  # a short list and one that holds every word
    tokens = [w.encode() for line in lines for w in line.split(" ||| ")[1].split(" ")]
    tokens += [w.encode() for line in lines for w in line.split(" ||| ")[0].split(" ")]
    for vocab in (src, tgt):
        expected = [vocab.byte_index.get(t, -1) for t in tokens]
        assert lookup_each(vocab.byte_table, tokens) == expected
        assert 0 < expected.count(-1) < len(tokens)


EDGES = [
    b"a",
    b"a\x00",
    b"\x00",
    b"\x00a",
    b"ab",
    b"abcdefg",
    b"abcdefgh",
    b"abcdefghi",
    b"abcdefgh\x00",
    b"abcdefghijklmno",
    b"abcdefghijklmnop",
    b"abcdefghijklmnopq",
    b"abcdefghijklmnopqr",
    b"abcdefghijklmnop\x00",
    "d\u00e9j\u00e0-vu".encode(),
    "\u00e9t\u00e9s".encode(),
    b"&#124;",
    b"x" * 40,
    b"x" * 41,
]


def test_the_table_tells_apart_keys_of_every_edge_length() -> None:
    for half in (EDGES[::2], EDGES[1::2], EDGES):
        vocab = Vocab(tuple(w.decode() for w in half), len(half) + 2)
        assert lookup_each(vocab.byte_table, EDGES) == [vocab.byte_index.get(t, -1) for t in EDGES]


@BUDGET
@given(
    words=st.lists(st.binary(min_size=1, max_size=20).filter(lambda b: b" " not in b), max_size=40),
    queries=st.lists(st.binary(min_size=1, max_size=20).filter(lambda b: b" " not in b)),
)
def test_the_table_finds_what_the_dict_finds(words: list[bytes], queries: list[bytes]) -> None:
    """Any byte strings (a full table of few slots, so probes wrap and collide)."""
    index = {w: i + 2 for i, w in enumerate(dict.fromkeys(words))}
    tokens = queries + words + [w + b"\x00" for w in words] + [w[:-1] for w in words if w[:-1]]
    assert lookup_each(ByteTable(index), tokens) == [index.get(t, -1) for t in tokens]


@pytest.mark.parametrize("probes", [1, 2, 5])
def test_every_probe_depth_finds_what_the_dict_finds(
    probes: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Tokens left after VECTOR_PROBES slots go through the dict: a few (1), fewer (2),
    about none (5) but the words over 16 bytes; the same ids."""
    lines = gzip.decompress(SLICE.read_bytes()).decode("utf-8").splitlines()
    pairs = [(line.split(" ||| ")[0], line.split(" ||| ")[1]) for line in lines]
    _, tgt = build_vocabs(pairs, 300, 2000)
    tokens = [w.encode() for line in lines for w in line.split(" ||| ")[1].split(" ")]
    monkeypatch.setattr(vocab_module, "VECTOR_PROBES", probes)
    expected = [tgt.byte_index.get(t, -1) for t in tokens]
    assert lookup_each(tgt.byte_table, tokens) == expected
