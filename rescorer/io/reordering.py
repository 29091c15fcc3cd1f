"""Telling a phrase table from a lexicalised reordering table, by its first lines, and the one
refusal of score, train and moses-ini when given the latter.

rescorer reads Moses' reordering-table format only here, and only to recognise it; the
phrase-table format is :mod:`rescorer.io.table`'s.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from rescorer.constants import FIELD_SEP
from rescorer.errors import RescorerError
from rescorer.io.inputs import iter_raw_lines, open_binary
from rescorer.io.table import parse_scores

SNIFF_LINES = 1000  # the first lines that tell a phrase table from a reordering table
# A lexicalised reordering table (train-model.perl -reordering, Moses'
# LexicalReorderingConfiguration) holds, per orientation model and direction, one probability
# per orientation: msd 3 (monotone, swap, discontinuous), mslr 4 (monotone, swap, left,
# right), monotonicity and leftright 2; bidirectional tables hold the backward then the
# forward group. Each group sums to 1. Its lines are "src ||| tgt ||| scores" (fe) or
# "src ||| scores" (f): no alignment or count fields.
_ORIENTATIONS = {2: "monotonicity or leftright", 3: "msd", 4: "mslr"}
_SUM_TOLERANCE = 1e-4  # six significant digits a score: a group's sum is 1 within 1e-5


@dataclass(frozen=True)
class TableKind:
    """What the first lines of a table say it is."""

    reordering: bool  # a lexicalised reordering table, not a phrase table
    what: str  # "a phrase table" or "a lexicalised reordering table (...)"


PHRASE_TABLE = TableKind(False, "a phrase table")


def table_kind(raw_lines: Iterable[bytes]) -> TableKind:
    """Phrase table or lexicalised reordering table, from (the first SNIFF_LINES of) its lines.

    A reordering table when every line has 2 or 3 fields (no alignment or counts), the same
    number of scores, 2, 3, 4, 6 or 8 of them, in one or two equal groups (backward, forward)
    of 2 to 4 probabilities that each sum to 1. A phrase table's scores do not: its four
    columns are two conditional phrase probabilities and two lexical weights of one pair.
    Anything else (including malformed lines) is taken for a phrase table, whose reader then
    says what is wrong with it.
    """
    shape: tuple[int, int] | None = None  # fields, scores
    groups = None  # the group sizes that every line so far fits
    for raw in itertools.islice((r for r in raw_lines if r.strip()), SNIFF_LINES):
        try:
            fields = raw.decode("utf-8").rstrip("\n").split(FIELD_SEP)
        except UnicodeDecodeError:
            return PHRASE_TABLE
        scores = parse_scores(fields[-1]) if len(fields) in (2, 3) else "not 2 or 3 fields"
        if isinstance(scores, str) or shape not in (None, (len(fields), len(scores))):
            return PHRASE_TABLE
        shape = (len(fields), len(scores))
        if groups is None:
            groups = [size for size in _ORIENTATIONS if len(scores) in (size, 2 * size)]
        groups = [size for size in groups if _sums_to_one(scores, size)]
        if not groups:
            return PHRASE_TABLE
    if shape is None or not groups:
        return PHRASE_TABLE
    (num_fields, num_scores), size = shape, groups[0]
    model = _ORIENTATIONS[size].split(" or ")[0]
    condition = "fe" if num_fields == 3 else "f"
    if num_scores == 2 * size:
        layout = f"backward and forward groups of {size}"
        name = f"{model}-bidirectional-{condition}"
    else:
        layout, name = f"one group of {size}", f"{model}-{condition}"
    return TableKind(
        True,
        f"a lexicalised reordering table ({num_scores} scores a line: {layout} orientation "
        f"probabilities that each sum to 1, as in {name})",
    )


def _sums_to_one(scores: Sequence[float], size: int) -> bool:
    return all(0.0 <= v <= 1.0 for v in scores) and all(
        abs(sum(scores[i : i + size]) - 1.0) <= _SUM_TOLERANCE for i in range(0, len(scores), size)
    )


def sniff_table_kind(path: str) -> TableKind | None:
    """``table_kind`` of the first lines of the file ``path``; None for stdin or a pipe,
    which can be read only once (the caller looks at its first chunk instead)."""
    if path == "-" or not os.path.isfile(path):
        return None
    with open_binary(path) as stream:
        return table_kind(itertools.islice(iter_raw_lines(stream, path), SNIFF_LINES))


def not_a_reordering_table(name: str, kind: TableKind | None) -> None:
    """Raise the one refusal of score, train and moses-ini when ``kind`` is a reordering
    table (nothing when it is a phrase table or unknown)."""
    if kind is not None and kind.reordering:
        raise RescorerError(
            f"{name} is {kind.what}, not a phrase table: rescorer scores and trains on the "
            "phrase table (train-model.perl's model/phrase-table.gz, the path= of the "
            "moses.ini's PhraseDictionary line)"
        )
