"""Moses' lexical weights of a phrase pair, as ``phrase-extract/score`` computes them, from the
word translation tables ``train-model.perl`` writes (``model/lex.f2e`` and ``model/lex.e2f``),
for phrase pairs that come without a word alignment (``rescorer extend``'s). docs/extend.md
says why each choice below is made. No torch here.

The files: one ``word_1 word_2 p`` per line. ``lex.f2e`` holds ``e f w(e|f)``, ``lex.e2f``
holds ``f e w(f|e)`` (train-model.perl's ``get_lexical``); ``NULL`` is the empty word.

Moses (``score-main.cpp``, ``computeLexicalTranslation``): for a target word e_i aligned to the
source words A(i), ``w = mean over j in A(i) of w(e_i|f_j)``, and ``w(e_i|NULL)`` when A(i) is
empty; lex(e|f) is the product over the target words. lex(f|e) is the same with the roles
swapped (``score --Inverse`` on the inverted extract, with lex.e2f). A generated pair has no
alignment: the one used here links each word to the word of the other side that translates it
best (``w(e_i|f_j)`` highest for e_i, ``w(f_j|e_i)`` highest for f_j; the union of the two), the
symmetrised alignment a word-translation table implies. A word pair missing from the table
scores ``floor`` (Moses' ``permissiveLookup`` returns 1.0 there, which it never meets for an
extracted pair: every aligned word pair was counted).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from rescorer.errors import InputError

NULL = "NULL"


@dataclass(frozen=True)
class LexicalTable:
    """w(out | given) for word pairs: ``table[given][out]``."""

    table: dict[str, dict[str, float]]

    def get(self, given: str, out: str) -> float | None:
        row = self.table.get(given)
        return None if row is None else row.get(out)


def read_lex(path: str) -> LexicalTable:
    """A lex.f2e or lex.e2f file: ``out given p`` per line (the first word is the one whose
    probability the line gives). A p outside [0, 1] (nan and inf among them) is an InputError
    naming the line. 0 is a probability: train-model.perl writes p with ``%.7f``
    (LexicalTranslationModel.pm:71-72), so a w(e|f) under 5e-8 reads ``0.0000000``; Moses'
    ``score`` multiplies it in as it is, and a pair's lexical weight of 0 is written as
    e^-100, the floor of every column rescorer writes."""
    from rescorer.io.inputs import open_text

    table: dict[str, dict[str, float]] = {}
    with open_text(path) as lines:
        for lineno, line in enumerate(lines, start=1):
            fields = line.split()
            if not fields:
                continue
            if len(fields) != 3:
                raise InputError(path, lineno, f"{len(fields)} fields, expected 'word word p'")
            try:
                prob = float(fields[2])
            except ValueError:
                prob = math.nan
            if not 0.0 <= prob <= 1.0:  # nan and inf too: they would be written through
                raise InputError(
                    path,
                    lineno,
                    f"{fields[2]!r} is not a probability in [0, 1] (expected 'word word p', p a "
                    "word translation probability)",
                )
            table.setdefault(fields[1], {})[fields[0]] = prob
    return LexicalTable(table)


@dataclass(frozen=True)
class LexicalWeights:
    inverse: float  # lex(f|e): Moses' column 2
    direct: float  # lex(e|f): Moses' column 4
    alignment: tuple[tuple[int, int], ...]  # (source, target) links, sorted


def best_links(
    src: Sequence[str], tgt: Sequence[str], f2e: LexicalTable, e2f: LexicalTable
) -> tuple[tuple[int, int], ...]:
    """The union of each target word's best source word by w(e|f) and each source word's best
    target word by w(f|e), among word pairs the tables hold; sorted (source, target)."""
    links: set[tuple[int, int]] = set()
    for i, e in enumerate(tgt):
        scored = [(w, j) for j, f in enumerate(src) if (w := f2e.get(f, e)) is not None]
        if scored:
            links.add((max(scored, key=lambda x: (x[0], -x[1]))[1], i))
    for j, f in enumerate(src):
        scored = [(w, i) for i, e in enumerate(tgt) if (w := e2f.get(e, f)) is not None]
        if scored:
            links.add((j, max(scored, key=lambda x: (x[0], -x[1]))[1]))
    return tuple(sorted(links))


def _one_side(
    words: Sequence[str],
    others: Sequence[str],
    aligned: Sequence[list[int]],
    table: LexicalTable,
    floor: float,
) -> float:
    """prod over ``words`` of the mean of w(word | aligned other words), w(word | NULL) for an
    unaligned one; a pair the table lacks scores ``floor``."""
    lex = 1.0
    for k, word in enumerate(words):
        given = [others[j] for j in aligned[k]] or [NULL]
        values = [table.get(g, word) for g in given]
        lex *= sum(floor if v is None else v for v in values) / len(values)
    return lex


def lexical_weights(
    src: Sequence[str],
    tgt: Sequence[str],
    f2e: LexicalTable,
    e2f: LexicalTable,
    floor: float,
) -> LexicalWeights:
    """lex(f|e) and lex(e|f) of a pair under the alignment :func:`best_links` gives it."""
    links = best_links(src, tgt, f2e, e2f)
    to_src: list[list[int]] = [[] for _ in tgt]
    to_tgt: list[list[int]] = [[] for _ in src]
    for j, i in links:
        to_src[i].append(j)
        to_tgt[j].append(i)
    direct = _one_side(tgt, src, to_src, f2e, floor)
    inverse = _one_side(src, tgt, to_tgt, e2f, floor)
    return LexicalWeights(inverse, direct, links)
