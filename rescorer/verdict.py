"""Has a model learned anything, and does a table fit its shortlists? (torch-free)

A model whose validation perplexity is not clearly below a unigram model's (the target words'
training frequencies, scored on the same held-out pairs) has learned nothing a tuned Moses
system can use: its column costs BLEU (a new user measured -0.87 with such a model). ``train``
ends with this verdict, ``info`` shows it, and ``score`` and the Table 1 driver warn about it.

"Clearly below" is :data:`LEARNED_RATIO`: the best validation perplexity under 0.5 times the
unigram's (at least 0.69 nats a word better). Between the two a model is "barely learned". The
training table's shortlist coverage (the share of training pairs with every word of both phrases
inside the shortlists) is recorded in the provenance; a table scored with much lower coverage
(:data:`COVERAGE_GAP` or more below) was most likely not the one the model was trained on, and
one under :data:`FOREIGN_RATIO` of it is another language pair's or domain's: ``score`` refuses
it after its first :data:`COVERAGE_MIN_PAIRS` pairs, before it scores them, and ``check -m``
gives the same verdict (:func:`coverage_verdict`).
"""

from __future__ import annotations

from typing import Any, NamedTuple

LEARNED_RATIO = 0.5  # best validation ppl < this x unigram ppl (0.69 nats a word better): "learned"
COVERAGE_GAP = 0.05  # a scored table's coverage this far under the training table's: warn
# Under this share of the training table's coverage: a model for another table (refused). A
# new user's en-fr model on an en-de table: 7.0% against 73.9%; the same table's windows of
# one chunk stay above 0.7 of it (the en-fr table with 15,000-word shortlists: 68-98% against
# 93.8% over 9,000-line windows; the quickstart sample with 4,000: 65-87% against 73.5%).
FOREIGN_RATIO = 0.5
COVERAGE_MIN_PAIRS = 5_000  # pairs seen before a coverage verdict (a 1 MiB chunk has ~9,000)


class Verdict(NamedTuple):
    learned: bool
    valid_ppl: float
    unigram_ppl: float

    @property
    def text(self) -> str:
        ratio = self.valid_ppl / self.unigram_ppl
        if self.learned:
            what = "learned"
        elif ratio < 1.0:
            what = "barely learned (not clearly better than a unigram model)"
        else:
            what = "NOT LEARNED (not better than a unigram model)"
        return (
            f"{what}: best validation perplexity {self.valid_ppl:,.2f}"
            f" against the unigram's {self.unigram_ppl:,.2f} ({ratio:.2f}x)"
        )

    @property
    def sentence(self) -> str:
        """The verdict as a sentence about the model: ``the model has NOT LEARNED (...): ...``
        (:attr:`text` is the label ``info`` shows after ``verdict:``)."""
        return f"the model has {self.text}"


def training_verdict(provenance: dict[str, Any]) -> Verdict | None:
    """The verdict from a model directory's provenance (None: trained without validation)."""
    training = provenance.get("training")
    if not isinstance(training, dict):
        return None
    valid, unigram = training.get("valid_ppl"), training.get("unigram_ppl")
    if not isinstance(valid, (int, float)) or not isinstance(unigram, (int, float)):
        return None
    if not unigram > 0:
        return None
    return Verdict(valid < LEARNED_RATIO * unigram, float(valid), float(unigram))


def unlearned_warning(provenance: dict[str, Any], model_dir: str) -> str | None:
    """One warning line for a model that has not clearly learned, else None."""
    verdict = training_verdict(provenance)
    if verdict is None or verdict.learned:
        return None
    return f"warning: {model_dir}: {verdict.sentence}; its column may cost BLEU"


def training_coverage(provenance: dict[str, Any]) -> float | None:
    """The training table's share of pairs inside both shortlists (None: not recorded)."""
    training = provenance.get("training")
    value = training.get("shortlist_coverage") if isinstance(training, dict) else None
    return float(value) if isinstance(value, (int, float)) else None


class CoverageVerdict(NamedTuple):
    """How a table fits a model's shortlists against how its training table did."""

    seen: float  # share of the pairs read with every word inside the shortlists
    trained: float  # the same share over the training table's pairs
    pairs: int  # pairs read

    @property
    def foreign(self) -> bool:
        """Far below: the model of another language pair or table (score refuses it)."""
        return self.seen < FOREIGN_RATIO * self.trained

    @property
    def lower(self) -> bool:
        """Clearly below (score warns)."""
        return self.seen <= self.trained - COVERAGE_GAP

    def describe(self, model_dir: str, what: str) -> str:
        """``MODEL: 7.0% of WHAT have every word inside ..., against 73.9% of ...: ...``"""
        text = (
            f"{model_dir}: {self.seen:.1%} of {what} have every word inside the model's "
            f"shortlists, against {self.trained:.1%} of its training table's pairs"
        )
        if self.foreign:
            return text + ": a model for another language pair or table?"
        if self.lower:
            return text + ": was it trained on another table?"
        return text + ": it fits the model"


def coverage_verdict(provenance: dict[str, Any], inside: int, pairs: int) -> CoverageVerdict | None:
    """The verdict on ``inside`` of ``pairs`` pairs inside a model's shortlists (None: the
    training coverage is not recorded, or fewer than :data:`COVERAGE_MIN_PAIRS` pairs)."""
    trained = training_coverage(provenance)
    if trained is None or pairs < COVERAGE_MIN_PAIRS:
        return None
    return CoverageVerdict(inside / pairs, trained, pairs)


def coverage_warning(
    provenance: dict[str, Any], model_dir: str, inside: int, pairs: int
) -> str | None:
    """A warning when ``inside`` of ``pairs`` scored pairs fit the shortlists far less often
    than the training table's pairs did (None below :data:`COVERAGE_MIN_PAIRS` pairs)."""
    verdict = coverage_verdict(provenance, inside, pairs)
    if verdict is None or not verdict.lower:
        return None
    return f"warning: {verdict.describe(model_dir, 'the pairs scored so far')}"
