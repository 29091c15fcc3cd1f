"""The power model of Table 1 (rescorer.experiments.power) against hand computations and the
second edition's committed results."""

from __future__ import annotations

import itertools
import json
import math
import statistics

import numpy as np
import pytest
from conftest import ROOT

from rescorer.experiments.bleu import ORDER, STATS_WIDTH, bleu_from_totals
from rescorer.experiments.power import (
    Z95,
    check,
    components,
    phi,
    power,
    replica_variance,
    runs_needed,
    standard_error,
)
from rescorer.experiments.significance import bootstrap_gains

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
    se = standard_error(0.01, 1000, 1000, 0.3, 0.3, k)
    assert power(0.5, se) >= 0.8
    assert power(0.5, standard_error(0.01, 1000, 1000, 0.3, 0.3, k - 1)) < 0.8
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


def test_the_replica_part_matches_the_bootstrap_with_each_systems_own_k() -> None:
    """The bootstrap of results.json (significance.bootstrap_gains) on replicas whose every
    sentence is the same: drawing sentences changes nothing, so the gain's variance is the
    replica part alone, and with K_a = 6 and K_b = 3 it is each system's own (K-1)/K^2 sd^2,
    not one K's for both (min K would give a third more)."""
    rng = np.random.default_rng(0)
    s = 40  # sentences

    def replicas(k: int) -> np.ndarray:
        one = np.zeros((k, 1, STATS_WIDTH))  # [K, 1, W]: one sentence's statistics per replica
        one[:, :, :2] = 10  # hypothesis and reference length
        one[:, :, 2 : 2 + ORDER] = rng.integers(4, 9, size=(k, 1, ORDER))  # matches
        one[:, :, 2 + ORDER :] = 10  # n-grams of each order
        return np.repeat(one, s, axis=1)  # [K, S, W]

    base, ours = replicas(6), replicas(3)
    bleus = {
        name: [float(bleu_from_totals(r.sum(axis=0))) for r in stats]
        for name, stats in (("a", base), ("b", ours))
    }
    sd_a, sd_b = statistics.stdev(bleus["a"]), statistics.stdev(bleus["b"])
    gains = bootstrap_gains(base, ours, trials=20000, seed=3)
    expected = replica_variance(sd_a, 6, sd_b, 3)
    assert float(np.var(gains)) == pytest.approx(expected, rel=0.05)
    one_k = replica_variance(sd_a, 3, sd_b, 3)  # the old min(K) for both
    assert abs(one_k - expected) > 0.1 * expected


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
        # power with the variance of a mean of 4 runs, sd^2/4: below the bootstrap's SE's
        mean_se = math.sqrt(r.sampling_var + (r.sd_baseline**2 + r.sd_system**2) / 4)
        assert r.power == pytest.approx(power(0.5, mean_se))
        assert power(0.3, mean_se) < power(0.3, r.half_width / Z95)
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
