"""A chunk of phrase-table text split into columns at once, and the new column put back: the
fast path of the scoring workers.

:func:`split_columns` cuts whole lines into raw lines, sources, targets and the end of each
score field with a few passes over the chunk. It accepts a strict subset of the grammar of
:mod:`rescorer.io.table` (the owner of the phrase-table format) and gives None for anything
else, which is then parsed line by line there. :func:`column_texts` formats a chunk's
log-probabilities as table's ``format_prob``/``format_logp`` would, and
:func:`insert_columns` splices them in at the cuts (what ``PhraseEntry.line_with_columns``
gives). :func:`insert_prob_columns` does both for the "prob" column with numpy over the
chunk (:mod:`rescorer.io.gformat`: ``%g`` byte for byte).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain, repeat

import numpy as np

from rescorer.constants import FIELD_SEP_B, LOGP_FLOOR
from rescorer.io.gformat import G_WIDTH, prob_texts
from rescorer.io.gformat import g_texts as g_texts  # where the tests and benchmarks take it
from rescorer.io.table import MAX_LINE_BYTES, MAX_PHRASE_TOKENS, format_score


@dataclass
class ChunkColumns:
    """Every line of a chunk of table text, split into columns by :func:`split_columns`: the
    chunk's bytes and where each line's fields lie in them (offsets, not copies of the lines)."""

    data: bytes  # the chunk: whole lines, the last one may lack its newline
    starts: np.ndarray  # (N,) int64 where each line starts in data
    ends: np.ndarray  # (N,) int64 where each line ends (its newline, or the end of data)
    score_ends: np.ndarray  # (N,) int64 where each line's score field ends in data
    src_ends: np.ndarray  # (N,) int64 where each line's source phrase ends (at " ||| ")
    tgt_ends: np.ndarray  # (N,) int64 where each line's target phrase ends (at " ||| ")
    # What encoding the phrases reuses (split_columns found them): every space of data, (S,)
    # int64, and the index in it of each line's src_ends and tgt_ends, (N,) int64 each
    spaces: np.ndarray | None = None
    src_sep: np.ndarray | None = None
    tgt_sep: np.ndarray | None = None

    @property
    def tgt_starts(self) -> np.ndarray:
        """(N,) int64 where each line's target phrase starts."""
        return self.src_ends + len(FIELD_SEP_B)

    @property
    def src(self) -> list[bytes]:
        """Each line's source phrase, tokens separated by single spaces (copies)."""
        bounds = map(slice, self.starts.tolist(), self.src_ends.tolist())
        return list(map(self.data.__getitem__, bounds))

    @property
    def tgt(self) -> list[bytes]:
        """Each line's target phrase, likewise (copies)."""
        bounds = map(slice, self.tgt_starts.tolist(), self.tgt_ends.tolist())
        return list(map(self.data.__getitem__, bounds))

    @property
    def lines(self) -> list[bytes]:
        """The raw lines, without newline (copies: for tests and messages)."""
        bounds = map(slice, self.starts.tolist(), self.ends.tolist())
        return list(map(self.data.__getitem__, bounds))

    @property
    def cuts(self) -> list[int]:
        """Byte offset of the end of each line's score field, within the line."""
        return (self.score_ends - self.starts).tolist()


# Bytes that the per-line parser treats specially: CR and NUL (refused), tab (a token
# separator), and vertical tab and form feed (which ``bytes.split()`` would take as score
# separators). Each is one memchr over the chunk.
_CAREFUL_BYTES = (b"\r", b"\0", b"\t", b"\x0b", b"\x0c")
_SEP = np.frombuffer(FIELD_SEP_B, dtype=np.uint8)  # b" ||| "
SPACE, NEWLINE = 32, 10
# Each byte's class in a score field: a digit, a sign, '.', an exponent's e or E, a boundary
# (a space, or the newline after a field), anything else.
DIGIT, SIGN, DOT, EXP, BOUNDARY, OTHER = range(6)
_CLASS = np.full(256, OTHER, dtype=np.uint8)
_CLASS[48:58] = DIGIT
_CLASS[[43, 45]] = SIGN
_CLASS[46] = DOT
_CLASS[[101, 69]] = EXP
_CLASS[[SPACE, NEWLINE]] = BOUNDARY
_CLASS_BYTES = _CLASS.tobytes()  # the same, for bytes.translate
MAX_NUMBER_BYTES = 30  # a longer number goes line by line (the exact path takes it)


def split_columns(
    data: bytes, num_scores: int | None, keep_spaces: bool = False
) -> ChunkColumns | None:
    """The lines of ``data`` (whole lines; the last may lack its newline) split into columns
    with numpy over the chunk's bytes at once instead of :func:`parse_raw_line` per line.

    The result is what ``parse_raw_line`` gives line by line. None when that cannot be
    promised cheaply: any line that is malformed or unusual (invalid UTF-8, CR, NUL or tab bytes,
    phrases with runs of spaces, a bad or missing score, a number of over 30 characters,
    another score count than ``num_scores``, lines with and without fields after the scores);
    the caller then parses line by line, which also names the bad line. With
    ``keep_spaces`` the result keeps where the chunk's spaces are (for
    :func:`rescorer.score.pairs.encode_spans`, which else finds them again; kept unused, they
    cost more than they save: a worker's memory is best given back early).
    """
    if any(b in data for b in _CAREFUL_BYTES):
        return None
    text = np.frombuffer(data, dtype=np.uint8)
    if not _valid_utf8(data, text):
        return None
    ends = np.flatnonzero(text == NEWLINE)  # (N,) each line's newline
    if not data.endswith(b"\n"):
        ends = np.append(ends, len(data))  # the last line, unterminated
    if len(ends) == 0:
        empty = np.zeros(0, dtype=np.int64)
        return ChunkColumns(data, empty, empty, empty, empty, empty)
    starts = np.concatenate(([0], ends[:-1] + 1))  # (N,)
    fields = _fields(text, starts, ends, b"  " in data)
    if fields is None:
        return None
    spaces, src_sep, tgt_sep, score_end = fields
    src_end, tgt_end = spaces[src_sep], spaces[tgt_sep]
    if not _numbers(text, tgt_end + len(FIELD_SEP_B), score_end, num_scores):
        return None
    if not keep_spaces:
        return ChunkColumns(data, starts, ends, score_end, src_end, tgt_end)
    return ChunkColumns(data, starts, ends, score_end, src_end, tgt_end, spaces, src_sep, tgt_sep)


def _valid_utf8(data: bytes, text: np.ndarray) -> bool:
    """Whether ``data`` (``text``, its bytes) is valid UTF-8, decoding only its bytes over
    127: a multi-byte sequence is made of such bytes alone, so the whole is valid exactly when
    each run of them is; the runs are decoded at once, an ASCII space between each two."""
    if data.isascii():
        return True
    high = np.flatnonzero(text >= 0x80)  # (H,)
    new_run = np.ones(len(high), dtype=np.int64)  # (H,) 1 where a run starts
    new_run[1:] = np.diff(high) > 1
    runs = np.empty(len(high) + int(new_run.sum()), dtype=np.uint8)  # a space, a run, ...
    at = np.arange(len(high)) + np.cumsum(new_run)  # (H,) each byte's place in runs
    runs[at] = text[high]
    runs[at[new_run == 1] - 1] = SPACE
    try:
        runs.tobytes().decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _fields(
    text: np.ndarray, starts: np.ndarray, ends: np.ndarray, doubled: bool = True
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """Where each line's source, target and score fields end (``line.split(" ||| ", 3)``):
    every space of the chunk, (S,), the index in it of each line's source end and target end,
    (N,) each, and each score field's end, (N,); or None where a line is not plain: fewer
    than three fields, three on some lines and more on others, an empty phrase or one with a
    space at either end or two in a row, a phrase of over MAX_PHRASE_TOKENS bytes, a line of
    over MAX_LINE_BYTES. ``doubled``: whether text may hold two spaces in a row."""
    n = len(text)
    spaces = np.flatnonzero(text == SPACE)  # (S,) every space, found once
    # Which spaces start a separator (one that fits in text), as indices into spaces
    head_at = np.flatnonzero(text[spaces[: np.searchsorted(spaces, n - 4)] + 1] == _SEP[1])
    for k in range(2, 5):
        head_at = head_at[text[spaces[head_at] + k] == _SEP[k]]
    head = spaces[head_at]  # (H,) where each separator starts
    if len(head) > 1 and np.diff(head).min() < len(FIELD_SEP_B):
        return None  # overlapping separators (" ||| ||| "): bytes.split's own rule decides
    first = np.searchsorted(head, starts)  # (N,) each line's first separator
    count = np.searchsorted(head, ends) - first  # (N,) separators on each line
    if count.min() < 2 or (count.min() == 2) != (count.max() == 2):
        return None  # a line of fewer than three fields, or lines with and without a rest
    src_end, tgt_end = head[first], head[first + 1]
    score_end = head[first + 2] if count.min() > 2 else ends
    tgt_start = src_end + len(FIELD_SEP_B)
    if (
        (src_end - starts).max() > MAX_PHRASE_TOKENS  # fewer tokens: counted line by line
        or (tgt_end - tgt_start).max() > MAX_PHRASE_TOKENS
        or (ends - starts).max() > MAX_LINE_BYTES
        or (src_end == starts).any()
        or (tgt_end == tgt_start).any()
    ):
        return None
    padded = np.append(text, np.uint8(NEWLINE))  # a byte past every phrase end
    edges = np.concatenate((starts, src_end - 1, tgt_start, tgt_end - 1))
    if (padded[edges] == SPACE).any():
        return None  # a phrase starting or ending with a space
    # Two spaces in a row in a phrase (not in the score field or after); rare: memchr first
    doubles = spaces[:-1][np.diff(spaces) == 1] if doubled else spaces[:0]  # (D,)
    if len(doubles):
        line = np.searchsorted(starts, doubles, side="right") - 1
        if (doubles < tgt_end[line]).any():
            return None
    return spaces, head_at[first], head_at[first + 1], score_end


def _numbers(
    text: np.ndarray, field_start: np.ndarray, field_end: np.ndarray, num_scores: int | None
) -> bool:
    """Whether every score field text[field_start:field_end] is ``num_scores`` numbers (any
    count with None) separated by single spaces, each as the fast path has always read it:
    [-+]? then digits with an optional '.' and digits, or '.' and digits, then an optional
    [eE][-+]? and one or two digits (a number float() reads as a finite value)."""
    # The fields and the byte after each (a newline, or the space of " ||| "), gathered in one
    # array after a newline, each byte as its class: runs of numbers between boundaries
    lens = field_end - field_start + 1  # (N,) each field and the byte after it
    seg = np.cumsum(lens) - lens  # (N,) where each one goes
    at = np.arange(int(seg[-1] + lens[-1])) + np.repeat(field_start - seg, lens)  # (B-1,)
    padded = text if field_end[-1] < len(text) else np.append(text, np.uint8(NEWLINE))
    gathered = padded[at].tobytes().translate(_CLASS_BYTES)
    classes = np.frombuffer(bytes((BOUNDARY,)) + gathered, dtype=np.uint8)  # (B,)
    if (classes == OTHER).any():
        return False
    bounds = np.flatnonzero(classes == BOUNDARY)  # (T+1,) before each number, after the last
    gaps = np.diff(bounds)
    if (gaps == 1).any() or (gaps > MAX_NUMBER_BYTES + 1).any():
        return False  # an empty number (two spaces in a row, a space at either end), a long one
    if num_scores is not None:
        after = seg + lens  # (N,) each field's end in ``classes``
        per_line = np.diff(np.searchsorted(bounds, after), prepend=0)  # (N,) numbers per line
        if (per_line != num_scores).any():
            return False
    return _number_grammar(classes, bounds)


def _number_grammar(classes: np.ndarray, bounds: np.ndarray) -> bool:
    """The grammar of each number between ``bounds`` in ``classes`` (the bytes' classes: no
    OTHER, no number empty), by the bytes other than digits: each in its place, with the right
    neighbours, and in order within its number (a sign, a '.', an exponent, its sign)."""
    at = np.flatnonzero((classes >= SIGN) & (classes <= EXP))  # (S,) every byte not a digit
    if len(at) == 0:
        return True
    byte, before, after = classes[at], classes[at - 1], classes[at + 1]
    lead_sign = (byte == SIGN) & (before == BOUNDARY) & ((after == DIGIT) | (after == DOT))
    exp_sign = (byte == SIGN) & (before == EXP) & (after == DIGIT)
    dot = (
        (byte == DOT)
        & ((before == DIGIT) | (after == DIGIT))
        & ((before == DIGIT) | (before == SIGN) | (before == BOUNDARY))
        & ((after == DIGIT) | (after == EXP) | (after == BOUNDARY))
    )
    exponent = (byte == EXP) & ((before == DIGIT) | (before == DOT))
    exponent &= (after == DIGIT) | (after == SIGN)
    if not (lead_sign | exp_sign | dot | exponent).all():
        return False
    # The order within a number: sign 0, '.' 1, exponent 2, its sign 3, each at most once.
    rank = np.select([lead_sign, dot, exponent], [0, 1, 2], 3)
    number = np.searchsorted(bounds, at)  # (S,) the number each byte is in
    same = number[1:] == number[:-1]
    if (same & (rank[1:] <= rank[:-1])).any():
        return False
    # One or two exponent digits: the number's end, less the exponent and its sign.
    e = at[exponent]
    exp_digits = bounds[number[exponent]] - e - 1 - (classes[e + 1] == SIGN)
    return bool((exp_digits <= 2).all())


def column_texts(
    logp: Sequence[float], column: str, unk: Sequence[int] | None, lead: str = ""
) -> list[bytes]:
    """The text each line gets: ``format_prob`` (column "prob") or ``format_logp`` of its
    log-probability, then with ``unk`` the word penalty ``format_score(exp(unk))``; each
    after ``lead``. Made with maps over the whole chunk, not a Python loop per line."""
    if column == "prob":
        spec = lead + "{:g}"
        texts = map(spec.format, map(math.exp, map(max, logp, repeat(LOGP_FLOOR))))
    else:
        texts = map((lead + "{:.8g}").format, logp)
    if unk:  # a table of the counts that occur
        penalty = [" " + format_score(math.exp(k)) for k in range(max(unk) + 1)]
        texts = map(str.__add__, texts, map(penalty.__getitem__, unk))
    joined = "\n".join(texts)
    return joined.encode("ascii").split(b"\n") if joined else []


def insert_columns(lines: Sequence[bytes], cuts: Sequence[int], texts: Sequence[bytes]) -> bytes:
    """Each raw line with " " + its text inserted at its cut (the end of its score field), and
    a newline: what ``PhraseEntry.line_with_columns`` gives, joined."""
    heads = map(bytes.__getitem__, lines, map(slice, cuts))
    tails = map(bytes.__getitem__, lines, map(slice, cuts, repeat(None)))
    return b"".join(chain.from_iterable(zip(heads, repeat(b" "), texts, tails, repeat(b"\n"))))


def insert_at(data: bytes, cuts: Sequence[int], texts: Sequence[bytes]) -> bytes:
    """``data`` with ``texts[i]`` inserted at byte ``cuts[i]`` (ascending): a chunk's lines
    with their new columns at the ends of their score fields, in one join over the stretches
    between the cuts."""
    if not len(cuts):
        return data
    ends = list(cuts)
    stretches = map(data.__getitem__, map(slice, [0, *ends[:-1]], ends))
    return b"".join(
        chain(chain.from_iterable(zip(stretches, texts, strict=True)), (data[ends[-1] :],))
    )


_COLUMN = np.arange(G_WIDTH + 2)  # column numbers of a row of inserted text


def insert_prob_columns(
    data: bytes, cuts: np.ndarray, logp: np.ndarray, unk: np.ndarray | None
) -> bytes:
    """``insert_at`` of the "prob" columns: at each cut (N,) " " + ``format_prob`` of each
    model's log-probability (N,M), then with ``unk`` (N,) " " + the word penalty, as
    :func:`column_texts` writes them, with numpy over the chunk (:func:`prob_texts`)."""
    n = len(cuts)
    if n == 0:
        return data
    pieces = [prob_texts(logp[:, k]) for k in range(logp.shape[1])]  # (N,W) rows, (N,) lens
    if unk is not None:
        table = [format_score(math.exp(k)).encode("ascii") for k in range(int(unk.max()) + 1)]
        rows = np.zeros((len(table), max(map(len, table))), dtype=np.uint8)
        for i, text in enumerate(table):
            rows[i, : len(text)] = np.frombuffer(text, dtype=np.uint8)
        pieces.append((rows[unk], np.fromiter(map(len, table), np.int64, len(table))[unk]))
    # Each line's new bytes: a space and a piece's row, for every piece, in a grid (N,W')
    # whose ``keep`` marks the bytes that are written
    width = sum(rows.shape[1] + 1 for rows, _ in pieces)
    grid = np.empty((n, width), dtype=np.uint8)
    keep = np.empty((n, width), dtype=bool)
    per_line = np.zeros(n, dtype=np.int64)  # (N,)
    col = 0
    for rows, lens in pieces:
        w = rows.shape[1] + 1
        grid[:, col] = SPACE
        grid[:, col + 1 : col + w] = rows
        np.less_equal(_COLUMN[:w], lens[:, None], out=keep[:, col : col + w])
        per_line += lens + 1
        col += w
    inserted = grid[keep]  # (T,) each line's bytes, line after line
    at = np.repeat(cuts, per_line) + np.arange(len(inserted))  # (T,) their places in out
    out = np.empty(len(data) + len(inserted), dtype=np.uint8)
    from_data = np.ones(len(out), dtype=bool)
    from_data[at] = False
    out[at] = inserted
    out[from_data] = np.frombuffer(data, dtype=np.uint8)
    return out.tobytes()
