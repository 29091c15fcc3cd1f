"""Power of a Table-1 comparison: how wide the 95% interval of the mean gain is for a test size
and a number of tuning runs K, and how often a true gain would be found (interval above 0).

The mean gain over K tuning runs of each system, on a test set of W source words, has

    Var(gain) = v_s * W_ref / W + (sd_a^2 + sd_b^2) / K

- v_s: the sampling variance of the gain over test sentences, measured on a test set of
  W_ref source words; a sum over sentences, so it shrinks as 1/W when the new test set has the
  same per-word variance (a stated assumption: checked against what the new system gets);
- sd_a, sd_b: the spread of test BLEU between tuning runs of the baseline and of the system.

With the interval mean +- 1.96 SE, a true gain g is found (interval above 0) with probability
Phi(g / SE - 1.96) (normal approximation; Koehn 2004, Clark et al. 2011 for the two parts).

:func:`components` takes v_s and the sd's out of a Table-1 ``results.json``: the bootstrap
interval there resamples sentences and each system's K replicas (with replacement), so its
SE^2 = v_s + (K-1)/K (sd_a^2 + sd_b^2)/K. The factor (K-1)/K is the bootstrap's: the mean of K
replicas drawn from K values varies by their population variance, (K-1)/K of the sample
variance sd^2, over K. Left out (before 2026-11-26), it took too much from SE^2 and
underestimated v_s, most at small K (at K = 3, by 2/9 of sd^2 per system).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

Z95 = 1.959963984540054


def phi(x: float) -> float:
    """The standard normal distribution function."""
    return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))


@dataclass(frozen=True)
class Components:
    """One system's measured variance parts (BLEU^2) and the test size they were measured on."""

    system: str
    runs: int
    sd_system: float  # sd of test BLEU between the system's tuning runs
    sd_baseline: float  # the baseline's
    sampling_var: float  # v_s: the gain's variance over test sentences
    ref_words: int  # W_ref: source words of that test set


def components(results: dict[str, Any], ref_words: int) -> list[Components]:
    """The variance parts of every system compared with a baseline in a ``results.json``."""
    by_name = {s["system"]: s for s in results["systems"]}
    found = []
    for s in results["systems"]:
        versus = s.get("test_vs_baseline")
        if not versus:
            continue
        base = by_name[s["baseline"]]
        k = int(versus["pairs"])
        lo, hi = versus["interval"]
        se = (hi - lo) / 2 / Z95
        runs_var = replica_variance(s["test_sd"], base["test_sd"], k)
        found.append(
            Components(
                system=s["system"],
                runs=k,
                sd_system=s["test_sd"],
                sd_baseline=base["test_sd"],
                sampling_var=max(se**2 - runs_var, 0.0),
                ref_words=ref_words,
            )
        )
    return found


def replica_variance(sd_a: float, sd_b: float, runs: int) -> float:
    """The part of the bootstrap interval's SE^2 that drawing each system's ``runs``
    replicas with replacement adds: (K-1)/K of (sd_a^2 + sd_b^2)/K."""
    return (runs - 1) / runs * (sd_a**2 + sd_b**2) / runs


def standard_error(
    sampling_var: float, ref_words: int, words: int, sd_a: float, sd_b: float, runs: int
) -> float:
    """SE of the mean gain on a test set of ``words`` source words with ``runs`` runs each."""
    return math.sqrt(sampling_var * ref_words / words + (sd_a**2 + sd_b**2) / runs)


def power(gain: float, se: float) -> float:
    """How often the 95% interval of a true ``gain`` lies above 0."""
    return phi(gain / se - Z95)


def runs_needed(
    gain: float,
    target: float,
    sampling_var: float,
    ref_words: int,
    words: int,
    sd_a: float,
    sd_b: float,
    *,
    most: int = 100,
) -> int | None:
    """The smallest K with power >= target, or None if even ``most`` runs fall short."""
    for k in range(1, most + 1):
        se = standard_error(sampling_var, ref_words, words, sd_a, sd_b, k)
        if power(gain, se) >= target:
            return k
    return None
