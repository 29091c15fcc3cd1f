"""results.md's sentences under the systems table (rescorer/experiments/report.py): the
tuning runs that reached one weight vector, the intervals had a baseline's runs varied, the p's
that paired fewer runs, and the smallest gain each test could see."""

from __future__ import annotations

from typing import Any

from rescorer.experiments.power import (
    compared,
    component,
    detectable_gains,
    interval_with_spread,
    one_weight_vector,
)


def collapsed_replicas(results: dict[str, Any]) -> list[str]:
    """A sentence on every system whose tuning runs reached fewer distinct weight vectors than
    it has runs (older results.json files do not count them: nothing is said)."""
    found = [s for s in results["systems"] if s.get("distinct_weights", s["runs"]) < s["runs"]]
    if not found:
        return []
    listed = "; ".join(
        f"({s['letter']}) {s['name']}: {s['runs']} runs, {s['distinct_weights']} distinct"
        for s in found
    )
    one = [f"({s['letter']})" for s in found if s["distinct_weights"] == 1]
    some = [f"({s['letter']})" for s in found if s["distinct_weights"] > 1]
    said = [
        "",
        f"Tuning runs that reached the same weights (whatever their seeds): {listed}. Identical "
        "replicas add no tuner spread.",
    ]
    if one:
        said[-1] += (
            f" {_and(one)} reached one weight vector: in {'its' if len(one) == 1 else 'their'}"
            " comparisons the interval and p take no tuner spread from "
            f"{'it' if len(one) == 1 else 'them'}, only the other system's and the test "
            "sentences' sampling error."
        )
    if some:
        said[-1] += (
            f" For {_and(some)} the spread between runs rests on fewer weight vectors than runs."
        )
    return said


def had_the_baseline_varied(results: dict[str, Any]) -> list[str]:
    """Where a baseline's runs all reached one weight vector (sd_a = 0, which says that MERT
    started where it had converged, not that the tuner does not vary): each comparison with it
    again, as if the baseline's runs spread as the system's do (sd_a = sd_b)."""
    found = []
    for s, base in compared(results):
        if not one_weight_vector(base) or not s.get("test_sd"):
            continue
        c = component(s, base, ref_words=0)
        low, high = interval_with_spread(c, s["test_vs_baseline"]["delta"], c.sd_system)
        found.append(
            f"({s['letter']}) {s['name']} [{low:+.2f}, {high:+.2f}] "
            f"(sd_a = sd_b = {c.sd_system:.2f})"
        )
    if not found:
        return []
    return [
        "",
        "Had the baseline's runs varied as each system's do (its own reached one weight vector), "
        "the 95% intervals would be: " + "; ".join(found) + ".",
    ]


def fewer_pairs(results: dict[str, Any]) -> list[str]:
    """A sentence on every test whose p's paired fewer runs than one of its systems has: both
    randomisation tests take the first min(K_a, K_b) runs of each (Δ and the interval all)."""
    found = []
    for s, base in compared(results):
        test = s["test_vs_baseline"]
        if test["pairs"] < max(s["runs"], base["runs"]):
            found.append(
                f"({s['letter']}) {s['name']}: {test['pairs']} pairs of its {s['runs']} runs "
                f"and ({base['letter']})'s {base['runs']}"
            )
    if not found:
        return []
    return [
        "",
        "The p's pair the first min(K) runs of the two systems, Δ and the interval every run: "
        + "; ".join(found)
        + ".",
    ]


def detectable(results: dict[str, Any]) -> list[str]:
    """What each test against a baseline could see: the smallest true gain its interval would
    find above 0 in 80% of such experiments (power.detectable_gain), from the comparison's
    own sampling variance and spreads; nothing where no system was compared."""
    gains = detectable_gains(results)
    found = []
    for s in results["systems"]:
        if s["system"] in gains:
            gain, c = gains[s["system"]]
            mark = " (one run: no spread)" if c.single_run else ""
            found.append(f"({s['letter']}) {s['name']} +{gain:.2f}{mark}")
    if not found:
        return []
    return [
        "",
        "What each test could see: the smallest true gain that its 95% interval would find "
        "above 0 in 80% of experiments like this one, from the comparison's own sampling "
        "variance over test sentences and its runs' spreads ((t(df) + z(0.8)) * "
        "sqrt(v_s + sd_a^2/K_a + sd_b^2/K_b); rescorer/experiments/power.py): "
        + "; ".join(found)
        + ". A gain this large or larger would most likely have been seen; runs that "
        "reached one weight vector make it too small.",
    ]


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]
