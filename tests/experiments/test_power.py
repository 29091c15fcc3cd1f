"""The power model of Table 1 (rescorer.experiments.power) against hand computations and the
second edition's committed results."""

from __future__ import annotations

import itertools
import json
import math
import statistics

import pytest
from conftest import ROOT

from rescorer.experiments.power import (
    Z95,
    check,
    component,
    components,
    current_interval,
    detectable_gain,
    interval_df,
    phi,
    power,
    replica_variance,
    runs_needed,
    standard_error,
    t_half_width,
    t_quantile,
)

SECOND = ROOT / "docs" / "results" / "table1-2nd" / "results.json"


def test_power_is_the_chance_the_interval_lies_above_zero() -> None:
    assert phi(0.0) == pytest.approx(0.5)
    assert phi(1.959963984540054) == pytest.approx(0.975, abs=1e-9)
    # a gain of 2.8 SE is found 80% of the time (z 1.96 + 0.84)
    assert power(2.8, 1.0) == pytest.approx(0.80, abs=0.002)
    assert power(0.0, 1.0) == pytest.approx(0.025, abs=1e-6)


def test_the_standard_error_adds_a_sampling_part_and_a_runs_part() -> None:
    # twice the words halve the sampling variance; the runs' spread shrinks with K
    se = standard_error(0.2, 1000, 2000, 0.3, 0.4, 5)
    assert se == pytest.approx(math.sqrt(0.1 + (0.09 + 0.16) / 5))
    assert standard_error(0.2, 1000, 1000, 0.0, 0.0, 1) == pytest.approx(math.sqrt(0.2))


def test_runs_needed_is_the_smallest_k_with_enough_power() -> None:
    k = runs_needed(0.5, 0.8, 0.01, 1000, 1000, 0.3, 0.3)
    assert k is not None

    def power_at(k: int) -> float:  # the t-interval's: df from the parts at K runs each
        se = standard_error(0.01, 1000, 1000, 0.3, 0.3, k)
        return power(0.5, se, interval_df(0.01, 0.3, k, 0.3, k))

    assert power_at(k) >= 0.8 > power_at(k - 1)
    # by hand, the runs' part alone: SE^2 = 0.18/K. The normal's 1.96 finds +0.5 80% of the
    # time from K = 6 (SE^2 <= (0.5 / 2.80)^2 = 0.0319); t with df = 2(K-1) (Welch, two equal
    # parts), 2.228 at K = 6, wants SE^2 <= (0.5 / 3.07)^2 = 0.0265: K = 7
    z_power = [power(0.5, standard_error(0.0, 1000, 1000, 0.3, 0.3, j)) for j in (5, 6)]
    assert z_power[0] < 0.8 <= z_power[1]
    assert interval_df(0.0, 0.3, 6, 0.3, 6) == pytest.approx(10.0)
    assert runs_needed(0.5, 0.8, 0.0, 1000, 1000, 0.3, 0.3) == 7
    # a sampling part alone above the bound: no K is enough
    assert runs_needed(0.5, 0.8, 0.2, 1000, 1000, 0.3, 0.3) is None


def test_components_of_the_second_edition_explain_its_intervals() -> None:
    """The parts taken out of results.json put back together give its bootstrap intervals."""
    results = json.loads(SECOND.read_text(encoding="utf-8"))
    found = {c.system: c for c in components(results, 6542)}
    assert {"b-fwd@1h", "b-fwd@3h", "b-fwd@6h", "c-fwd@6h", "e-fwd@6h+inv@2h"} <= set(found)
    by_name = {s["system"]: s for s in results["systems"]}
    for name, c in found.items():
        lo, hi = by_name[name]["test_vs_baseline"]["interval"]
        runs = replica_variance(c.sd_baseline, c.runs_baseline, c.sd_system, c.runs)
        assert Z95 * math.sqrt(c.sampling_var + runs) == pytest.approx((hi - lo) / 2, rel=1e-6)
        assert 0.0 < c.sampling_var < 0.5
    # en-fr's baseline runs gave one output: its spread is 0
    assert found["b-fwd@3h"].sd_baseline == 0.0


def test_the_bootstrap_draws_replicas_with_replacement() -> None:
    """The replica part of the bootstrap interval is the variance of the mean of K draws (with
    replacement) from the K replicas' values: (K-1)/K of the sample variance, over K. Checked
    against the exact variance of that mean, enumerated over every draw."""
    values = [57.87, 58.00, 57.71]
    k = len(values)
    means = [statistics.fmean(d) for d in itertools.product(values, repeat=k)]
    exact = statistics.pvariance(means)
    assert replica_variance(0.0, 1, statistics.stdev(values), k) == pytest.approx(exact)
    # sd^2/K, the variance of the mean of K new runs, is more: K/(K-1) of it
    assert statistics.stdev(values) ** 2 / k == pytest.approx(exact * k / (k - 1))


def test_welch_satterthwaite_degrees_of_freedom() -> None:
    """By hand: v_s 0.01, sd 0.3 over 4 runs each: parts 0.0225 each, df = (0.055)^2 /
    (2 * 0.0225^2 / 3) = 8.96; no spread measured (sd 0, or one run): the normal's (inf)."""
    assert interval_df(0.01, 0.3, 4, 0.3, 4) == pytest.approx(0.055**2 / (2 * 0.0225**2 / 3))
    assert interval_df(0.0, 0.3, 4, 0.0, 4) == pytest.approx(3.0)  # one sd, v_s 0: K - 1
    assert math.isinf(interval_df(0.01, 0.0, 4, 0.0, 4))
    assert math.isinf(interval_df(0.01, 0.3, 1, 0.3, 1))


def test_a_results_file_of_the_t_interval_gives_its_own_parts() -> None:
    """A file written since 2026-11-27 holds v_s: components take it as it is, and its
    interval is t(df) sqrt(v_s + sd_a^2/K_a + sd_b^2/K_b) with nothing re-derived."""
    v_s, sd_a, sd_b = 0.004, 0.1, 0.2
    df = interval_df(v_s, sd_a, 4, sd_b, 3)
    half = t_quantile(0.975, df) * math.sqrt(v_s + sd_a**2 / 4 + sd_b**2 / 3)
    results = {
        "systems": [
            {"system": "a", "runs": 4, "test_sd": sd_a},
            {
                "system": "b-m",
                "runs": 3,
                "test_sd": sd_b,
                "baseline": "a",
                "test_vs_baseline": {
                    "delta": 0.3,
                    "interval": [0.3 - half, 0.3 + half],
                    "interval_method": "t",
                    "sampling_var": v_s,
                },
            },
        ]
    }
    (c,) = components(results, 1000)
    assert not c.legacy and c.sampling_var == v_s and c.df == pytest.approx(df)
    assert t_half_width(c) == pytest.approx(half)
    assert current_interval(results["systems"][1], results["systems"][0]) == (
        0.3 - half,
        0.3 + half,
        False,
    )
    # the smallest gain found 80% of the time: (t + z(0.8)) SE
    se = math.sqrt(v_s + sd_a**2 / 4 + sd_b**2 / 3)
    assert detectable_gain(c) == pytest.approx((t_quantile(0.975, df) + 0.841621) * se)
    assert power(detectable_gain(c), se, df) == pytest.approx(0.8, abs=1e-6)
    with pytest.raises(ValueError, match="its baseline 'z' is not among"):
        components({"systems": [{**results["systems"][1], "baseline": "z"}]}, 1000)


def test_an_older_files_interval_is_re_derived() -> None:
    """The second edition's percentile bootstrap intervals: v_s as their replica part leaves it,
    then the t-interval of those parts, symmetric about Δ, and wider."""
    results = json.loads(SECOND.read_text(encoding="utf-8"))
    by_name = {s["system"]: s for s in results["systems"]}
    for c in components(results, 6542):
        assert c.legacy
        s = by_name[c.system]
        lo, hi, derived = current_interval(s, by_name[s["baseline"]])
        assert derived
        half = t_quantile(0.975, c.df) * math.sqrt(c.sampling_var + c.runs_var)
        delta = s["test_vs_baseline"]["delta"]
        assert (lo, hi) == pytest.approx((delta - half, delta + half))
        assert hi - lo >= c.half_width * 2 - 1e-9
    # one pinned by hand: (b) fwd@1h, +0.12, its percentile interval [-0.70, +1.01], K = 6
    # each; the runs' part is small beside v_s, so df is large and t near 1.96
    b1 = by_name["b-fwd@1h"]
    lo, hi, _ = current_interval(b1, by_name[b1["baseline"]])
    assert (round(lo, 2), round(hi, 2)) == (-0.74, 0.98)
    # (f) against its second baseline (b), help's first build with K = 4 each: the same parts,
    # read from test_vs_second_baseline (its percentile interval was [-0.20, +0.18])
    k4 = json.loads((ROOT / "docs/results/table1-3rd/fwd@1h-k4/results.json").read_text())
    f, b = (next(s for s in k4["systems"] if s["system"] == k) for k in ("f-fwd@1h", "b-fwd@1h"))
    lo, hi, derived = current_interval(f, b, "test_vs_second_baseline")
    assert derived and (round(lo, 2), round(hi, 2)) == (-0.24, 0.22)
    c = component(f, b, 0, "test_vs_second_baseline")
    assert (c.runs, c.runs_baseline, c.sd_baseline) == (4, 4, b["test_sd"])
    assert (
        (round(lo, 2), round(hi, 2))
        != tuple(  # not the comparison with (a)
            round(x, 2) for x in current_interval(f, k4["systems"][0])[:2]
        )
    )
    # an interval_method it does not know is refused, not read as the old one
    unknown = {**b1, "test_vs_baseline": {**b1["test_vs_baseline"], "interval_method": "bca"}}
    with pytest.raises(ValueError, match="interval_method 'bca', expected 't'"):
        current_interval(unknown, by_name[b1["baseline"]])


def test_check_sets_an_outcome_beside_the_prediction() -> None:
    """The help test set's own v_s and interval beside the one predicted from en-fr's."""
    outcome = json.loads((ROOT / "docs/results/table1-3rd/fwd@1h-k4/results.json").read_text())
    got = components(outcome, 71168)
    rows = {r.system: r for r in check(got, 71168, 0.18, 6542, gain=0.5)}
    by_name = {s["system"]: s for s in outcome["systems"]}
    assert set(rows) == {"b-fwd@1h", "f-fwd@1h"}
    for name, r in rows.items():
        lo, hi = by_name[name]["test_vs_baseline"]["interval"]
        assert r.half_width == (hi - lo) / 2  # the measured interval, as it is
        assert r.predicted_sampling_var == pytest.approx(0.18 * 6542 / 71168)
        # the same bootstrap with the predicted v_s: the replicas' part as in the measured
        # interval ((K-1)/K of sd^2/K each, K = 4), so the two differ by v_s alone
        replicas = 3 / 4 * (r.sd_baseline**2 + r.sd_system**2) / 4
        assert r.predicted_half_width == pytest.approx(
            Z95 * math.sqrt(r.predicted_sampling_var + replicas)
        )
        assert r.half_width == pytest.approx(Z95 * math.sqrt(r.sampling_var + replicas))
        # power by the t-interval, with the variance of a mean of 4 runs, sd^2/4: below the
        # old bootstrap's
        mean_se = math.sqrt(r.sampling_var + (r.sd_baseline**2 + r.sd_system**2) / 4)
        df = interval_df(r.sampling_var, r.sd_baseline, 4, r.sd_system, 4)
        assert r.power == pytest.approx(power(0.5, mean_se, df))
        assert power(0.3, mean_se, df) < power(0.3, r.half_width / Z95)
        assert r.collapsed and not r.clamped and not r.single_run  # (a)'s runs: one vector
    # help's sentences vary less in the gain than en-fr's per word: v_s about 4x below the
    # prediction, so the interval is narrower than planned
    assert rows["b-fwd@1h"].sampling_var < rows["b-fwd@1h"].predicted_sampling_var / 3
    with pytest.raises(ValueError, match="measured at 71168 words, not 6542"):
        check(got, 6542, 0.18, 6542)


def test_a_single_run_and_a_zero_se_are_no_crash() -> None:
    """A --runs 1 results.json has no test_sd (None); two identical systems give SE 0."""
    results = {
        "systems": [
            {"system": "a", "runs": 1, "test_sd": None},
            {
                "system": "b-m",
                "runs": 1,
                "test_sd": None,
                "baseline": "a",
                "test_vs_baseline": {"interval": [-0.2, 0.2]},
            },
            {
                "system": "c-m",
                "runs": 1,
                "test_sd": None,
                "baseline": "a",
                "test_vs_baseline": {"interval": [0.0, 0.0]},
            },
        ]
    }
    single, same = components(results, 1000)
    assert single.single_run and single.sd_system == single.sd_baseline == 0.0
    assert single.sampling_var == pytest.approx((0.2 / Z95) ** 2)
    row = check([single, same], 1000, 0.1, 1000)[1]
    assert row.sampling_var == 0.0 and row.power == 1.0  # SE 0: a true +0.5 is always found
    assert power(0.0, 0.0) == 0.0
