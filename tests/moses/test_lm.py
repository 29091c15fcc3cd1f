"""The KenLM adapter: what Moses adds to a target phrase's future score, in natural log."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from conftest import DATA_DIR, REAL_LM, TINY_ARPA

from rescorer.errors import RescorerError
from rescorer.io.table import read_table
from rescorer.moses.lm import LN10, KenLM

# A dependency of rescorer's, but absent where the suite runs on a borrowed GPU machine.
kenlm = pytest.importorskip("kenlm", reason="the kenlm module is not installed")

# (phrase, log10 of the first order-1 = 2 words, log10 of the rest), worked out by hand from
# tiny.arpa: p(w) for the first word (no <s>), backing off where an n-gram is missing.
TINY_CASES = [
    ("a b c a", -0.6 + -0.2, -0.05 + -0.15),  # unigram, bigram, two trigrams
    ("c b", -0.9 + (-0.1 + -0.8), 0.0),  # "c b" missing: backoff(c) + p(b)
    ("a b a", -0.6 + -0.2, -0.4 + (-0.2 + -0.6)),  # backoff(a b) + backoff(b) + p(a)
    ("c a b", -0.9 + -0.5, 0.0 + -0.2),  # "c a b" missing: backoff(c a) = 0, p(b|a)
    ("x", -1.0, 0.0),  # unknown word: p(<unk>)
    ("a x", -0.6 + (-0.3 + -1.0), 0.0),  # backoff(a) + p(<unk>)
]


@pytest.fixture(scope="module")
def tiny_lm() -> KenLM:
    return KenLM(str(TINY_ARPA))


@pytest.mark.parametrize(("phrase", "estimate10", "ngram10"), TINY_CASES)
def test_hand_computed_estimates(
    tiny_lm: KenLM, phrase: str, estimate10: float, ngram10: float
) -> None:
    tokens = phrase.split()
    parts = tiny_lm.phrase_score(tokens)
    assert parts.estimate_logp == pytest.approx(estimate10 * math.log(10), abs=1e-6)
    assert parts.ngram_logp == pytest.approx(ngram10 * math.log(10), abs=1e-6)
    expected = (estimate10 + ngram10) * math.log(10)
    assert tiny_lm.phrase_estimate(tokens) == pytest.approx(expected, abs=1e-6)


def test_empty_phrase_and_odd_whitespace(tiny_lm: KenLM) -> None:
    assert tiny_lm.phrase_estimate([]) == 0.0
    # a token holding a form feed stays one (unknown) word, as in Moses
    assert tiny_lm.phrase_estimate(["a\x0cb"]) == pytest.approx(-1.0 * LN10, abs=1e-6)


def test_unloadable_model(tmp_path: Path) -> None:
    bad = tmp_path / "bad.arpa"
    bad.write_text("not an ARPA file\n")
    with pytest.raises(RescorerError, match="cannot load KenLM model"):
        KenLM(str(bad))


@pytest.mark.skipif(not REAL_LM.exists(), reason="needs ../shared/data/en-fr/lm.fr.binary")
def test_real_lm_matches_full_scores() -> None:
    lm = KenLM(str(REAL_LM))
    model = kenlm.Model(str(REAL_LM))
    assert lm.order == 5
    phrases = [e.tgt_tokens for e in read_table(str(DATA_DIR / "en-fr.sample.phrase-table"))]
    long_ones = [p for p in phrases if len(p) >= 6][:5]
    assert len(long_ones) == 5
    for tokens in [*phrases[:20], *long_ones]:
        scores = [s for s, _, _ in model.full_scores(" ".join(tokens), bos=False, eos=False)]
        assert lm.phrase_estimate(tokens) == pytest.approx(sum(scores) * LN10, rel=1e-6)
        parts = lm.phrase_score(tokens)
        assert parts.estimate_logp == pytest.approx(sum(scores[:4]) * LN10, rel=1e-6, abs=1e-9)
        assert parts.ngram_logp == pytest.approx(sum(scores[4:]) * LN10, rel=1e-6, abs=1e-9)
