"""The significance tests over tuning replicas: exact where they can be enumerated, calibrated on
simulated null pairs, and able to find a planted difference.

The simulated systems translate with Moses' real 100-best lists of 10 dev sentences: a system's
output for a sentence is a candidate drawn from that sentence's list (a null pair draws both
systems from the same lists; a planted difference draws one of them from the 10 best).
"""

from __future__ import annotations

import gzip
import itertools
import math

import numpy as np
import pytest
from conftest import DEV13_NBEST, TINY_SYSTEM
from scipy import stats

from rescorer.experiments import significance
from rescorer.experiments.bleu import bleu_from_totals, corpus_stats, sentence_stats
from rescorer.experiments.power import t_quantile
from rescorer.experiments.significance import (
    format_p,
    gain_interval,
    mean_gain,
    pooled_randomization,
    shared_coin_randomization,
)

REFS = (TINY_SYSTEM / "dev.fr").read_text(encoding="utf-8").splitlines()  # dev sentences 0-9


def _candidates() -> list[np.ndarray]:
    """[N_i, STATS_WIDTH] statistics of each 100-best candidate of dev sentences 0-8 (9 has 1)."""
    lists: dict[int, list[str]] = {}
    with gzip.open(DEV13_NBEST, "rt", encoding="utf-8") as f:
        for line in f:
            sentence, hyp = line.split(" ||| ")[:2]
            lists.setdefault(int(sentence), []).append(hyp.strip())
    return [np.array([sentence_stats(h, REFS[i]) for h in lists[i]]) for i in range(9)]


CANDIDATES = _candidates()


def draw(rng: np.random.Generator, k: int, s: int, best: int | None = None) -> np.ndarray:
    """[K, S, W]: K replicas of S sentences (dev 0-8 over and over), each output drawn from its
    sentence's n-best list (from its ``best`` first candidates when given)."""
    out = np.empty((k, s, CANDIDATES[0].shape[1]), dtype=np.int64)
    for j in range(s):
        pool = CANDIDATES[j % len(CANDIDATES)]
        out[:, j] = pool[rng.integers(0, best or len(pool), size=k)]
    return out


def exact_p(baseline: np.ndarray, system: np.ndarray, *, per_row: bool) -> float:
    """The permutation p over every swap pattern: one swap per (sentence, replica) row and the
    pooled BLEU, or one per sentence for every replica pair and the mean BLEU."""
    k, s, _ = baseline.shape
    n = k * s if per_row else s
    patterns = np.array(list(itertools.product((0, 1), repeat=n)))  # [P, n]
    swap = patterns.reshape(-1, k, s, 1) if per_row else patterns.reshape(-1, 1, s, 1)
    ours = np.where(swap, baseline, system)  # [P, K, S, W]; pattern 0 swaps nothing
    base = np.where(swap, system, baseline)
    if per_row:
        delta = bleu_from_totals(ours.sum((1, 2))) - bleu_from_totals(base.sum((1, 2)))
    else:
        delta = bleu_from_totals(ours.sum(2)).mean(1) - bleu_from_totals(base.sum(2)).mean(1)
    return float(np.mean(np.abs(delta) >= abs(delta[0]) - 1e-9))


@pytest.mark.parametrize(
    ("test", "per_row", "k", "s"),
    [(pooled_randomization, True, 2, 6), (shared_coin_randomization, False, 2, 6)],
)
def test_each_test_estimates_its_exact_permutation_p(
    test: object, per_row: bool, k: int, s: int
) -> None:
    rng = np.random.default_rng(0)
    base, ours = draw(rng, k, s), draw(rng, k, s)  # exact p: 0.555 per row, 0.750 per sentence
    exact = exact_p(base, ours, per_row=per_row)
    other = exact_p(base, ours, per_row=not per_row)
    sig = test(base, ours, trials=20000, seed=2)  # type: ignore[operator]
    assert sig.p_value == pytest.approx(exact, abs=0.015)
    assert abs(other - exact) > 0.1  # the two tests shuffle differently: the check can tell


def test_on_null_pairs_about_one_in_twenty_is_significant() -> None:
    """Both systems drawn from the same lists: p < 0.05 for 2-9% of 400 pairs, for both tests;
    the 95% interval of the gain holds 0 for most of them."""
    rng = np.random.default_rng(0)
    n = 400
    pooled = shared = covered = 0
    for i in range(n):
        base, ours = draw(rng, 3, 40), draw(rng, 3, 40)
        pooled += pooled_randomization(base, ours, trials=199, seed=i).p_value < 0.05
        shared += shared_coin_randomization(base, ours, trials=199, seed=i).p_value < 0.05
        interval = gain_interval(base, ours, trials=200, seed=i)
        covered += interval.low <= 0 <= interval.high
    assert 0.02 <= pooled / n <= 0.09
    assert 0.02 <= shared / n <= 0.09
    assert covered / n >= 0.9


def correlated(rng: np.random.Generator, k: int, s: int, agree: float) -> np.ndarray:
    """[K, S, W] like :func:`draw`, but each replica keeps one shared output per sentence with
    probability ``agree`` (replicas of one tuned system translate most sentences alike)."""
    shared, own = draw(rng, 1, s), draw(rng, k, s)
    keep = rng.random((k, s)) < agree
    return np.where(keep[..., None], shared, own)


def test_correlated_replicas_make_the_pooled_test_liberal() -> None:
    """Null pairs whose 6 replicas agree on about 75% of sentences (table1's (b) replicas agree
    on 72%): the pooled test, which swaps each (sentence, replica) row on its own, finds a
    difference in far more than 5% of them; the shared coin and the interval stay calibrated
    (the replicas here differ sentence by sentence only, not as a whole: the next test)."""
    rng = np.random.default_rng(0)
    n = 200
    pooled = shared = covered = 0
    for i in range(n):
        base, ours = correlated(rng, 6, 40, 0.8), correlated(rng, 6, 40, 0.8)
        pooled += pooled_randomization(base, ours, trials=199, seed=i).p_value < 0.05
        shared += shared_coin_randomization(base, ours, trials=199, seed=i).p_value < 0.05
        interval = gain_interval(base, ours, trials=200, seed=i)
        covered += interval.low <= 0 <= interval.high
    assert pooled / n > 0.2
    assert 0.02 <= shared / n <= 0.09
    assert covered / n >= 0.9


def shifted(rng: np.random.Generator, k: int, s: int) -> np.ndarray:
    """[K, S, W] like :func:`draw`, but each replica as a whole better or worse: it draws from
    its sentences' 3, 10 or 100 best (one choice per replica), as a tuning run that lands on
    other weights shifts many sentences the same way."""
    picks = rng.choice([3, 10, 100], size=k)
    return np.concatenate([draw(rng, 1, s, best=int(b)) for b in picks])


def test_the_randomisation_tests_do_not_take_the_tuners_spread_the_interval_does() -> None:
    """Null pairs (both systems' runs drawn alike) whose runs differ as a whole: both p's hold
    the runs fixed and find a difference in far more than 5% of pairs; the interval, which
    takes the runs' spread in (t over sd^2/K), holds 0 for about 95% of them. (Measured: 61%
    and 62% of p's below 0.05, 97% covered; the percentile bootstrap used before 2026-11-27
    covered 88%.)"""
    rng = np.random.default_rng(0)
    n = 200
    pooled = shared = covered = 0
    for i in range(n):
        base, ours = shifted(rng, 4, 120), shifted(rng, 4, 120)
        pooled += pooled_randomization(base, ours, trials=199, seed=i).p_value < 0.05
        shared += shared_coin_randomization(base, ours, trials=199, seed=i).p_value < 0.05
        interval = gain_interval(base, ours, trials=200, seed=i)
        covered += interval.low <= 0 <= interval.high
    assert pooled / n > 0.3 and shared / n > 0.3
    assert covered / n >= 0.93


def test_the_interval_is_t_times_the_sentences_and_the_runs_parts() -> None:
    """Pinned by hand. Runs whose every sentence is the same: drawing sentences changes nothing
    (v_s = 0), so the interval is mean +- t(df) sqrt(sd_a^2/K_a + sd_b^2/K_b), df
    Welch-Satterthwaite's; one run each: the sentences' part alone, with the normal's 1.96."""
    rng = np.random.default_rng(2)
    one = [draw(rng, 6, 1), draw(rng, 3, 1)]  # [K, 1, W] each: one sentence per run
    base, ours = (np.repeat(r, 40, axis=1) for r in one)  # [K, 40, W]
    bleus = [bleu_from_totals(r.sum(axis=1)) for r in (base, ours)]  # [K] each
    parts = [float(np.var(b, ddof=1)) / len(b) for b in bleus]  # sd^2 / K
    df = sum(parts) ** 2 / (parts[0] ** 2 / 5 + parts[1] ** 2 / 2)
    interval = gain_interval(base, ours, trials=500, seed=1)
    assert interval.sampling_var == 0.0
    assert interval.runs_var == pytest.approx(sum(parts))
    assert interval.df == pytest.approx(df)
    half = stats.t.ppf(0.975, df) * math.sqrt(sum(parts))
    assert interval.delta == pytest.approx(float(bleus[1].mean() - bleus[0].mean()))
    assert (interval.low, interval.high) == pytest.approx(
        (interval.delta - half, interval.delta + half)
    )
    # t's quantiles against the printed table (3 and 10 degrees of freedom, and none)
    assert t_quantile(0.975, 3) == pytest.approx(3.182446, abs=1e-6)
    assert t_quantile(0.975, 10) == pytest.approx(2.228139, abs=1e-6)
    assert t_quantile(0.975, math.inf) == pytest.approx(1.959964, abs=1e-6)
    # one run each: no spread; the same sentences drawn for both systems (a system against
    # itself: exactly 0), the normal's 1.96 over the bootstrap's sd (a 90% level: 1.64)
    base, ours = draw(rng, 1, 40), draw(rng, 1, 40, best=10)
    same = gain_interval(base, base, trials=500, seed=1)
    assert (same.low, same.high, same.df) == (0.0, 0.0, math.inf)
    interval = gain_interval(base, ours, trials=500, seed=1)
    sd = float(np.std(significance.bootstrap_gains(base, ours, trials=500, seed=1)))
    assert interval.sampling_var == pytest.approx(sd**2)
    assert interval.high - interval.low == pytest.approx(2 * 1.959964 * sd, rel=1e-6)


def test_a_planted_difference_is_found() -> None:
    """One system draws from each list's 10 best: found (p < 0.05, interval above 0) in at
    least 45 of 50 pairs."""
    rng = np.random.default_rng(1)
    pooled = shared = above = 0
    for i in range(50):
        base, ours = draw(rng, 3, 40), draw(rng, 3, 40, best=10)
        sig = pooled_randomization(base, ours, trials=199, seed=i)
        assert sig.delta > 0
        pooled += sig.p_value < 0.05
        shared += shared_coin_randomization(base, ours, trials=199, seed=i).p_value < 0.05
        above += gain_interval(base, ours, trials=200, seed=i).low > 0
    assert pooled >= 45 and shared >= 45 and above >= 45
    # the direction of the test does not matter for p
    forward = pooled_randomization(base, ours, trials=500, seed=3)
    backward = pooled_randomization(ours, base, trials=500, seed=3)
    assert backward.p_value == forward.p_value
    assert backward.delta == pytest.approx(-forward.delta)


def test_the_statistics_and_the_replicas_compared() -> None:
    rng = np.random.default_rng(4)
    base, ours = draw(rng, 4, 30), draw(rng, 2, 30, best=5)
    pooled = pooled_randomization(base, ours, trials=300)
    assert pooled.replicas == 2  # the first min(K) replicas of each
    assert pooled.delta == pytest.approx(
        float(bleu_from_totals(ours.sum((0, 1))) - bleu_from_totals(base[:2].sum((0, 1))))
    )
    shared = shared_coin_randomization(base, ours, trials=300)
    assert shared.delta == pytest.approx(
        float(bleu_from_totals(ours.sum(1)).mean() - bleu_from_totals(base[:2].sum(1)).mean())
    )
    # the gain and its interval use every replica of each system
    gain = mean_gain(base, ours)
    assert gain == pytest.approx(
        float(bleu_from_totals(ours.sum(1)).mean() - bleu_from_totals(base.sum(1)).mean())
    )
    interval = gain_interval(base, ours, trials=2000, seed=5)
    assert interval.delta == gain
    assert interval.low < gain < interval.high
    assert gain_interval(base, ours, trials=2000, seed=5) == interval  # seeded


def test_a_difference_no_trial_reaches_is_printed_as_below_one_over_r_plus_one() -> None:
    refs = REFS * 4
    worse = [" ".join(r.split()[: max(1, len(r.split()) // 2)]) for r in refs]
    base = np.stack([corpus_stats(worse, refs)] * 3)
    better = np.stack([corpus_stats(refs, refs)] * 3)
    sig = pooled_randomization(base, better, trials=999)
    assert sig.reached == 0
    assert sig.p_value == 1 / 1000
    assert format_p(sig.p_value, sig.trials, sig.reached) == "≤ 1/1000"
    assert format_p(0.25, 999, 249) == "0.250"
    assert format_p(3 / 10001, 10000, 2) == "0.0003"  # not 0.000


def test_float32_sums_give_the_float64_results(monkeypatch: pytest.MonkeyPatch) -> None:
    """The trials' sums are integers: float32 (used while every sum is exact) changes nothing."""
    rng = np.random.default_rng(6)
    base, ours = draw(rng, 3, 40), draw(rng, 2, 40, best=20)
    fast = [
        pooled_randomization(base, ours, trials=700, seed=4),
        shared_coin_randomization(base, ours, trials=700, seed=4),
        gain_interval(base, ours, trials=700, seed=4),
    ]
    monkeypatch.setattr(significance, "EXACT_FLOAT32", 0)  # every sum in float64
    assert fast == [
        pooled_randomization(base, ours, trials=700, seed=4),
        shared_coin_randomization(base, ours, trials=700, seed=4),
        gain_interval(base, ours, trials=700, seed=4),
    ]
