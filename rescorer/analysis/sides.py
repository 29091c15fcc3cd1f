"""Which side of a phrase table an analysis reads, decided by the model's direction.

A forward model reads a pair's source phrase f and predicts its target e: it gives p(e|f), which
a Moses table holds as its direct phrase probability (score column 2, counting from 0). An
inverse model (``train --direction inverse``) reads the target and predicts the source: p(f|e),
the table's column 0. ``sample``, ``compare`` and ``plot`` take their phrases from the side the
model reads (the "given" side), compare with the table's column of the same direction, and say
which direction they show. Torch-free.
"""

from __future__ import annotations

from dataclasses import dataclass

from rescorer.constants import DIRECTIONS, FORWARD, INVERSE
from rescorer.io.table import PhraseEntry

# train-model.perl's four scores: p(f|e) lex(f|e) p(e|f) lex(e|f)
COLUMN = {FORWARD: 2, INVERSE: 0}


@dataclass(frozen=True)
class Sides:
    """The table's sides as a model of ``direction`` sees them."""

    direction: str = FORWARD

    def __post_init__(self) -> None:
        if self.direction not in DIRECTIONS:
            raise ValueError(f"direction {self.direction!r}: expected {' or '.join(DIRECTIONS)}")

    @property
    def inverse(self) -> bool:
        return self.direction == INVERSE

    @property
    def given(self) -> str:
        """The side the model reads (its encoder's): "source" or "target"."""
        return "target" if self.inverse else "source"

    @property
    def predicted(self) -> str:
        """The side the model predicts (its decoder's)."""
        return "source" if self.inverse else "target"

    @property
    def probability(self) -> str:
        """What the model gives, in the paper's letters (f source, e target)."""
        return "p(f|e)" if self.inverse else "p(e|f)"

    @property
    def column(self) -> int:
        """The Moses table's score column of the same direction (from 0)."""
        return COLUMN[self.direction]

    def column_or_default(self, column: int | None) -> int:
        return self.column if column is None else column

    def given_of(self, entry: PhraseEntry) -> str:
        return entry.tgt if self.inverse else entry.src

    def predicted_of(self, entry: PhraseEntry) -> str:
        return entry.src if self.inverse else entry.tgt

    def given_count(self, entry: PhraseEntry) -> float:
        """The table's count of the given phrase (counts field: target, source, joint), 0 when
        the table has no counts."""
        counts = entry.counts
        if not counts or len(counts) < 2:
            return 0.0
        return counts[0] if self.inverse else counts[1]

    def model_side(self, side: str) -> str:
        """The model's "source" (encoder) or "target" (decoder) holding the table's ``side``."""
        return side if not self.inverse else ("target" if side == "source" else "source")

    def describe(self) -> str:
        """One line for the user: what the shown figures are."""
        return (
            f"{self.direction} model: {self.given} phrases given, {self.predicted} phrases "
            f"predicted, {self.probability}"
        )


FORWARD_SIDES = Sides()
