"""Corpus BLEU from per-sentence statistics.

BLEU here is sacreBLEU's with ``--tokenize none`` (the files are already tokenised by Moses'
tokenizer): whitespace tokens, n-grams up to 4, clipped matches against one reference, the
brevity penalty from the corpus lengths and sacreBLEU's default ``exp`` smoothing for an order
with no match, and 0 for a corpus with no match at any order. Keeping the sufficient statistics
per sentence makes the significance tests cheap (:mod:`rescorer.experiments.significance`): a
resampled corpus is a sum of rows.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np

from rescorer.errors import RescorerError

ORDER = 4
# Per-sentence statistics, one row of STATS_WIDTH integers:
# [hyp_len, ref_len, matches_1..matches_4, totals_1..totals_4]
STATS_WIDTH = 2 + 2 * ORDER


def _ngrams(tokens: Sequence[str], n: int) -> Counter[tuple[str, ...]]:
    return Counter(tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1))


def sentence_stats(hyp: str, ref: str) -> list[int]:
    """The BLEU sufficient statistics of one hypothesis against one reference."""
    h, r = hyp.split(), ref.split()
    matches, totals = [], []
    for n in range(1, ORDER + 1):
        hyp_counts, ref_counts = _ngrams(h, n), _ngrams(r, n)
        matches.append(sum(min(c, ref_counts[g]) for g, c in hyp_counts.items()))
        totals.append(max(len(h) - n + 1, 0))
    return [len(h), len(r), *matches, *totals]


def corpus_stats(hyps: Sequence[str], refs: Sequence[str]) -> np.ndarray:
    """[S, STATS_WIDTH] statistics of S hypothesis/reference pairs (same count required)."""
    if len(hyps) != len(refs):
        raise ValueError(f"{len(hyps)} hypotheses for {len(refs)} references")
    rows = [sentence_stats(h, r) for h, r in zip(hyps, refs, strict=True)]
    return np.array(rows, dtype=np.int64).reshape(len(rows), STATS_WIDTH)


def bleu_from_totals(totals: np.ndarray) -> np.ndarray:
    """BLEU (0-100) of corpus totals [..., STATS_WIDTH] -> [...], as sacreBLEU computes it."""
    t = totals.astype(np.float64)
    hyp_len, ref_len = t[..., 0], t[..., 1]
    matches, counts = t[..., 2 : 2 + ORDER], t[..., 2 + ORDER :]
    log_sum = np.zeros(t.shape[:-1])
    smooth = np.ones(t.shape[:-1])
    valid = np.ones(t.shape[:-1], dtype=bool)
    with np.errstate(divide="ignore", invalid="ignore"):
        for n in range(ORDER):
            valid &= counts[..., n] > 0  # sacreBLEU stops at an order with no n-grams: score 0
            smooth = np.where(matches[..., n] == 0, smooth * 2, smooth)
            precision = np.where(
                matches[..., n] > 0,
                matches[..., n] / counts[..., n],
                1.0 / (smooth * counts[..., n]),
            )
            log_sum += np.log(np.where(valid, precision, 1.0))
        bp = np.where(hyp_len < ref_len, np.exp(1.0 - ref_len / np.maximum(hyp_len, 1.0)), 1.0)
    # sacreBLEU stops early when no n-gram of any order matches (its issue #141): score 0, where
    # exp smoothing would give every order a made-up precision
    valid &= matches.sum(axis=-1) > 0
    return np.where(valid & (hyp_len > 0), 100.0 * bp * np.exp(log_sum / ORDER), 0.0)


def require_sacrebleu() -> None:
    """A RescorerError saying how to install sacreBLEU when it cannot be imported."""
    try:
        import sacrebleu.metrics  # noqa: F401
    except ImportError as exc:
        raise RescorerError(
            f"sacreBLEU cannot be imported ({exc}), and the evaluation needs it: install it "
            "with pip install 'rescorer[experiments]' (or pip install sacrebleu)"
        ) from None


def sacrebleu_score(hyps: Sequence[str], refs: Sequence[str]) -> tuple[float, str]:
    """sacreBLEU's corpus BLEU with --tokenize none, and its signature."""
    from sacrebleu.metrics import BLEU

    metric = BLEU(tokenize="none")
    score = metric.corpus_score(list(hyps), [list(refs)])
    return float(score.score), str(metric.get_signature())
