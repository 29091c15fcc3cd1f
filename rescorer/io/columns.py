"""A chunk of phrase-table text split into columns at once, and the new column put back: the
fast path of the scoring workers.

:func:`split_columns` cuts whole lines into raw lines, sources, targets and the end of each
score field with a few passes over the chunk. It accepts a strict subset of the grammar of
:mod:`rescorer.io.table` (the owner of the phrase-table format) and gives None for anything
else, which is then parsed line by line there. :func:`column_texts` formats a chunk's
log-probabilities as table's ``format_prob``/``format_logp`` would, and
:func:`insert_columns` splices them in at the cuts (what ``PhraseEntry.line_with_columns``
gives).
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain, repeat
from operator import add, itemgetter

from rescorer.constants import FIELD_SEP_B, LOGP_FLOOR
from rescorer.io.table import MAX_LINE_BYTES, MAX_PHRASE_TOKENS, format_score


@dataclass
class ChunkColumns:
    """Every line of a chunk of table text, split into columns by :func:`split_columns`."""

    lines: list[bytes]  # the raw lines, without newline
    cuts: list[int]  # byte offset of the end of each line's score field
    src: list[bytes]  # each line's source phrase: tokens separated by single spaces
    tgt: list[bytes]  # each line's target phrase, likewise


# Bytes that the per-line parser treats specially: CR (refused), tab (a token separator), and
# vertical tab and form feed (which ``bytes.split()`` would take as score separators).
_CAREFUL_BYTES = (b"\r", b"\t", b"\x0b", b"\x0c")


def _plain_phrases(column: Sequence[bytes]) -> bool:
    """Whether every phrase is non-empty, tokens separated by single spaces (so its tokens are
    ``phrase.split(" ")``, as :func:`split_tokens` would give them)."""
    joined = b"\n".join(column)
    return not (
        b"  " in joined
        or b"\n " in joined
        or b" \n" in joined
        or b"\n\n" in joined
        or joined[:1] in (b"", b" ", b"\n")
        or joined[-1:] in (b" ", b"\n")
    )


# A number float() reads as a finite value: at most 30 integer digits and a 2-digit exponent.
_NUMBER = rb"[-+]?(?:[0-9]{1,30}(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]{1,2})?"


@functools.lru_cache(maxsize=8)
def _score_fields(num_scores: int | None) -> re.Pattern[bytes]:
    """Score fields joined by newlines (and one at the end), num_scores numbers each."""
    more = b"*" if num_scores is None else b"{%d}" % (num_scores - 1)
    return re.compile(rb"(?:%s(?: %s)%s\n)*" % (_NUMBER, _NUMBER, more))


def split_columns(data: bytes, num_scores: int | None) -> ChunkColumns | None:
    """The lines of ``data`` (whole lines; the last may lack its newline) split into columns
    with a few passes over the whole chunk instead of :func:`parse_raw_line` per line.

    The result is what ``parse_raw_line`` gives line by line. None when that cannot be
    promised cheaply: any line that is malformed or unusual (invalid UTF-8, CR or tab bytes,
    phrases with runs of spaces, a bad or missing score, another score count than
    ``num_scores``, lines with and without fields after the scores); the caller then parses
    line by line, which also names the bad line.
    """
    if any(b in data for b in _CAREFUL_BYTES):
        return None
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    lines = data.split(b"\n")
    if lines[-1] == b"":
        lines.pop()
    if not lines:
        return ChunkColumns([], [], [], [])
    fields = [line.split(FIELD_SEP_B, 3) for line in lines]
    widths = set(map(len, fields))
    if widths not in ({3}, {4}):
        return None
    src, tgt, scores = (list(map(itemgetter(k), fields)) for k in range(3))
    if not (_plain_phrases(src) and _plain_phrases(tgt)):
        return None
    # A phrase of MAX_PHRASE_TOKENS bytes has fewer tokens: longer ones are counted line by line.
    if max(map(len, src)) > MAX_PHRASE_TOKENS or max(map(len, tgt)) > MAX_PHRASE_TOKENS:
        return None
    if max(map(len, lines)) > MAX_LINE_BYTES:
        return None
    # Scores: one pass of a strict pattern over all score fields. It accepts a subset of what
    # parse_scores takes (plain decimal numbers, single spaces, num_scores a line); the rest
    # goes line by line.
    if _score_fields(num_scores).fullmatch(b"\n".join(scores) + b"\n") is None:
        return None
    # line = src SEP tgt SEP scores [SEP rest]: the score field ends two separators after.
    cuts = [len(FIELD_SEP_B) * 2] * len(lines)
    for column in (src, tgt, scores):
        cuts = list(map(add, cuts, map(len, column)))
    return ChunkColumns(lines, cuts, src, tgt)


def column_texts(logp: Sequence[float], column: str, unk: Sequence[int] | None) -> list[bytes]:
    """The text each line gets: ``format_prob`` (column "prob") or ``format_logp`` of its
    log-probability, then with ``unk`` the word penalty ``format_score(exp(unk))``. Made
    with maps over the whole chunk, not a Python loop per line."""
    if column == "prob":
        texts = map("{:g}".format, map(math.exp, map(max, logp, repeat(LOGP_FLOOR))))
    else:
        texts = map("{:.8g}".format, logp)
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
