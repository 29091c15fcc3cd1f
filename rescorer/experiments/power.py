"""Power of a Table-1 comparison: how wide the 95% interval of the mean gain is for a test size
and a number of tuning runs K, and how often a true gain would be found (interval above 0).

The mean gain over K tuning runs of each system, on a test set of W source words, has

    Var(gain) = v_s * W_ref / W + (sd_a^2 + sd_b^2) / K

(K runs of each system, as planned: :func:`standard_error`, :func:`runs_needed`)

- v_s: the sampling variance of the gain over test sentences, measured on a test set of
  W_ref source words; a sum over sentences, so it shrinks as 1/W when the new test set has the
  same per-word variance (a stated assumption: checked against what the new system gets);
- sd_a, sd_b: the spread of test BLEU between tuning runs of the baseline and of the system.

With the interval mean +- 1.96 SE, a true gain g is found (interval above 0) with probability
Phi(g / SE - 1.96) (normal approximation; Koehn 2004, Clark et al. 2011 for the two parts).

:func:`check` sets a finished experiment's own v_s, spreads and interval beside the prediction
(the 1/W assumption checked); :func:`detectable_gain` says what a finished comparison could
see (the gain found 80% of the time: results.md, side_by_side).

:func:`components` takes v_s and the sd's out of a Table-1 ``results.json``: the bootstrap
interval there resamples sentences and each system's own K_a or K_b replicas (with
replacement), so its SE^2 = v_s + (K_a-1)/K_a sd_a^2/K_a + (K_b-1)/K_b sd_b^2/K_b. The factor
(K-1)/K is the bootstrap's: the mean of K replicas drawn from K values varies by their
population variance, (K-1)/K of the sample variance sd^2, over K. Left out (before
2026-11-26), it took sd^2/K^2 too much from SE^2 per system and underestimated v_s, most at
small K (at K = 3, by 1/9 of sd^2 per system).
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
    runs: int  # the system's tuning runs
    runs_baseline: int  # the baseline's
    sd_system: float  # sd of test BLEU between the system's tuning runs
    sd_baseline: float  # the baseline's
    sampling_var: float  # v_s: the gain's variance over test sentences
    ref_words: int  # W_ref: source words of that test set
    # the baseline's or the system's runs (two or more) all reached one weight vector: its sd
    # of 0 says that MERT started from the same weights, not that the tuner does not vary
    collapsed: bool = False
    half_width: float = 0.0  # the 95% interval's, as results.json has it
    # the interval was narrower than the runs' part alone: v_s is clamped to 0
    clamped: bool = False
    single_run: bool = False  # one run of the baseline or the system: no spread measured (0)


def components(results: dict[str, Any], ref_words: int) -> list[Components]:
    """The variance parts of every system compared with a baseline in a ``results.json``."""
    by_name = {s["system"]: s for s in results["systems"]}
    return [
        component(s, by_name[s["baseline"]], ref_words)
        for s in results["systems"]
        if s.get("test_vs_baseline")
    ]


def component(s: dict[str, Any], base: dict[str, Any], ref_words: int) -> Components:
    """The variance parts of system ``s`` of a ``results.json`` against its baseline ``base``."""
    versus = s["test_vs_baseline"]
    lo, hi = versus["interval"]
    se = (hi - lo) / 2 / Z95
    k_a, k_b = int(base["runs"]), int(s["runs"])
    sd_a, sd_b = base["test_sd"] or 0.0, s["test_sd"] or 0.0  # None: one run
    runs_var = replica_variance(sd_a, k_a, sd_b, k_b)
    return Components(
        system=s["system"],
        runs=k_b,
        runs_baseline=k_a,
        sd_system=sd_b,
        sd_baseline=sd_a,
        sampling_var=max(se**2 - runs_var, 0.0),
        ref_words=ref_words,
        collapsed=_collapsed(base) or _collapsed(s),
        half_width=(hi - lo) / 2,
        clamped=se**2 < runs_var,
        single_run=min(k_a, k_b) < 2,
    )


def _collapsed(system: dict[str, Any]) -> bool:
    """Two or more runs, one weight vector (results.json files before 2026-11-26 do not say)."""
    return int(system["runs"]) > 1 and system.get("distinct_weights", 0) == 1


def replica_variance(sd_a: float, runs_a: int, sd_b: float, runs_b: int) -> float:
    """The part of the bootstrap interval's SE^2 that drawing each system's own replicas with
    replacement adds: (K-1)/K of sd^2/K for each, K its number of runs."""
    return sum((k - 1) / k * sd**2 / k for sd, k in ((sd_a, runs_a), (sd_b, runs_b)))


def standard_error(
    sampling_var: float, ref_words: int, words: int, sd_a: float, sd_b: float, runs: int
) -> float:
    """SE of the mean gain on a test set of ``words`` source words with ``runs`` runs each."""
    return math.sqrt(sampling_var * ref_words / words + (sd_a**2 + sd_b**2) / runs)


def power(gain: float, se: float) -> float:
    """How often the 95% interval of a true ``gain`` lies above 0 (``se`` 0: always for a
    gain above 0, never otherwise)."""
    if se <= 0.0:
        return 1.0 if gain > 0.0 else 0.0
    return phi(gain / se - Z95)


Z80 = 0.8416212335729143  # the standard normal's 80th percentile


def detectable_gain(c: Components) -> float:
    """The smallest true gain that the 95% interval finds above 0 in 80% of experiments like
    ``c``'s: its own v_s, spreads and K, the runs' part sd^2/K (the variance of a mean of K
    runs). A spread of 0 from runs that collapsed to one weight vector makes it too small; so
    does one run (no spread measured)."""
    var = c.sampling_var + c.sd_baseline**2 / c.runs_baseline + c.sd_system**2 / c.runs
    return (Z95 + Z80) * math.sqrt(var)


def detectable_gains(results: dict[str, Any]) -> dict[str, tuple[float, Components]]:
    """:func:`detectable_gain` of every system of a ``results.json`` compared with a baseline
    that is among its systems, by system name, with its variance parts."""
    by_name = {s["system"]: s for s in results["systems"]}
    found = {}
    for s in results["systems"]:
        base = by_name.get(s.get("baseline") or "")
        if s.get("test_vs_baseline") and base is not None:
            c = component(s, base, ref_words=0)  # this test set: no scaling
            found[s["system"]] = (detectable_gain(c), c)
    return found


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


@dataclass(frozen=True)
class Check:
    """A prediction set beside what an experiment got: one system of the outcome's results.json.

    ``predicted_sampling_var`` is the prediction's v_s moved to the outcome's test size (v_s *
    W_ref / W, the 1/W assumption). ``predicted_half_width`` is the half-width the outcome's
    bootstrap would have given with that v_s: its own spreads and K, in the bootstrap's
    replica part ((K-1)/K of sd^2/K, :func:`replica_variance`), so that it differs from the
    measured ``half_width`` by v_s alone. ``power``: how often a true ``gain`` would be found
    with the outcome's v_s, spreads and K, the runs' part sd^2/K (the variance of a mean of K
    runs, as in :func:`standard_error`; the bootstrap's (K-1)/K understates it)."""

    system: str
    runs: int
    runs_baseline: int
    sd_system: float
    sd_baseline: float
    sampling_var: float  # the outcome's v_s, at its own test size
    predicted_sampling_var: float
    half_width: float  # the outcome's 95% interval's, as its results.json has it
    predicted_half_width: float
    power: float
    collapsed: bool
    clamped: bool  # the interval was narrower than its runs' part: v_s is 0, a floor
    single_run: bool  # one run of either side: no spread measured


def check(
    outcome: list[Components], words: int, sampling_var: float, ref_words: int, gain: float = 0.5
) -> list[Check]:
    """Each system of ``outcome`` (measured on a test set of ``words`` source words) beside the
    prediction made from ``sampling_var`` measured at ``ref_words``."""
    rows = []
    for c in outcome:
        if c.ref_words != words:
            raise ValueError(f"{c.system}: measured at {c.ref_words} words, not {words}")
        predicted_vs = sampling_var * ref_words / words
        runs_var = replica_variance(c.sd_baseline, c.runs_baseline, c.sd_system, c.runs)
        mean_var = c.sd_baseline**2 / c.runs_baseline + c.sd_system**2 / c.runs
        rows.append(
            Check(
                system=c.system,
                runs=c.runs,
                runs_baseline=c.runs_baseline,
                sd_system=c.sd_system,
                sd_baseline=c.sd_baseline,
                sampling_var=c.sampling_var,
                predicted_sampling_var=predicted_vs,
                half_width=c.half_width,
                predicted_half_width=Z95 * math.sqrt(predicted_vs + runs_var),
                power=power(gain, math.sqrt(c.sampling_var + mean_var)),
                collapsed=c.collapsed,
                clamped=c.clamped,
                single_run=c.single_run,
            )
        )
    return rows
