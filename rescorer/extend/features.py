"""The scores of a generated pair, column by column, in the two forms (docs/extend.md §2 defines
and justifies each). No torch here.

Fill-up: the table's own columns, then the provenance column. The table's columns are Moses'
four (phi(f|e), lex(f|e), phi(e|f), lex(e|f)), then, if the table was scored, one column per
``-m`` model (``rescorer score`` with the same models, in the same order), then possibly the
word penalty (``score --word-penalty``). A generated pair gets ``floor`` for both phrase
probabilities (it was never extracted: no counts), the lexical weights from lex.f2e/lex.e2f
(``floor`` without them), each model's p, exp(0) = 1 for the word penalty (no word outside
the shortlist: such targets are never generated), and 2.718 (exp 1) for the provenance.

Second table: each model's p, then lex(f|e) and lex(e|f) when the lex files are given, then
2.718: a constant whose tuned weight is what using a generated pair costs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from rescorer.constants import LOGP_FLOOR
from rescorer.errors import RescorerError
from rescorer.moses.lex import LexicalWeights

MOSES_COLUMNS = 4
GENERATED = "2.718"  # combine-ptables.pl's exp(1) for "not from the first table"


@dataclass(frozen=True)
class Layout:
    """The columns of a generated pair's line."""

    fill_up: bool
    models: int  # RNN columns (fill-up: those the table has; second table: one per -m)
    word_penalty: bool  # fill-up only: the table has score's word-penalty column
    lex: bool  # lexical weights computed (else the floor; second table: no lex columns)

    @property
    def count(self) -> int:
        if self.fill_up:
            return MOSES_COLUMNS + self.models + int(self.word_penalty) + 1
        return self.models + 2 * int(self.lex) + 1


def layout_for(num_scores: int | None, models: int, fill_up: bool, lex: bool) -> Layout:
    """The layout of a table with ``num_scores`` columns extended with ``models`` models; a
    fill-up of a table whose columns are not Moses' four, plus the models' columns as
    ``rescorer score`` adds them, is refused."""
    if not fill_up:
        return Layout(False, models, False, lex)
    fits = {
        MOSES_COLUMNS: (0, False),
        MOSES_COLUMNS + models: (models, False),
        MOSES_COLUMNS + models + 1: (models, True),
    }
    if num_scores not in fits:
        raise RescorerError(
            f"the table has {num_scores} scores a line; a fill-up fills Moses' {MOSES_COLUMNS}, "
            f"or those and the {models} column(s) rescorer score adds with these -m models "
            f"({MOSES_COLUMNS + models}), and its --word-penalty ({MOSES_COLUMNS + models + 1})"
        )
    scored, penalty = fits[num_scores]
    return Layout(True, scored, penalty, lex)


def prob_text(logp: float) -> str:
    """A probability as Moses reads it (``rescorer score``'s column): exp(logp), >= e^-100."""
    return f"{math.exp(max(logp, LOGP_FLOOR)):g}"


def pair_scores(
    layout: Layout, logps: Sequence[float], lex: LexicalWeights | None, floor: float
) -> list[str]:
    """The score field's values of one generated pair: ``logps`` per model, in -m order."""
    rnn = [prob_text(v) for v in logps[: layout.models]]
    inverse, direct = (lex.inverse, lex.direct) if lex is not None else (floor, floor)
    lexical = [prob_text(math.log(max(inverse, 1e-300))), prob_text(math.log(max(direct, 1e-300)))]
    if layout.fill_up:
        moses = [f"{floor:g}", lexical[0], f"{floor:g}", lexical[1]]
        return [*moses, *rnn, *(["1"] if layout.word_penalty else []), GENERATED]
    return [*rnn, *(lexical if layout.lex else []), GENERATED]
