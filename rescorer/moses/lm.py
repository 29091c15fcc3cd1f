"""KenLM language models, in natural-log units (the only module that imports kenlm).

KenLM works in log10; Moses multiplies every KenLM score by ln 10 (``TransformLMScore``,
moses/LM/Ken.cpp:193-194) before weighting it, and so does this module.

What Moses adds for a target phrase at load time (moses/LM/Base.cpp:62-87, Ken.cpp
``CalcScore``): the phrase is scored word by word from an empty context (no ``<s>``), each word
given the words before it inside the phrase, up to order-1 of them. The first order-1 words
(which lack a full left context, so their probabilities come from lower orders) go into the
*estimated* score; the words after them, scored with complete n-grams, go into the score
breakdown. The decoder's future score, which ranks phrase pairs for ``table-limit``, is
``weight * (ngram + estimate)``: the whole phrase scored on its own. That equals KenLM's
``score(phrase, bos=False, eos=False)`` times ln 10.

Moses' ``RuleScore`` adds KenLM's *rest cost* for the first words. It equals the probability in
ARPA files and in probing and trie binaries (lm.fr.binary is a trie); only KenLM's rest_probing
binaries store separate rest costs, which the kenlm Python module does not expose: for those the
estimate here uses the probabilities.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from rescorer.errors import RescorerError

LN10 = math.log(10.0)

# kenlm's score() splits its argument with bytes.split(): ASCII whitespace other than the
# space and tab that separate phrase-table tokens would split a token Moses keeps whole.
_SPLIT_BY_KENLM = ("\n", "\r", "\x0b", "\x0c")


@dataclass(frozen=True, slots=True)
class PhraseLMScore:
    """The two parts Moses keeps for a target phrase scored in isolation (natural log)."""

    ngram_logp: float  # words with a complete (order-1)-word history inside the phrase
    estimate_logp: float  # the first order-1 words, from lower-order n-grams

    @property
    def total_logp(self) -> float:
        """What Moses adds to the future score (before the LM weight)."""
        return self.ngram_logp + self.estimate_logp


class KenLM:
    """A KenLM model (ARPA or binary) scoring phrases as Moses does, in natural log."""

    def __init__(self, path: str) -> None:
        import kenlm  # deferred: only commands that use an LM pay for it

        self.path = path
        try:
            self._model: Any = kenlm.Model(path)
        except (OSError, RuntimeError, ValueError) as exc:
            raise RescorerError(f"{path}: cannot load KenLM model: {exc}") from exc
        self._state_cls = kenlm.State
        self.order: int = self._model.order

    def phrase_estimate(self, tokens: list[str]) -> float:
        """ln P of a target phrase on its own: Moses' n-gram score plus its estimate."""
        if not tokens:
            return 0.0
        text = " ".join(tokens)
        if any(ch in text for ch in _SPLIT_BY_KENLM):
            return self.phrase_score(tokens).total_logp
        return float(self._model.score(text, bos=False, eos=False)) * LN10

    def phrase_score(self, tokens: list[str]) -> PhraseLMScore:
        """The phrase's score split as Moses splits it (moses/LM/Ken.cpp ``CalcScore``)."""
        model = self._model
        state, out = self._state_cls(), self._state_cls()
        model.NullContextWrite(state)
        estimate_log10 = ngram_log10 = 0.0
        for position, word in enumerate(tokens):
            log10p = model.BaseScore(state, word, out)
            if position < self.order - 1:
                estimate_log10 += log10p
            else:
                ngram_log10 += log10p
            state, out = out, state
        return PhraseLMScore(ngram_log10 * LN10, estimate_log10 * LN10)
