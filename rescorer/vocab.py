"""Shortlist vocabularies (docs/model.md §1.1, docs/contracts.md §3).

Ids: 0 reserved (padding, "no previous word"), 1 UNK, 2..N-1 the N-2 most frequent words, and EOS
= N, a separate id after the shortlist, so the embedding and softmax have N+1 rows. Frequencies are
counted over the table's unique pairs (each pair once: the paper ignores the pair counts); ties are
broken by the token's code-point order, so the same table always gives the same ids.
Tokens are Moses-escaped strings (``&#124;``, ``&amp;``...) and are used exactly as they appear.
"""

from __future__ import annotations

import functools
import os
import sys
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from rescorer.constants import (
    EOS_SYMBOL,
    FIRST_WORD_ID,
    PAD_SYMBOL,
    SRC_VOCAB_FILE,
    TGT_VOCAB_FILE,
    UNK_ID,
    UNK_SYMBOL,
)
from rescorer.errors import RescorerError, check
from rescorer.io.jsonfiles import read_json, write_json
from rescorer.io.outputs import make_dir
from rescorer.io.schema import schema_problem
from rescorer.io.table import split_tokens

VOCAB_FORMAT = "rescorer-vocab-1"
MAX_VOCAB_SIZE = 1 << 24  # ids per shortlist; the paper's is 15,000
# What Vocab.load accepts (checked before use: a vocabulary is read from a model folder a user
# may have edited or been given).
VOCAB_SCHEMA: dict[str, object] = {
    "type": "object",
    "required": ["format", "size", "words"],
    "properties": {
        "format": {"const": VOCAB_FORMAT},
        "size": {"type": "integer", "minimum": FIRST_WORD_ID, "maximum": MAX_VOCAB_SIZE},
        "words": {
            "type": "array",
            "maxItems": MAX_VOCAB_SIZE,
            "items": {"type": "string", "minLength": 1},
        },
    },
}


@dataclass(frozen=True)
class Vocab:
    """A shortlist of ``size`` ids (0 reserved, 1 UNK, words from 2) plus EOS = ``size``."""

    words: tuple[str, ...]  # words in id order: words[i] has id i + FIRST_WORD_ID
    size: int  # the shortlist size N (ids 0..N-1); EOS is N
    _index: dict[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        check(self.size >= FIRST_WORD_ID, f"vocabulary size must be at least 2, got {self.size}")
        check(
            len(self.words) <= self.size - FIRST_WORD_ID,
            f"{len(self.words)} words do not fit a shortlist of {self.size} ids",
        )
        index = {word: i for i, word in enumerate(self.words, start=FIRST_WORD_ID)}
        check(len(index) == len(self.words), "vocabulary words must be unique")
        object.__setattr__(self, "_index", index)

    @property
    def eos_id(self) -> int:
        return self.size

    @property
    def num_rows(self) -> int:
        """Rows of the embedding table and classes of the softmax: the shortlist plus EOS."""
        return self.size + 1

    def __len__(self) -> int:
        return self.num_rows

    def __contains__(self, token: str) -> bool:
        return token in self._index

    def encode(self, tokens: Sequence[str]) -> list[int]:
        """Ids of ``tokens``; out-of-shortlist tokens become UNK. No EOS is appended."""
        get = self._index.get
        return [get(tok, UNK_ID) for tok in tokens]

    @functools.cached_property
    def byte_index(self) -> dict[bytes, int]:
        """UTF-8 word -> id of the shortlist's words, for bulk lookups of undecoded tokens."""
        return {word.encode("utf-8"): i for word, i in self._index.items()}

    @functools.cached_property
    def byte_table(self) -> ByteTable:
        """:attr:`byte_index` as a numpy hash table, for whole chunks of tokens at once."""
        return ByteTable(self.byte_index)

    def encode_eos(self, tokens: Sequence[str]) -> list[int]:
        """Ids of ``tokens`` followed by EOS (what the encoder reads and the decoder predicts)."""
        ids = self.encode(tokens)
        ids.append(self.eos_id)
        return ids

    def unk_count(self, tokens: Sequence[str]) -> int:
        """How many tokens are outside the shortlist (the paper's word-penalty count)."""
        index = self._index
        return sum(1 for tok in tokens if tok not in index)

    def symbol(self, idx: int) -> str:
        if idx == self.eos_id:
            return EOS_SYMBOL
        if idx == UNK_ID:
            return UNK_SYMBOL
        if FIRST_WORD_ID <= idx < FIRST_WORD_ID + len(self.words):
            return self.words[idx - FIRST_WORD_ID]
        return PAD_SYMBOL

    def decode(self, ids: Iterable[int]) -> list[str]:
        return [self.symbol(int(i)) for i in ids]

    def to_dict(self) -> dict[str, object]:
        return {
            "format": VOCAB_FORMAT,
            "size": self.size,
            "eos_id": self.eos_id,
            "special": {"0": PAD_SYMBOL, str(UNK_ID): UNK_SYMBOL, str(self.eos_id): EOS_SYMBOL},
            "words": list(self.words),
        }

    def save(self, path: str) -> None:
        write_json(path, self.to_dict(), indent=0)

    @classmethod
    def load(cls, path: str) -> Vocab:
        data = read_json(path, what="a rescorer vocabulary")
        if not isinstance(data, dict) or data.get("format") != VOCAB_FORMAT:
            raise RescorerError(f"{path}: not a rescorer vocabulary (format {VOCAB_FORMAT})")
        problem = schema_problem(data, VOCAB_SCHEMA)
        if problem:
            raise RescorerError(f"{path}: not a valid rescorer vocabulary: {problem}")
        try:
            return cls(words=tuple(data["words"]), size=data["size"])
        except RescorerError as exc:  # more words than ids, a word twice
            raise RescorerError(f"{path}: not a valid rescorer vocabulary: {exc}") from None

    @classmethod
    def from_counts(cls, counts: Counter[str], size: int) -> Vocab:
        """The ``size - 2`` most frequent tokens; ties in code-point order."""
        ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
        return cls(words=tuple(tok for tok, _ in ranked[: size - FIRST_WORD_ID]), size=size)


KEY_BYTES = 16  # a word of up to 16 bytes is its own key in a ByteTable: two uint64 and a length
_MASKS = np.array([(1 << (8 * k)) - 1 for k in range(9)], dtype=np.uint64)  # k low bytes
_MIX = np.array([0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F], dtype=np.uint64)
_EMPTY = np.uint64(0xFFFF << 32)  # an empty slot's length and id: a length no key has
_ID_BITS = np.uint64(0xFFFFFFFF)
_LOW_HALF = 0 if sys.byteorder == "little" else 1  # a uint64's low half, as two int32
VECTOR_PROBES = (
    2  # slots tried with numpy (at least 1); a token whose word lies further (rare) uses the dict
)


def byte_keys(
    buf: np.ndarray, starts: np.ndarray, lens: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each token buf[starts[i]:starts[i]+lens[i]] (T,) as its key: its first and second 8
    bytes (little-endian, zero past the token), and its hash, (T,) uint64 each. ``buf``
    (uint8) has KEY_BYTES readable bytes after every start."""
    # Every byte offset of buf read as a uint64 (unaligned): one gather per key word
    words = np.ndarray((len(buf) - 7,), dtype="<u8", buffer=buf, strides=(1,))
    low = words[starts]
    low &= _MASKS[np.minimum(lens, 8)]
    high = np.zeros(len(starts), dtype=np.uint64)  # most words have 8 bytes or fewer
    longer = np.flatnonzero(lens > 8)
    high[longer] = words[starts[longer] + 8] & _MASKS[np.minimum(lens[longer] - 8, 8)]
    mixed = high * _MIX[1]
    mixed ^= low
    mixed ^= lens.astype(np.uint64)
    mixed *= _MIX[0]  # the top bits depend on every bit: they pick the slot
    return low, high, mixed


class ByteTable:
    """An open-addressing hash table (linear probing) of byte strings -> ids, looked up for
    many tokens at once with numpy, where ``dict.get`` costs a bytes object and a hash per
    token. A word of up to KEY_BYTES bytes is its own key (its bytes and its length), so a
    hit is an exact match; longer words (rare), and tokens not settled by VECTOR_PROBES
    slots, go through the dict."""

    def __init__(self, index: dict[bytes, int]) -> None:
        self.index = index
        short = {word: i for word, i in index.items() if len(word) <= KEY_BYTES}
        self.has_long = len(short) < len(index)
        bits = max(4, (4 * len(short)).bit_length())  # at most a quarter full
        self.shift = np.uint64(64 - bits)
        size = 1 << bits
        buf = np.frombuffer(b"".join(short) + bytes(KEY_BYTES), dtype=np.uint8)
        lens = np.fromiter(map(len, short), np.int64, len(short))
        low, high, mixed = byte_keys(buf, np.cumsum(lens) - lens, lens)
        taken = [-1] * size  # the word in each slot, the most frequent first (the lowest ids)
        for k, home in enumerate((mixed >> self.shift).tolist()):
            slot = home
            while taken[slot] >= 0:
                slot = (slot + 1) % size
            taken[slot] = k
        at = np.array([slot for slot, k in enumerate(taken) if k >= 0], dtype=np.int64)
        which = np.array([k for k in taken if k >= 0], dtype=np.int64)
        ids = np.fromiter(short.values(), np.int64, len(short))
        # A slot: the key's two words, and its length (high 32 bits) and id (low 32 bits)
        self.low = np.zeros(size, dtype=np.uint64)
        self.high = np.zeros(size, dtype=np.uint64)
        self.meta = np.full(size, _EMPTY, dtype=np.uint64)
        self.low[at], self.high[at] = low[which], high[which]
        self.meta[at] = ((lens[which] << 32) | ids[which]).astype(np.uint64)

    def lookup(self, buf: np.ndarray, starts: np.ndarray, lens: np.ndarray) -> np.ndarray:
        """(T,) int32 the id of each token buf[starts[i]:starts[i]+lens[i]], -1 if none;
        ``buf`` (uint8) has KEY_BYTES readable bytes after every start."""
        low, high, mixed = byte_keys(buf, starts, lens)
        tag = lens.astype(np.uint64) << np.uint64(32)  # (T,) what a slot's length reads
        slot = (mixed >> self.shift).astype(np.int64)  # (T,)
        meta = self.meta[slot]
        length = meta & ~_ID_BITS
        hit = length == tag
        hit &= self.low[slot] == low
        hit &= self.high[slot] == high
        found = np.where(hit, meta.view(np.int32)[_LOW_HALF::2], np.int32(-1))  # the ids
        todo = np.flatnonzero(~hit & (length != _EMPTY))  # (R,) another word there: further
        slot = slot[todo]  # (R,)
        for _ in range(VECTOR_PROBES - 1):
            slot = (slot + 1) & (len(self.meta) - 1)
            meta = self.meta[slot]
            length = meta & ~_ID_BITS
            hit = length == tag[todo]
            hit &= self.low[slot] == low[todo]
            hit &= self.high[slot] == high[todo]
            found[todo[hit]] = meta[hit] & _ID_BITS
            further = ~hit & (length != _EMPTY)
            todo, slot = todo[further], slot[further]
        # The few left (a long probe sequence), and a key longer than KEY_BYTES (no slot)
        rest = todo
        if self.has_long:
            rest = np.concatenate((rest, np.flatnonzero(lens > KEY_BYTES)))
        for t, s, n in zip(rest.tolist(), starts[rest].tolist(), lens[rest].tolist(), strict=True):
            found[t] = self.index.get(buf[s : s + n].tobytes(), -1)
        return found


def build_vocabs(
    pairs: Iterable[tuple[str, str]], src_size: int, tgt_size: int
) -> tuple[Vocab, Vocab]:
    """Source and target shortlists from (source phrase, target phrase) pairs, each pair once.

    A repeated pair is counted once when the repeats are consecutive, as they are in a sorted
    Moses table; memory stays bounded by the vocabulary, not by the table.
    """
    src_counts: Counter[str] = Counter()
    tgt_counts: Counter[str] = Counter()
    previous: tuple[str, str] | None = None
    for src, tgt in pairs:
        if (src, tgt) == previous:
            continue
        previous = (src, tgt)
        src_counts.update(split_tokens(src))
        tgt_counts.update(split_tokens(tgt))
    return Vocab.from_counts(src_counts, src_size), Vocab.from_counts(tgt_counts, tgt_size)


SHORTLISTS_FILE = "shortlists.json"  # beside rescorer vocab's two files: how they were built
SHORTLISTS_FORMAT = "rescorer-shortlists-1"


def save_vocabs(
    folder: str, src: Vocab, tgt: Vocab, settings: dict[str, object] | None = None
) -> tuple[str, str]:
    """The two shortlists in ``folder`` (what a model folder holds) and, with ``settings``,
    how they were built (``rescorer vocab``: the training split's settings, which ``train
    --vocab`` compares with its own)."""
    make_dir(folder)
    src_path = os.path.join(folder, SRC_VOCAB_FILE)
    tgt_path = os.path.join(folder, TGT_VOCAB_FILE)
    src.save(src_path)
    tgt.save(tgt_path)
    if settings is not None:
        write_json(os.path.join(folder, SHORTLISTS_FILE), {"format": SHORTLISTS_FORMAT, **settings})
    return src_path, tgt_path


def load_vocabs(folder: str) -> tuple[Vocab, Vocab, dict[str, object]]:
    """The shortlists ``rescorer vocab`` wrote in ``folder`` (or a model folder's) and the
    settings they were built with ({} when not recorded)."""
    if not os.path.isdir(folder):
        raise RescorerError(f"{folder}: not a folder (expected rescorer vocab's output)")
    src = Vocab.load(os.path.join(folder, SRC_VOCAB_FILE))
    tgt = Vocab.load(os.path.join(folder, TGT_VOCAB_FILE))
    settings: dict[str, object] = {}
    path = os.path.join(folder, SHORTLISTS_FILE)
    if os.path.exists(path):
        data = read_json(path, what="how rescorer vocab built the shortlists")
        if isinstance(data, dict) and data.get("format") == SHORTLISTS_FORMAT:
            settings = {k: v for k, v in data.items() if k != "format"}
    return src, tgt, settings
