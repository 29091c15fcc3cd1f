"""Table 1 on several systems at once, beside the paper's rows: one Markdown table from the
results.json of several Table-1 work folders (e.g. the en-fr software messages and the help
prose), each system's rows next to the others' and to the paper's.

Every number comes from the results.json it is read from: a Δ, its interval and its p compare a
system with the baseline of its own work folder (MIRA's systems with MIRA's baseline), never
across folders; (f) has a second row, against (b) of its own folder. Every interval is the
current method's (the t-interval of :mod:`rescorer.experiments.significance`): where a
results.json written before 2026-11-27 holds a percentile bootstrap, it is re-derived from its
parts and marked (:func:`rescorer.experiments.power.current_interval`). Rows are matched by
kind: the letter, the tuner and the models' labels (so ``b-fwd@6h`` of one folder sits beside
``b-fwd@6h`` of the other).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from rescorer.experiments.power import (
    compared,
    component,
    current_interval,
    detectable_gain,
    detectable_gains,
)
from rescorer.experiments.report import fmt_cell, md_row, p_cell

# The paper's Table 1 (BLEU, dev / test), Cho et al. 2014, English-French news. Its WP row
# also has the CSLM; it has no rows for (d)-(f) or for batch MIRA.
PAPER_ROWS: dict[str, str] = {
    "a": "30.64 / 33.30",
    "b": "31.20 / 33.87",
    "c": "(CSLM+RNN+WP) 31.50 / 34.54",
}

KINDS = {
    "a": "baseline",
    "b": "+RNN",
    "c": "+RNN+WP",
    "d": "+RNN, top-K table",
    "e": "+RNN both directions",
    "f": "table filled up with generated pairs",
}


def _kind(letter: str, system: dict[str, Any]) -> str:
    """A kind of system in words; (d)'s with the K its name gives (``..., top-5 table``)."""
    if letter == "d" and "top-" in system["name"]:
        return "+RNN, " + system["name"].split(", ", 1)[-1]
    return KINDS.get(letter, "?")


@dataclass(frozen=True)
class Edition:
    """One work folder's results.json, under the name its rows carry (e.g. ``help``)."""

    name: str
    results: dict[str, Any]


def _key(system: dict[str, Any]) -> tuple[int, str, str]:
    """Where a system's rows go: MERT before MIRA, then by letter, then by models."""
    return (0 if system["tuner"] == "mert" else 1, system["letter"], "+".join(system["models"]))


SYSTEM_KEYS = ("system", "letter", "name", "tuner", "runs", "models", "test_mean", "test_sd")


def check_results(results: object, where: str) -> dict[str, Any]:
    """``results`` if it has what :func:`editions_table` reads, else a ValueError naming
    ``where`` and the first thing missing (an older results.json lacks ``tuners``, ``best``
    and the systems' ``letter`` and ``tuner``)."""
    if not isinstance(results, dict):
        raise ValueError(f"{where}: not a JSON object, expected a Table-1 results.json")
    shape: dict[str, type | tuple[type, ...]] = {
        "sentences": dict, "tables": dict, "tuners": dict, "best": (str, type(None)),
    }  # fmt: skip
    for key, kind in {**shape, "systems": list}.items():
        if not isinstance(results.get(key), kind):
            raise ValueError(
                f"{where}: no {key!r} of the expected kind: not a Table-1 results.json, or "
                "one from an older scripts/table1.py (run it again on its work folder)"
            )
    for field in (("sentences", "dev"), ("sentences", "test"), ("tables", "filtered_lines")):
        if not isinstance(results[field[0]].get(field[1]), int):
            raise ValueError(f"{where}: no {field[0]}.{field[1]} (a count)")
    for i, system in enumerate(results["systems"], 1):
        missing = [k for k in SYSTEM_KEYS if not isinstance(system, dict) or k not in system]
        if missing:
            raise ValueError(f"{where}: system {i} has no {', '.join(missing)}")
    return results


SECOND = "test_vs_second_baseline"  # (f) against (b), the same models without generated pairs


def second_compared(results: dict[str, Any]) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """(system, its second baseline) for every system of a ``results.json`` that was also tested
    against a second baseline among its systems: (f) against (b)."""
    by_name = {s["system"]: s for s in results["systems"]}
    for s in results["systems"]:
        second = by_name.get(s.get("second_baseline") or "")
        if s.get(SECOND) and second is not None:
            yield s, second


def _against_second(name: str, s: dict[str, Any], second: dict[str, Any]) -> list[str]:
    """The row under (f)'s: its Δ, interval, what it could see and p against ``second``, (b)
    of its own folder, the same models without the generated pairs (each (f) row's own Δ is
    against (a)); its K cell is (f)'s runs / (b)'s."""
    test = s[SECOND]
    low, high, derived = current_interval(s, second, SECOND)
    gain = detectable_gain(component(s, second, ref_words=0, versus_key=SECOND))
    return [
        f"↳ ({s['letter']}) against ({second['letter']})",
        "+".join(s["models"]) or "–", name, f"{s['runs']}/{second['runs']}", "(as above)",
        fmt_cell(test["delta"], "+.2f"), f"[{low:+.2f}, {high:+.2f}]{'†' if derived else ''}",
        f"+{gain:.2f}", p_cell(test), p_cell(test, "_shared_coin"), "–",
    ]  # fmt: skip


def editions_table(editions: Sequence[Edition]) -> str:
    """The editions' sizes and baselines, then every system beside the others', in Markdown.
    Raises ValueError when there are none."""
    if not editions:
        raise ValueError("no results to put side by side")
    lines = [
        "Test BLEU (sacreBLEU) ± the sample sd over the K tuning runs. Each Δ, 95% interval "
        "(mean ± t(df) · sqrt(v_s + sd_a²/K_a + sd_b²/K_b); † re-derived from a results.json "
        "of before 2026-11-27, whose own interval was a percentile bootstrap, too narrow at "
        "small K) and p compares a system with the baseline of its own work folder (batch MIRA's "
        "with MIRA's baseline), never across folders. Could see (80%): the smallest true gain "
        "that the interval would find above 0 in 80% of such experiments, from the "
        "comparison's own sampling variance and runs' spreads (rescorer/experiments/power.py). "
        "A ↳ row compares (f) with (b) of its own folder: the same models without the "
        "generated pairs; its K is (f)'s / (b)'s. "
        "The paper's rows (Cho et al. 2014, Table 1) are English-French news, dev / test.",
        "",
        "| system folder | dev sentences | test sentences | filtered table lines "
        "| tuners | best model |",
        "|---|---:|---:|---:|---|---|",
    ]
    for e in editions:
        r = e.results
        cells = [
            e.name, f"{r['sentences']['dev']:,}", f"{r['sentences']['test']:,}",
            f"{r['tables']['filtered_lines']:,}", ", ".join(sorted(r["tuners"])),
            str(r["best"] or "–"),
        ]  # fmt: skip
        lines.append(md_row(cells))
    rows: dict[tuple[int, str, str], list[tuple[str, dict[str, Any]]]] = {}
    seen: dict[str, str] = {}  # each row's "could see" cell, by edition and system
    intervals: dict[str, str] = {}  # each row's interval cell, by edition and system
    against_second: dict[str, list[str]] = {}  # (f)'s ↳ row against (b), by edition and system
    for e in editions:
        for s in e.results["systems"]:
            rows.setdefault(_key(s), []).append((e.name, s))
        for s, base in compared(e.results):
            low, high, derived = current_interval(s, base)
            mark = "†" if derived else ""
            intervals[f"{e.name}\0{s['system']}"] = f"[{low:+.2f}, {high:+.2f}]{mark}"
        for system, (gain, _) in detectable_gains(e.results).items():
            seen[f"{e.name}\0{system}"] = f"+{gain:.2f}"
        for s, second in second_compared(e.results):
            against_second[f"{e.name}\0{s['system']}"] = _against_second(e.name, s, second)
    lines += [
        "",
        "| system | models | system folder | K | test BLEU | Δ test | 95% interval "
        "| could see (80%) | p MultEval | p shared coin (ours) | paper dev / test |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    shown: set[tuple[int, str]] = set()  # the kinds whose label and paper cell are written
    for key in sorted(rows):
        tuner, letter, models = key
        for name, s in rows[key]:
            first = (tuner, letter) not in shown
            shown.add((tuner, letter))
            kind = f"({letter}) {_kind(letter, s)}" + (", batch MIRA" if tuner else "")
            paper = "–" if tuner else PAPER_ROWS.get(letter, "–")
            test = s.get("test_vs_baseline")
            cells = [
                kind if first else "", models or "–", name, str(s["runs"]),
                f"{fmt_cell(s['test_mean'])} ± {fmt_cell(s['test_sd'])}",
                fmt_cell(test["delta"], "+.2f") if test else "–",
                intervals.get(f"{name}\0{s['system']}", "–"),
                seen.get(f"{name}\0{s['system']}", "–"),
                p_cell(test), p_cell(test, "_shared_coin"), paper if first else "",
            ]  # fmt: skip
            lines.append(md_row(cells))
            if f"{name}\0{s['system']}" in against_second:
                lines.append(md_row(against_second[f"{name}\0{s['system']}"]))
    return "\n".join(lines) + "\n"
