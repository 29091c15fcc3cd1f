"""BLEU statistics against sacreBLEU."""

from __future__ import annotations

import random

import pytest
from conftest import DATA_DIR

from rescorer.experiments.bleu import (
    bleu_from_totals,
    corpus_stats,
    sacrebleu_score,
    sentence_stats,
)

# Moses' real 1-best for dev sentences 0-9 and their references
HYPS = (DATA_DIR / "en-fr.dev13.hyp.fr").read_text(encoding="utf-8").splitlines()[:10]
REFS = (DATA_DIR / "tiny-system" / "dev.fr").read_text(encoding="utf-8").splitlines()


def test_sentence_stats_by_hand() -> None:
    # hyp "a b a c" vs ref "a b c": unigrams a,b,a,c -> a clipped to 1: 3 matches of 4
    assert sentence_stats("a b a c", "a b c") == [4, 3, 3, 1, 0, 0, 4, 3, 2, 1]


def test_corpus_bleu_equals_sacrebleu_on_real_output() -> None:
    ours = float(bleu_from_totals(corpus_stats(HYPS, REFS).sum(axis=0)))
    theirs, signature = sacrebleu_score(HYPS, REFS)
    assert "tok:none" in signature
    assert ours == pytest.approx(theirs, abs=1e-9)
    assert 30 < ours < 100


@pytest.mark.parametrize("seed", range(20))
def test_corpus_bleu_equals_sacrebleu_on_damaged_subsets(seed: int) -> None:
    """Short, empty and shuffled hypotheses: brevity penalty, exp smoothing, zero orders."""
    rng = random.Random(seed)
    pick = rng.sample(range(len(HYPS)), rng.randint(1, 4))
    hyps = []
    for i in pick:
        words = HYPS[i].split()
        rng.shuffle(words)
        hyps.append(" ".join(words[: rng.randint(0, len(words))]))
    refs = [REFS[i] for i in pick]
    ours = float(bleu_from_totals(corpus_stats(hyps, refs).sum(axis=0)))
    assert ours == pytest.approx(sacrebleu_score(hyps, refs)[0], abs=1e-9)


@pytest.mark.parametrize(
    ("hyps", "refs"),
    [
        (["x y z w", "v u"], ["a b c d", "e f"]),  # no n-gram matches at any order
        (["x"], ["a b c"]),  # one word, no match, short: brevity penalty too
        (["a b c d"], ["a b c d"]),  # a perfect match
        (["a x b y"], ["a b c d"]),  # unigram matches only
    ],
)
def test_corpus_bleu_equals_sacrebleu_on_edge_cases(hyps: list[str], refs: list[str]) -> None:
    ours = float(bleu_from_totals(corpus_stats(hyps, refs).sum(axis=0)))
    assert ours == pytest.approx(sacrebleu_score(hyps, refs)[0], abs=1e-9)
