"""Phrase pairs as flat numpy id arrays, and token-bounded batches over them.

No torch here: the scoring pipeline's parse workers build these and send them to the main
process, and a worker that imports nothing heavier than numpy starts fast.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import compress
from operator import ne

import numpy as np

from rescorer.constants import UNK_ID
from rescorer.io.columns import ChunkColumns
from rescorer.io.table import split_tokens
from rescorer.vocab import KEY_BYTES, Vocab

SPACE = 32  # the byte between a phrase's tokens


@dataclass
class GroupedPairs:
    """Phrase pairs as flat id arrays; sequences already end with EOS.

    src_ids[src_off[i]:src_off[i+1]] is distinct source i; pair j has source pair_src[j] and
    target tgt_ids[tgt_off[j]:tgt_off[j+1]].
    """

    src_ids: np.ndarray  # (sum of source lengths,) int32
    src_off: np.ndarray  # (U+1,) int64
    pair_src: np.ndarray  # (N,) int64, index of each pair's source
    tgt_ids: np.ndarray  # (sum of target lengths,) int32
    tgt_off: np.ndarray  # (N+1,) int64

    @property
    def num_pairs(self) -> int:
        return len(self.pair_src)


class GroupedPairsBuilder:
    """Collects pairs one at a time; consecutive pairs with the same source share its ids."""

    def __init__(self, src_vocab: Vocab, tgt_vocab: Vocab) -> None:
        self.src_vocab, self.tgt_vocab = src_vocab, tgt_vocab
        self.src_ids: list[int] = []
        self.src_off = [0]
        self.pair_src: list[int] = []
        self.tgt_ids: list[int] = []
        self.tgt_off = [0]
        self.previous: str | None = None

    def add(self, src: str, tgt_tokens: Sequence[str]) -> None:
        """Add the pair (source phrase ``src``, target tokens); EOS is appended to both."""
        if src != self.previous:
            self.src_ids += self.src_vocab.encode_eos(split_tokens(src))
            self.src_off.append(len(self.src_ids))
            self.previous = src
        self.pair_src.append(len(self.src_off) - 2)
        self.tgt_ids += self.tgt_vocab.encode_eos(tgt_tokens)
        self.tgt_off.append(len(self.tgt_ids))

    def build(self) -> GroupedPairs:
        return GroupedPairs(
            np.asarray(self.src_ids, dtype=np.int32),
            np.asarray(self.src_off, dtype=np.int64),
            np.asarray(self.pair_src, dtype=np.int64),
            np.asarray(self.tgt_ids, dtype=np.int32),
            np.asarray(self.tgt_off, dtype=np.int64),
        )


def encode_pairs(
    src_vocab: Vocab, tgt_vocab: Vocab, pairs: Sequence[tuple[str, str]]
) -> GroupedPairs:
    """Ids of (source phrase, target phrase) pairs; consecutive equal sources are shared."""
    builder = GroupedPairsBuilder(src_vocab, tgt_vocab)
    for src, tgt in pairs:
        builder.add(src, split_tokens(tgt))
    return builder.build()


def _encode_plain(
    vocab: Vocab, phrases: Sequence[bytes]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Ids with EOS (flat, int32), offsets (P+1,) int64 and the out-of-shortlist tokens of
    each phrase (P,) int32, for P plain phrases (tokens separated by single spaces, as
    split_columns checked), all at once."""
    joined = b" ".join(phrases) + b" " if phrases else b""
    buf = np.frombuffer(joined + bytes(KEY_BYTES), dtype=np.uint8)  # (B+16,)
    spaces = np.flatnonzero(buf[: len(joined)] == SPACE)  # (T,) each token's end
    lens = np.fromiter(map(len, phrases), np.int64, len(phrases))  # (P,)
    ends = np.cumsum(lens + 1) - 1  # (P,) where each phrase's space is
    return _encode_in(vocab, buf, spaces, ends - lens, ends)


def _encode_in(
    vocab: Vocab,
    buf: np.ndarray,
    spaces: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
    bounds: tuple[np.ndarray | None, np.ndarray | None] = (None, None),
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """What :func:`_encode_plain` gives, for the P plain phrases buf[starts[i]:ends[i]] (none
    empty, each followed by a space) of ``buf`` (uint8, KEY_BYTES readable bytes after every
    phrase), ``spaces`` (S,) ascending: every space in buf, or at least those inside the
    phrases and after each. ``bounds``: where known, the index in ``spaces`` of each phrase's
    first space and of the one after it (P,) each (else found with searchsorted)."""
    num_phrases = len(starts)
    if not num_phrases:
        return np.zeros(0, np.int32), np.zeros(1, np.int64), np.zeros(0, np.int32)
    lo, hi = bounds
    if lo is None:
        lo = np.searchsorted(spaces, starts)  # (P,) the spaces of each phrase: lo..hi
    if hi is None:
        hi = np.searchsorted(spaces, ends)  # (P,)
    counts = hi - lo + 1  # (P,) tokens: spaces inside, and one
    ends_at = np.cumsum(counts)  # (P,) where each phrase's tokens end
    first = ends_at - counts  # (P,) each phrase's first token
    num_tokens = int(ends_at[-1])
    # Every token ends at a space: those inside a phrase and the one after it (ends)
    tok_ends = spaces[np.arange(num_tokens) + np.repeat(lo - first, counts)]  # (T,)
    tok_starts = np.empty(num_tokens, dtype=np.int64)  # (T,)
    tok_starts[1:] = tok_ends[:-1] + 1
    tok_starts[first] = starts
    words = vocab.byte_table.lookup(buf, tok_starts, tok_ends - tok_starts)  # -1: unknown
    off = np.zeros(num_phrases + 1, dtype=np.int64)
    np.add(ends_at, np.arange(1, num_phrases + 1), out=off[1:])  # each phrase and its EOS
    ids = np.full(off[-1], vocab.eos_id, dtype=np.int32)
    unknown = words < 0  # (T,)
    words[unknown] = UNK_ID
    ids[np.arange(num_tokens) + np.repeat(np.arange(num_phrases), counts)] = words
    unk = np.add.reduceat(unknown.astype(np.int32), first).astype(np.int32)  # (P,)
    return ids, off, unk


def _same_as_previous(text: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """(P,) bool: span i (text[starts[i]:ends[i]], none empty) has the bytes of span i-1."""
    lens = ends - starts  # (P,)
    same = np.zeros(len(starts), dtype=bool)
    if len(starts) < 2:
        return same
    cand = np.flatnonzero(lens[1:] == lens[:-1]) + 1  # (C,) spans as long as the previous
    if not len(cand):
        return same
    cand_lens = lens[cand]
    seg = np.cumsum(cand_lens) - cand_lens  # (C,) each candidate's first byte in the gather
    at = np.arange(int(cand_lens.sum())) + np.repeat(starts[cand] - seg, cand_lens)
    shift = np.repeat(starts[cand] - starts[cand - 1], cand_lens)
    differs = np.logical_or.reduceat(text[at] != text[at - shift], seg)  # (C,)
    same[cand] = ~differs
    return same


def encode_spans(
    src_vocab: Vocab,
    tgt_vocab: Vocab,
    text: np.ndarray,
    spans: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    columns: ChunkColumns | None = None,
) -> tuple[GroupedPairs, np.ndarray]:
    """:func:`encode_columns` of a chunk's plain phrases where they lie in its bytes ``text``
    (uint8): ``spans`` = (source starts, source ends, target starts, target ends), (N,) each,
    every phrase followed by a space in ``text`` (of " ||| "), as split_columns found them.
    With ``columns`` (split_columns' result for ``text``), its spaces are not found again."""
    src_start, src_end, tgt_start, tgt_end = spans
    new = ~_same_as_previous(text, src_start, src_end)  # (N,) the pair starts a run of its source
    buf = np.concatenate((text, np.zeros(KEY_BYTES, dtype=np.uint8)))  # keys read past the end
    src_bounds: tuple[np.ndarray | None, np.ndarray | None] = (None, None)
    tgt_bounds = src_bounds
    if columns is not None and columns.spaces is not None:
        spaces, src_sep, tgt_sep = columns.spaces, columns.src_sep, columns.tgt_sep
        assert src_sep is not None and tgt_sep is not None
        # " ||| " holds two spaces: a target's first space is two after its source's end
        src_bounds, tgt_bounds = (None, src_sep[new]), (src_sep + 2, tgt_sep)
    else:
        spaces = np.flatnonzero(text == SPACE)  # (S,)
    src = _encode_in(src_vocab, buf, spaces, src_start[new], src_end[new], src_bounds)
    tgt_ids, tgt_off, unk = _encode_in(tgt_vocab, buf, spaces, tgt_start, tgt_end, tgt_bounds)
    src_ids, src_off, _ = src
    pair_src = np.cumsum(new, dtype=np.int64) - 1  # (N,)
    return GroupedPairs(src_ids, src_off, pair_src, tgt_ids, tgt_off), unk


def encode_columns(
    src_vocab: Vocab, tgt_vocab: Vocab, src: Sequence[bytes], tgt: Sequence[bytes]
) -> tuple[GroupedPairs, np.ndarray]:
    """What GroupedPairsBuilder and Vocab.unk_count give pair by pair, for the columns of a
    chunk (:func:`rescorer.io.columns.split_columns`) at once: the pairs, and (N,) int32 the
    target words of each pair outside the shortlist."""
    # Consecutive pairs with the same source share it (the builder's rule).
    new = np.ones(len(src), dtype=bool)  # (N,) the pair starts a run of its source
    new[1:] = np.fromiter(map(ne, src[1:], src[:-1]), dtype=bool, count=len(src) - 1)
    src_ids, src_off, _ = _encode_plain(src_vocab, list(compress(src, new)))
    tgt_ids, tgt_off, unk = _encode_plain(tgt_vocab, tgt)
    pair_src = np.cumsum(new, dtype=np.int64) - 1  # (N,)
    return GroupedPairs(src_ids, src_off, pair_src, tgt_ids, tgt_off), unk


def count_unknown(vocab: Vocab, phrases: Sequence[bytes]) -> np.ndarray:
    """(P,) int32 the tokens of each plain phrase outside ``vocab``'s shortlist."""
    return _encode_plain(vocab, phrases)[2]


def encode_inverse(
    src_vocab: Vocab,
    tgt_vocab: Vocab,
    src: Sequence[bytes],
    tgt: Sequence[bytes],
    group: bool = True,
) -> tuple[GroupedPairs, np.ndarray]:
    """An inverse model's pairs of a chunk's columns: (target phrase, source phrase), the
    model's ``src_vocab`` reading the table's targets. A table comes sorted by source, so its
    equal targets are scattered: with ``group`` the pairs are put in target order (stable), so
    that pairs with one target share its encoding and the decoder's prefix tree under it, as a
    forward model's pairs share their source. Returns the pairs and ``order`` (N,) int64: the
    i-th pair is input line order[i] (scores go back with ``out[order] = scores``)."""
    if group:
        order = np.asarray(sorted(range(len(tgt)), key=tgt.__getitem__), dtype=np.int64)
    else:
        order = np.arange(len(tgt), dtype=np.int64)
    flipped_src = [tgt[i] for i in order.tolist()]
    flipped_tgt = [src[i] for i in order.tolist()]
    pairs, _ = encode_columns(src_vocab, tgt_vocab, flipped_src, flipped_tgt)
    return pairs, order


def token_batches(lengths: np.ndarray, order: np.ndarray, max_tokens: int) -> Iterator[np.ndarray]:
    """Cut ``order`` (indices sorted by length) into batches of at most ``max_tokens`` padded
    tokens (rows x longest row); a row longer than the budget gets a batch of its own."""
    start, n = 0, len(order)
    while start < n:
        end = start + 1
        longest = int(lengths[order[start]])
        while end < n:
            longest_next = max(longest, int(lengths[order[end]]))
            if longest_next * (end - start + 1) > max_tokens:
                break
            longest = longest_next
            end += 1
        yield order[start:end]
        start = end


@dataclass
class PrefixLevel:
    """Depth t of a prefix tree: its distinct prefixes of length t+1, and the sources that end
    there. tokens[i] extends prefix parents[i] of depth t-1 (-1: the empty prefix)."""

    tokens: np.ndarray  # (n_t,) int32, the last token of each prefix
    parents: np.ndarray  # (n_t,) int64, index into the previous level
    ending: np.ndarray  # (e_t,) int64, sources whose last token (EOS) is at this depth
    ending_node: np.ndarray  # (e_t,) int64, their prefix at this level
    members: np.ndarray  # (a_t,) int64, the sequences with a token at this depth
    member_node: np.ndarray  # (a_t,) int64, their prefix at this level


def prefix_tree(ids: np.ndarray, off: np.ndarray) -> list[PrefixLevel]:
    """The distinct prefixes of the sequences ids[off[i]:off[i+1]], level by level.

    Sequences that share a prefix share its nodes, so a recurrence run over the levels does one
    step per distinct prefix instead of one per token (sources in a Moses table come in byte
    order: "the file" -> "the file is", "the file was"). Equal sequences end at the same node.
    """
    lens = np.diff(off)  # (U,)
    levels: list[PrefixLevel] = []
    node = np.full(len(lens), -1, dtype=np.int64)  # each sequence's prefix node so far
    base = int(ids.max()) + 1 if len(ids) else 1  # (parent + 1) * base + token: one key
    for t in range(int(lens.max()) if len(lens) else 0):
        alive = np.flatnonzero(lens > t)  # sequences with a token at depth t
        tokens = ids[off[alive] + t].astype(np.int64)
        keys = (node[alive] + 1) * base + tokens  # (parent, token) as one key
        uniq, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
        node[alive] = inverse
        ends = alive[lens[alive] == t + 1]
        levels.append(
            PrefixLevel(
                tokens=tokens[first].astype(np.int32),
                parents=(uniq // base - 1).astype(np.int64),
                ending=ends,
                ending_node=node[ends],
                members=alive,
                member_node=inverse.astype(np.int64),
            )
        )
    return levels


def pairs_inside_shortlists(pairs: GroupedPairs) -> int:
    """How many pairs have every word of both phrases inside the shortlists (no UNK id)."""
    if pairs.num_pairs == 0:
        return 0
    # every sequence ends with EOS, so no segment is empty
    src_unk = np.add.reduceat(pairs.src_ids == UNK_ID, pairs.src_off[:-1])  # (U,)
    tgt_unk = np.add.reduceat(pairs.tgt_ids == UNK_ID, pairs.tgt_off[:-1])  # (N,)
    return int(np.count_nonzero((src_unk[pairs.pair_src] == 0) & (tgt_unk == 0)))
