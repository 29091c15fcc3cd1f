"""Power of a Table-1 comparison: how wide the 95% interval of the mean gain is for a test size
and a number of tuning runs K, and how often a true gain would be found (interval above 0).

The mean gain over K tuning runs of each system, on a test set of W source words, has

    Var(gain) = v_s * W_ref / W + (sd_a^2 + sd_b^2) / K

(K runs of each system, as planned: :func:`standard_error`, :func:`runs_needed`)

- v_s: the sampling variance of the gain over test sentences, measured on a test set of
  W_ref source words; a sum over sentences, so it shrinks as 1/W when the new test set has the
  same per-word variance (a stated assumption: checked against what the new system gets);
- sd_a, sd_b: the spread of test BLEU between tuning runs of the baseline and of the system.

With the interval mean +- t(df) SE (:mod:`rescorer.experiments.significance`; df is
Welch-Satterthwaite's, :func:`interval_df`, and t the normal's 1.96 where no spread between
runs is measured), a true gain g is found (interval above 0) with probability about
Phi(g / SE - t) (Koehn 2004, Clark et al. 2011 for the two parts). The approximation is
slightly optimistic at few degrees of freedom: the exact noncentral t gives 0.77 where it
says 0.80 at df 4, 0.79 at df 9.5.

:func:`check` sets a finished experiment's own v_s, spreads and interval beside the prediction
(the 1/W assumption checked); :func:`detectable_gain` says what a finished comparison could
see (the gain found 80% of the time: results.md, side_by_side).

:func:`components` takes v_s and the sd's out of a Table-1 ``results.json``. Files written
since 2026-11-27 hold v_s (``sampling_var``) beside their t-interval. Older ones hold only a
percentile bootstrap interval that resampled sentences and each system's own K_a or K_b
replicas (with replacement), so its SE^2 = v_s + (K_a-1)/K_a sd_a^2/K_a + (K_b-1)/K_b
sd_b^2/K_b (:func:`replica_variance`), and v_s is what is left of it; :func:`t_interval` then
gives the interval the current method would have reported.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

from rescorer.errors import RescorerError

Z95 = 1.959963984540054
T_METHOD = "t"  # results.json's "interval_method" since 2026-11-27 (absent before)


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
    # the file's interval is the percentile bootstrap of before 2026-11-27 (v_s re-derived)
    legacy: bool = False

    @property
    def runs_var(self) -> float:
        """sd_a^2/K_a + sd_b^2/K_b: the variance of a mean of K runs of each system."""
        return self.sd_baseline**2 / self.runs_baseline + self.sd_system**2 / self.runs

    @property
    def df(self) -> float:
        """:func:`interval_df` of these parts."""
        return interval_df(
            self.sampling_var, self.sd_baseline, self.runs_baseline, self.sd_system, self.runs
        )


def components(results: dict[str, Any], ref_words: int) -> list[Components]:
    """The variance parts of every system compared with a baseline in a ``results.json``;
    ValueError naming a system whose baseline is not among its systems."""
    by_name = {s["system"]: s for s in results["systems"]}
    found = []
    for s in results["systems"]:
        if not s.get("test_vs_baseline"):
            continue
        if s.get("baseline") not in by_name:
            raise ValueError(
                f"system {s['system']!r}: its baseline {s.get('baseline')!r} is not among the "
                "file's systems"
            )
        found.append(component(s, by_name[s["baseline"]], ref_words))
    return found


def component(
    s: dict[str, Any], base: dict[str, Any], ref_words: int, versus_key: str = "test_vs_baseline"
) -> Components:
    """The variance parts of system ``s`` of a ``results.json`` against its baseline ``base``
    (or, with ``versus_key="test_vs_second_baseline"``, (f) against its second baseline (b))."""
    versus = s[versus_key]
    lo, hi = versus["interval"]
    k_a, k_b = int(base["runs"]), int(s["runs"])
    sd_a, sd_b = base["test_sd"] or 0.0, s["test_sd"] or 0.0  # None: one run
    method = versus.get("interval_method")
    if method not in (None, T_METHOD):
        raise ValueError(
            f"system {s['system']!r}, {versus_key}: interval_method {method!r}, expected "
            f"{T_METHOD!r} (or "
            "none: a file of before 2026-11-27, whose interval is a percentile bootstrap)"
        )
    legacy = method is None
    if legacy:  # the percentile bootstrap: v_s is what its replica part leaves of SE^2
        se2 = ((hi - lo) / 2 / Z95) ** 2
        runs_var = replica_variance(sd_a, k_a, sd_b, k_b)
        sampling_var, clamped = max(se2 - runs_var, 0.0), se2 < runs_var
    else:
        sampling_var, clamped = float(versus["sampling_var"]), False
    return Components(
        system=s["system"],
        runs=k_b,
        runs_baseline=k_a,
        sd_system=sd_b,
        sd_baseline=sd_a,
        sampling_var=sampling_var,
        ref_words=ref_words,
        collapsed=one_weight_vector(base) or one_weight_vector(s),
        half_width=(hi - lo) / 2,
        clamped=clamped,
        single_run=min(k_a, k_b) < 2,
        legacy=legacy,
    )


def one_weight_vector(system: dict[str, Any]) -> bool:
    """Two or more runs, one weight vector (results.json files before 2026-11-26 do not say)."""
    return int(system["runs"]) > 1 and system.get("distinct_weights", 0) == 1


def replica_variance(sd_a: float, runs_a: int, sd_b: float, runs_b: int) -> float:
    """The part of the old percentile bootstrap interval's SE^2 (results.json files before
    2026-11-27) that drawing each system's own replicas with replacement added: (K-1)/K of
    sd^2/K for each, K its number of runs."""
    return sum((k - 1) / k * sd**2 / k for sd, k in ((sd_a, runs_a), (sd_b, runs_b)))


def interval_df(sampling_var: float, sd_a: float, runs_a: int, sd_b: float, runs_b: int) -> float:
    """Welch-Satterthwaite's degrees of freedom of v_s + sd_a^2/K_a + sd_b^2/K_b, the sentences'
    part v_s counted as known (a bootstrap over thousands of sentences) and each sd as
    estimated from K runs (K - 1 degrees of freedom): (sum)^2 / sum((sd^2/K)^2 / (K-1)). inf
    when no spread between runs is measured (every sd 0, or one run)."""
    parts = [(sd**2 / k, k - 1) for sd, k in ((sd_a, runs_a), (sd_b, runs_b)) if k > 1]
    spread = sum(v**2 / dof for v, dof in parts)
    if spread <= 0.0:
        return math.inf
    total = sampling_var + sum(v for v, _ in parts)
    return total**2 / spread


def require_scipy() -> None:
    """A RescorerError saying how to install scipy when it cannot be imported (the interval's
    t quantiles need it: table1 checks before its first step, not after hours of tuning)."""
    try:
        import scipy.stats  # noqa: F401
    except ImportError as exc:
        raise RescorerError(
            f"scipy cannot be imported ({exc}), and the evaluation's intervals need it: "
            "install it with pip install 'rescorer[experiments]' (or pip install scipy)"
        ) from None


def t_quantile(p: float, df: float) -> float:
    """Student's t quantile (the standard normal's for df = inf): scipy's."""
    from scipy import stats

    return float(stats.norm.ppf(p) if math.isinf(df) else stats.t.ppf(p, df))


def t_half_width(c: Components, level: float = 0.95) -> float:
    """The half-width of the interval :mod:`rescorer.experiments.significance` reports, for the
    parts ``c``: t(df) * sqrt(v_s + sd_a^2/K_a + sd_b^2/K_b)."""
    return t_quantile(0.5 + level / 2, c.df) * math.sqrt(c.sampling_var + c.runs_var)


def standard_error(
    sampling_var: float, ref_words: int, words: int, sd_a: float, sd_b: float, runs: int
) -> float:
    """SE of the mean gain on a test set of ``words`` source words with ``runs`` runs each."""
    return math.sqrt(sampling_var * ref_words / words + (sd_a**2 + sd_b**2) / runs)


def power(gain: float, se: float, df: float = math.inf) -> float:
    """How often the 95% interval (t with ``df`` degrees of freedom) of a true ``gain`` lies
    above 0 (``se`` 0: always for a gain above 0, never otherwise)."""
    if se <= 0.0:
        return 1.0 if gain > 0.0 else 0.0
    return phi(gain / se - (Z95 if math.isinf(df) else t_quantile(0.975, df)))


Z80 = 0.8416212335729143  # the standard normal's 80th percentile


def detectable_gain(c: Components) -> float:
    """The smallest true gain that the 95% interval finds above 0 in 80% of experiments like
    ``c``'s: its own v_s, spreads and K, (t(df) + z(0.8)) * sqrt(v_s + sd_a^2/K_a +
    sd_b^2/K_b). A spread of 0 from runs that collapsed to one weight vector makes it too
    small; so does one run (no spread measured)."""
    return (t_quantile(0.975, c.df) + Z80) * math.sqrt(c.sampling_var + c.runs_var)


def compared(results: dict[str, Any]) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """(system, its baseline) for every system of a ``results.json`` tested against a baseline
    that is among its systems (others are passed over: :func:`components` refuses them)."""
    by_name = {s["system"]: s for s in results["systems"]}
    for s in results["systems"]:
        base = by_name.get(s.get("baseline") or "")
        if s.get("test_vs_baseline") and base is not None:
            yield s, base


def detectable_gains(results: dict[str, Any]) -> dict[str, tuple[float, Components]]:
    """:func:`detectable_gain` of every system of a ``results.json`` compared with a baseline
    that is among its systems, by system name, with its variance parts."""
    found = {}
    for s, base in compared(results):
        c = component(s, base, ref_words=0)  # this test set: no scaling
        found[s["system"]] = (detectable_gain(c), c)
    return found


def interval_with_spread(c: Components, delta: float, sd_baseline: float) -> tuple[float, float]:
    """The t-interval of ``delta`` had the baseline's runs spread by ``sd_baseline``: the parts
    ``c`` with that sd for the baseline (results.md gives it where the baseline's runs all
    reached one weight vector, with the system's own sd, sd_a = sd_b, as power planning
    assumed)."""
    half = t_half_width(replace(c, sd_baseline=sd_baseline))
    return delta - half, delta + half


def current_interval(
    s: dict[str, Any], base: dict[str, Any], versus_key: str = "test_vs_baseline"
) -> tuple[float, float, bool]:
    """System ``s``'s interval against ``base`` by the current method: (low, high, re-derived).
    A file written since 2026-11-27 has it; an older one's is re-derived from its parts
    (:func:`component`, :func:`t_half_width`), re-derived True. ``versus_key`` as for
    :func:`component`."""
    versus = s[versus_key]
    c = component(s, base, ref_words=0, versus_key=versus_key)
    if not c.legacy:
        lo, hi = versus["interval"]
        return float(lo), float(hi), False
    half = t_half_width(c)
    return versus["delta"] - half, versus["delta"] + half, True


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
        df = interval_df(sampling_var * ref_words / words, sd_a, k, sd_b, k)
        if power(gain, se, df) >= target:
            return k
    return None


@dataclass(frozen=True)
class Check:
    """A prediction set beside what an experiment got: one system of the outcome's results.json.

    ``predicted_sampling_var`` is the prediction's v_s moved to the outcome's test size (v_s *
    W_ref / W, the 1/W assumption). ``predicted_half_width`` is the half-width the outcome's
    interval would have had with that v_s and its own spreads and K, by the outcome's own
    method (the t-interval, :func:`t_half_width`; for a file before 2026-11-27 the percentile
    bootstrap's, whose replica part is :func:`replica_variance`), so that it differs from the
    measured ``half_width`` by v_s alone. ``power``: how often a true ``gain`` would be found
    with the outcome's v_s, spreads and K by the t-interval."""

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
        predicted = replace(c, sampling_var=predicted_vs)
        if c.legacy:
            runs_var = replica_variance(c.sd_baseline, c.runs_baseline, c.sd_system, c.runs)
            predicted_half = Z95 * math.sqrt(predicted_vs + runs_var)
        else:
            predicted_half = t_half_width(predicted)
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
                predicted_half_width=predicted_half,
                power=power(gain, math.sqrt(c.sampling_var + c.runs_var), c.df),
                collapsed=c.collapsed,
                clamped=c.clamped,
                single_run=c.single_run,
            )
        )
    return rows
