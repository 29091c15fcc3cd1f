"""Is a system better than the baseline? Tests over tuning replicas, from BLEU statistics.

Each system was tuned K times; ``baseline`` and ``system`` below are the per-sentence BLEU
statistics of its replicas, ``[K, S, STATS_WIDTH]`` (:func:`rescorer.experiments.bleu.corpus_stats`
of each replica's output on the same S sentences). A resampled corpus is a sum of rows, so every
trial costs one matrix product.

- :func:`pooled_randomization`, the main p: MultEval's stratified approximate randomisation
  (Clark et al. 2011, "Better hypothesis testing for statistical machine translation: controlling
  for optimizer instability", ACL; ``StratifiedApproximateRandomizationTest`` and its
  ``Shuffling`` in github.com/jhclark/multeval, ``src/multeval/significance/``, read at
  commit ``bd93ed1``). Each system's replicas are pooled into one corpus of K x S hypotheses; the
  statistic is the BLEU of the system's pooled statistics minus the baseline's; a trial flips an
  independent coin for every (sentence, replica) row, swapping the two systems' hypotheses of that
  row. MultEval's ``Shuffling`` also permutes a sentence's rows between replicas before reading
  them, which leaves a pooled sum unchanged, and it reads the baseline's side through the inverse
  permutation, so with K > 1 its two shuffled corpora need not split each row between them; here
  each row goes to exactly one side (the exchange the permutation argument needs). p counts the
  trials whose |difference| reaches the observed one (MultEval counts those that exceed it).
- :func:`shared_coin_randomization`, kept as a second column and named as our own: the statistic
  is the difference of the mean BLEU over replicas; replica k of the system is paired with
  replica k of the baseline; one coin per sentence swaps that sentence in every pair at once.
  This was the first edition's only test.
- :func:`gain_interval`: a 95% interval of the mean gain (mean BLEU over the system's
  replicas minus the baseline's), mean +- t(df) * sqrt(v_s + sd_a^2/K_a + sd_b^2/K_b). v_s, the
  test sentences' part, is the variance of the gain over bootstrap draws of the sentences
  (one draw for every replica of both systems, so the pairing is kept); sd_a^2/K_a and
  sd_b^2/K_b, the tuner's part, are the variances of a mean of K tuning runs from each
  system's sample sd over its runs; df is Welch-Satterthwaite's for that sum (the sentences'
  part counted as known), so that a spread measured on 3 or 4 runs widens the interval as a
  t-interval does. It is the only output of the three that takes the tuner's spread in.

The two randomisation tests hold the tuned replicas fixed and ask whether the sentences'
outputs could be exchanged: they cover the test set's sampling, not the tuner's spread. A
system whose runs differ from the baseline's by what another tuning would have changed (a
length ratio, hence the brevity penalty, across many sentences) gets a small p from both, with
no difference in method: on simulated null pairs whose replicas each carry their own shift
(K = 4, 120 sentences), both p's were below 0.05 for 6 pairs in 10 while the interval held 0
for 97% of them (``tests/experiments/test_significance.py``). Clark et al. (2011) make the
same point: the p's are read with the runs' sd, here with the interval.

The pooled test also assumes a sentence's K rows are independent. Replicas of one tuned system
are not: they translate most sentences alike (in the second edition of Table 1, two (b)
replicas gave the same test output for 72% of the sentences, and the baseline's six for all of
them). Swapping rows one by one then varies the statistic less than the null does, so the pooled
p is too small: on simulated null pairs with replicas that agree on 75% of sentences, K = 6, it
is below 0.05 for about 4 in 10 pairs, while the shared coin, which swaps a sentence's replicas
together, stays calibrated. Read the pooled p beside the other two.

Until 2026-11-27 the interval was a percentile bootstrap that also drew each system's runs
with replacement. With K of 3 to 6 runs that is too narrow: the mean of K runs drawn from K
values varies by (K-1)/K of sd^2/K, and a percentile interval of so few values is a z-interval
where a t-interval is due (one system's 3 runs alone: it held the true mean 67% of the time).
Results files written before then say nothing of ``sampling_var``; rescorer/experiments/power.py
re-derives their t-interval from what they hold.

Both tests pair the first min(K_baseline, K_system) replicas; p = (c + 1) / (R + 1) for c of R
trials reaching the observed difference, so the smallest p a run can give is 1 / (R + 1)
(:func:`format_p` prints it as ``≤ 1/(R+1)``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rescorer.experiments.bleu import bleu_from_totals

BLOCK = 500  # trials per matrix product
TIE = 1e-9  # a trial's |difference| within this of the observed one reaches it
EXACT_FLOAT32 = 1 << 24  # float32 adds integers exactly while every sum stays below this


def _float_for(rows: np.ndarray, weight: int) -> type[np.floating]:
    """float32 when every trial's sum (0..``weight`` times each row, summed) is exact in it,
    else float64: the sums are integers, and float32 products run twice as fast."""
    bound = weight * float(np.abs(rows).sum(axis=0).max(initial=0))
    return np.float32 if bound < EXACT_FLOAT32 else np.float64


@dataclass(frozen=True)
class Significance:
    """One randomisation test of a system against the baseline."""

    delta: float  # the observed statistic: the system's BLEU minus the baseline's
    p_value: float  # (reached + 1) / (trials + 1)
    trials: int
    reached: int  # trials whose |difference| reached |delta|
    replicas: int  # replica pairs compared


def _pairs(baseline: np.ndarray, system: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The first min(K_baseline, K_system) replicas of each, as int64 [K, S, W]."""
    k = min(len(baseline), len(system))
    if k == 0:
        raise ValueError("no replicas to compare")
    base, ours = baseline[:k].astype(np.int64), system[:k].astype(np.int64)
    if base.shape != ours.shape:
        raise ValueError(f"replica statistics differ in shape: {base.shape} vs {ours.shape}")
    return base, ours


def pooled_randomization(
    baseline: np.ndarray, system: np.ndarray, *, trials: int = 10000, seed: int = 1
) -> Significance:
    """MultEval's test: pooled replicas, an independent coin per (sentence, replica) row."""
    base, ours = _pairs(baseline, system)
    k, s, w = base.shape
    base_tot, ours_tot = base.sum(axis=(0, 1)), ours.sum(axis=(0, 1))  # [W]
    observed = float(bleu_from_totals(ours_tot) - bleu_from_totals(base_tot))
    moves = (base - ours).reshape(k * s, w)  # [K*S, W]: what a swap adds to the system
    dtype = _float_for(moves, 1)
    moves = moves.astype(dtype)
    rng = np.random.default_rng(seed)
    reached, done = 0, 0
    while done < trials:
        n = min(BLOCK, trials - done)
        coins = rng.integers(0, 2, size=(n, k * s), dtype=np.uint8).astype(dtype)  # [B, K*S]
        moved = (coins @ moves).astype(np.float64)  # [B, W]
        delta = bleu_from_totals(ours_tot + moved) - bleu_from_totals(base_tot - moved)  # [B]
        reached += int(np.count_nonzero(np.abs(delta) >= abs(observed) - TIE))
        done += n
    return Significance(observed, (reached + 1) / (trials + 1), trials, reached, k)


def shared_coin_randomization(
    baseline: np.ndarray, system: np.ndarray, *, trials: int = 10000, seed: int = 1
) -> Significance:
    """Our first edition's test: mean BLEU over replica pairs, one coin per sentence for all."""
    base, ours = _pairs(baseline, system)
    base_tot, ours_tot = base.sum(axis=1), ours.sum(axis=1)  # [K, W]
    observed = float(bleu_from_totals(ours_tot).mean() - bleu_from_totals(base_tot).mean())
    k, s, w = base.shape
    moves = (base - ours).transpose(1, 0, 2).reshape(s, k * w)  # [S, K*W]
    dtype = _float_for(moves, 1)
    moves = moves.astype(dtype)
    rng = np.random.default_rng(seed)
    reached, done = 0, 0
    while done < trials:
        n = min(BLOCK, trials - done)
        coins = rng.integers(0, 2, size=(n, s), dtype=np.uint8).astype(dtype)  # [B, S]
        moved = (coins @ moves).astype(np.float64).reshape(n, k, w)  # [B, K, W]
        delta = bleu_from_totals(ours_tot + moved).mean(axis=1) - bleu_from_totals(
            base_tot - moved
        ).mean(axis=1)  # [B]
        reached += int(np.count_nonzero(np.abs(delta) >= abs(observed) - TIE))
        done += n
    return Significance(observed, (reached + 1) / (trials + 1), trials, reached, len(base))


def mean_gain(baseline: np.ndarray, system: np.ndarray) -> float:
    """Mean BLEU over the system's replicas minus the baseline's (every replica of each)."""
    ours = bleu_from_totals(system.sum(axis=1)).mean()
    return float(ours - bleu_from_totals(baseline.sum(axis=1)).mean())


@dataclass(frozen=True)
class GainInterval:
    """:func:`gain_interval`'s interval of the mean gain and its parts (BLEU, BLEU^2)."""

    delta: float  # :func:`mean_gain`
    low: float
    high: float
    sampling_var: float  # v_s: the gain's variance over bootstrap draws of the test sentences
    runs_var: float  # sd_a^2/K_a + sd_b^2/K_b: a mean of K runs of each (0 for one run)
    df: float  # Welch-Satterthwaite's degrees of freedom (inf: no spread between runs)
    level: float


def gain_interval(
    baseline: np.ndarray,
    system: np.ndarray,
    *,
    trials: int = 10000,
    seed: int = 1,
    level: float = 0.95,
) -> GainInterval:
    """The interval of :func:`mean_gain`: mean +- t(df) * sqrt(v_s + sd_a^2/K_a + sd_b^2/K_b)
    (the module's docstring). A system of one run brings no spread (none can be measured)."""
    from rescorer.experiments.power import interval_df, t_quantile

    gains = bootstrap_gains(baseline, system, trials=trials, seed=seed)
    sampling_var = float(np.var(gains))
    sd_a, sd_b = run_sd(baseline), run_sd(system)
    k_a, k_b = len(baseline), len(system)
    runs_var = sd_a**2 / k_a + sd_b**2 / k_b
    df = interval_df(sampling_var, sd_a, k_a, sd_b, k_b)
    half = t_quantile(0.5 + level / 2, df) * float(np.sqrt(sampling_var + runs_var))
    delta = mean_gain(baseline, system)
    return GainInterval(delta, delta - half, delta + half, sampling_var, runs_var, df, level)


def run_sd(stats: np.ndarray) -> float:
    """The sample sd of corpus BLEU over the K replicas of ``stats`` [K, S, W] (0 for K = 1)."""
    bleus = bleu_from_totals(stats.sum(axis=1))  # [K]
    return float(np.std(bleus, ddof=1)) if len(bleus) > 1 else 0.0


def bootstrap_gains(
    baseline: np.ndarray, system: np.ndarray, *, trials: int = 10000, seed: int = 1
) -> np.ndarray:
    """[trials] :func:`mean_gain` on bootstrap samples of the test sentences: each trial draws
    the S sentences with replacement, one draw for every replica of both systems (K_base and
    K_ours may differ), and takes each system's mean BLEU over all its replicas."""
    k_base, s, w = baseline.shape
    k_ours = system.shape[0]
    if system.shape[1:] != (s, w) or not k_base or not k_ours:
        raise ValueError(f"replica statistics differ in shape: {baseline.shape} vs {system.shape}")
    # [S, K*W]: one matrix product per block sums every replica's resampled corpus
    base_rows = baseline.transpose(1, 0, 2).reshape(s, k_base * w)
    ours_rows = system.transpose(1, 0, 2).reshape(s, k_ours * w)
    dtype = max(_float_for(base_rows, s), _float_for(ours_rows, s), key=lambda d: d(0).itemsize)
    base_rows, ours_rows = base_rows.astype(dtype), ours_rows.astype(dtype)
    rng = np.random.default_rng(seed)
    gains = np.empty(trials)
    done = 0
    while done < trials:
        n = min(BLOCK, trials - done)
        # [B, S]: how often each sentence is drawn (S draws with replacement per trial)
        drawn = rng.integers(0, s, size=(n, s)) + s * np.arange(n)[:, None]
        counts = np.bincount(drawn.ravel(), minlength=n * s).reshape(n, s).astype(dtype)
        base_tot = (counts @ base_rows).astype(np.float64)  # [B, Kb*W]
        ours_tot = (counts @ ours_rows).astype(np.float64)  # [B, Ks*W]
        base_bleu = bleu_from_totals(base_tot.reshape(n, k_base, w))  # [B, Kb]
        ours_bleu = bleu_from_totals(ours_tot.reshape(n, k_ours, w))  # [B, Ks]
        gains[done : done + n] = ours_bleu.mean(axis=1) - base_bleu.mean(axis=1)
        done += n
    return gains


def format_p(p_value: float, trials: int, reached: int, digits: int = 3) -> str:
    """p for a table: ``≤ 1/(R+1)`` when none of the R trials reached the observed difference
    (p = 1/(R+1), the smallest R trials can give, says only that R were too few to see a
    smaller one)."""
    if reached == 0:
        return f"≤ 1/{trials + 1}"
    if p_value < 10**-digits:  # 0.0003, not 0.000: a p of 0 is never measured
        return f"{p_value:.1g}"
    return f"{p_value:.{digits}f}"
