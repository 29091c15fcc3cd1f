"""results.md: warnings, the models, the systems, the dev split and every run of results.json."""

from __future__ import annotations

import math
import re
from typing import Any

from rescorer.experiments.models import model_size
from rescorer.experiments.new_pairs import EXAMPLES
from rescorer.experiments.power import (
    compared,
    component,
    detectable_gains,
    interval_with_spread,
    one_weight_vector,
)
from rescorer.experiments.significance import format_p

COLUMNS = ("RNN", "RNN inverse", "WP")  # the new columns' weights, in the tables' order


def p_cell(sig: dict[str, Any] | None, which: str = "") -> str:
    """A p cell: MultEval's (``which`` empty) or the shared-coin test's (``_shared_coin``)."""
    if sig is None:
        return "–"
    return format_p(sig[f"p{which}"], sig["trials"], sig[f"reached{which}"])


def interval_cell(sig: dict[str, Any] | None) -> str:
    return "–" if sig is None else f"[{sig['interval'][0]:+.2f}, {sig['interval'][1]:+.2f}]"


def fmt_cell(value: float | int | None, spec: str = ".2f") -> str:
    return (
        "–"
        if value is None or (isinstance(value, float) and math.isnan(value))
        else format(value, spec)
    )


def md_row(cells: list[str]) -> str:
    """A Markdown table row; a ``|`` inside a cell (``+RNN p(f|e) ...``) is escaped, so that
    it does not split the cell, unless it already is."""
    return "| " + " | ".join(re.sub(r"(?<!\\)\|", r"\\|", c) for c in cells) + " |"


def _models_table(results: dict[str, Any]) -> list[str]:
    lines = [
        "| model | direction | size | updates | epochs | valid ppl | unigram ppl | training h "
        "| weights sha256 | systems |",
        "|---|---|---|---:|---:|---:|---:|---:|---|---|",
    ]
    for m in results["models"]:
        best = " (best)" if m["label"] == results["best"] else ""
        cells = [
            f"{m['label']}{best}", m["direction"], model_size(m) or "–",
            fmt_cell(m["updates"], ","),
            fmt_cell(m["epochs"]), fmt_cell(m["valid_ppl"]), fmt_cell(m["unigram_ppl"]),
            fmt_cell(m["train_hours"]), f"`{m['weights_sha256']}`", ", ".join(m["systems"]),
        ]  # fmt: skip
        lines.append(md_row(cells))
    return lines


def _weights_table(results: dict[str, Any]) -> list[str]:
    """Which features moved: the mean tuned weight of every feature, a column per system."""
    systems = [s for s in results["systems"] if s.get("weight_means")]
    if not systems:
        return []
    names: dict[str, None] = {}  # every weight's name, in the order of first appearance
    for s in systems:
        names.update(dict.fromkeys(s["weight_means"]))
    lines = [
        "",
        "Mean tuned weights over each system's runs (as the tuner wrote them; "
        "mert-moses.pl normalises them to sum 1 in absolute value):",
        "",
        md_row(["weight", *(s["system"] for s in systems)]),
        "|---|" + "---:|" * len(systems),
    ]
    for name in names:
        cells = [fmt_cell(s["weight_means"].get(name), "+.4f") for s in systems]
        lines.append(md_row([name, *cells]))
    return lines


def _md(text: str) -> str:
    """Corpus text shown as it is in Markdown: entities (``&amp;``) and markup characters
    escaped."""
    text = text.replace("&", "&amp;").replace("<", "&lt;")
    return re.sub(r"([\\`*_\[\]|])", r"\\\1", text)


def _extended_tables(results: dict[str, Any]) -> list[str]:
    """(f): against (b) as well, the new pairs its test 1-best used, examples."""
    lines: list[str] = []
    names = {s["system"]: f"({s['letter']}) {s['name']}" for s in results["systems"]}
    letters = {s["system"]: f"({s['letter']})" for s in results["systems"]}
    for s in results["systems"]:
        use = s.get("new_pairs")
        if use is None:
            continue
        test, dev = s.get("test_vs_second_baseline"), s.get("dev_vs_second_baseline")
        versus = names[s["second_baseline"]]
        provenance = fmt_cell(s["new_weight_means"].get("provenance"), "+.4f")
        lines += [
            "",
            f"{names[s['system']]}: {s['table_lines']:,} table lines, of which "
            f"{use['generated_pairs']:,} pairs the model generated for "
            f"{use['generated_sources']:,} source phrases of dev and test; mean provenance "
            f"weight {provenance}. Against {versus}:",
            "",
            "| system | against | Δ test | 95% interval | Δ pooled | p (test) "
            "| p (test, shared coin, ours) | Δ dev | p (dev) |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|",
            md_row(
                [
                    names[s["system"]],
                    versus,
                    *_versus_cells(test),
                    p_cell(test, "_shared_coin"),
                    fmt_cell(dev["delta"], "+.2f") if dev else "–",
                    p_cell(dev),
                ]
            ),
            "",
            f"Generated pairs in the test 1-best ({use['test_sentences']} sentences; the "
            "decoder's -report-segmentation matched against the pairs extend added):",
            "",
            "| run | sentences using ≥ 1 | pairs used | distinct pairs |",
            "|---:|---:|---:|---:|",
        ]
        for r in [*use["runs"], {"run": "mean", **use["mean"]}]:
            spec = ".1f" if r["run"] == "mean" else ","
            counts = (fmt_cell(r[k], spec) for k in ("sentences", "pairs", "distinct"))
            lines.append(md_row([str(r["run"]), *counts]))
        for kind, verb in (("helped", "beat"), ("hurt", "lost to")):
            found = use["examples"][kind]
            lines += [
                "",
                f"Sentences where run 1 {verb} run 1 of {versus} at sentence BLEU while using a "
                f"generated pair (up to {EXAMPLES}, the largest difference first):"
                + ("" if found else " none."),
            ]
            for e in found:
                lines += _example(e, letters[s["system"]], letters[s["second_baseline"]])
    return lines


def _groups_table(results: dict[str, Any]) -> list[str]:
    """Each system's test gain in each group of test sentences (rescorer.experiments.breakdown)."""
    systems = [s for s in results["systems"] if s.get("test_by_group")]
    if not systems:
        return []
    names = {s["system"]: f"({s['letter']}) {s['name']}" for s in results["systems"]}
    groups = systems[0]["test_by_group"]
    lines = [
        "",
        "Where the test gain is: the test sentences by number of source words, and by whether "
        "a source word is unknown to the phrase table; in each group the baseline's mean BLEU, "
        "then each system's Δ and its 95% interval (small groups, wide intervals; "
        "no correction for the several groups):",
        "",
        md_row(["system", *(f"{g['group']} ({g['sentences']:,})" for g in groups)]),
        "|---|" + "---:|" * len(groups),
    ]
    shown: set[str] = set()
    for s in systems:
        base = s["baseline"]
        if base not in shown:
            shown.add(base)
            cells = [fmt_cell(g["baseline"]) for g in s["test_by_group"]]
            lines.append(md_row([f"{names[base]}: BLEU", *cells]))
        cells = [f"{fmt_cell(g['delta'], '+.2f')} {interval_cell(g)}" for g in s["test_by_group"]]
        lines.append(md_row([names[s["system"]], *cells]))
    return lines


def _collapsed_replicas(results: dict[str, Any]) -> list[str]:
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


def _had_the_baseline_varied(results: dict[str, Any]) -> list[str]:
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


def _fewer_pairs(results: dict[str, Any]) -> list[str]:
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


def _detectable(results: dict[str, Any]) -> list[str]:
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


def _versus_cells(sig: dict[str, Any] | None) -> list[str]:
    """Δ, its interval, Δ pooled and MultEval's p of a test against a baseline."""
    if sig is None:
        return ["–"] * 4
    delta, pooled = fmt_cell(sig["delta"], "+.2f"), fmt_cell(sig["pooled_delta"], "+.2f")
    return [delta, interval_cell(sig), pooled, p_cell(sig)]


def _example(e: dict[str, Any], ours: str, theirs: str) -> list[str]:
    """One sentence of (f) against (b): BLEU, the texts, the generated pairs it used."""
    pairs = "; ".join(f"{_md(src)} → {_md(tgt)}" for src, tgt in e["new_pairs"])
    return [
        "",
        f"- sentence {e['sentence']}: sentence BLEU {e['bleu']:.1f} against {e['versus_bleu']:.1f}",
        f"  - source: {_md(e['source'])}",
        f"  - reference: {_md(e['reference'])}",
        f"  - {ours}: {_md(e['hypothesis'])}",
        f"  - {theirs}: {_md(e['versus_hypothesis'])}",
        f"  - generated pairs used: {pairs}",
    ]


def results_markdown(results: dict[str, Any]) -> str:
    """Every table of results.json, in Markdown."""
    sents = results["sentences"]
    lines = [f"**Warning:** {w}" for w in results.get("warnings", [])]
    lines += [""] if lines else []
    lines += [
        f"Tuners: {'; '.join(results['tuners'].values())}. Start: {results['start']}; test "
        f"{sents['test']} sentences. BLEU = sacreBLEU ({results['sacrebleu_signature']}); "
        f"± = sample standard deviation over runs (K); Δ: mean BLEU minus the baseline's "
        f"((a), or (a) by the same tuner); Δ pooled: the BLEU of the system's replicas pooled "
        f"into one corpus minus the baseline's, the statistic MultEval's p tests; "
        f"{results['significance']}.",
        "",
        *_models_table(results),
    ]
    if results.get("curve"):
        lines += ["", f"![test BLEU gain against training hours]({results['curve']})"]
    lines += [
        "",
        "| system | K | table lines | dev BLEU | test BLEU | Δ test | 95% interval | Δ pooled "
        "| p (test) | p (test, shared coin, ours) | Δ dev | p (dev) | RNN weight "
        "| RNN inverse weight | WP weight |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for s in results["systems"]:
        test, dev = s.get("test_vs_baseline"), s.get("dev_vs_baseline")
        weights = s["new_weight_means"]
        cells = [
            f"({s['letter']}) {s['name']}", str(s["runs"]), f"{s['table_lines']:,}",
            f"{fmt_cell(s['dev_mean'])} ± {fmt_cell(s['dev_sd'])}",
            f"{fmt_cell(s['test_mean'])} ± {fmt_cell(s['test_sd'])}",
            fmt_cell(test["delta"], "+.2f") if test else "–", interval_cell(test),
            fmt_cell(test["pooled_delta"], "+.2f") if test else "–", p_cell(test),
            p_cell(test, "_shared_coin"), fmt_cell(dev["delta"], "+.2f") if dev else "–",
            p_cell(dev), *(fmt_cell(weights.get(c), ".4f") for c in COLUMNS),
        ]  # fmt: skip
        lines.append(md_row(cells))
    lines += _collapsed_replicas(results)
    lines += _had_the_baseline_varied(results)
    lines += _fewer_pairs(results)
    lines += _detectable(results)
    lines += _groups_table(results)
    lines += _extended_tables(results)
    lines += _weights_table(results)
    if "dev_rest_mean" in results["systems"][0]:
        n = sents["tune"]
        lines += [
            "",
            f"Dev split: the {n} sentences tuned on, and the other {sents['dev'] - n} (which "
            "the baseline's starting weights may have been tuned on):",
            "",
            f"| system | dev 1-{n} | Δ | p | dev {n + 1}-{sents['dev']} | Δ | p |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        for s in results["systems"]:
            cells = [f"({s['letter']}) {s['name']}"]
            for part in ("dev_tuned", "dev_rest"):
                sig = s.get(f"{part}_vs_baseline")
                cells += [
                    f"{fmt_cell(s[f'{part}_mean'])} ± {fmt_cell(s[f'{part}_sd'])}",
                    fmt_cell(sig["delta"], "+.2f") if sig else "–",
                    p_cell(sig),
                ]
            lines.append(md_row(cells))
    lines += [
        "",
        "| system | run | seed | iterations | dev BLEU | test BLEU | dev multi-bleu | test "
        "multi-bleu | RNN weight | RNN inverse weight | WP weight | table lines | tune s "
        "| decode s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results["runs"]:
        continued = "*" if r.get("continued_after_iteration") else ""  # its note: below
        at_least = "≥ " if r.get("tune_seconds_lower_bound") else ""
        cells = [
            r["system"], str(r["run"]), str(r["seed"]), str(r["iterations"]),
            f"{r['dev_bleu']:.2f}", f"{r['test_bleu']:.2f}",
            f"{r['dev_multi_bleu']:.2f}", f"{r['test_multi_bleu']:.2f}",
            *(fmt_cell(r["new_weights"].get(c), ".4f") for c in COLUMNS),
            f"{r['table_lines']:,}",
            at_least + fmt_cell(r["tune_seconds"], ".0f") + continued,
            fmt_cell(r["decode_seconds"], ".0f"),
        ]  # fmt: skip
        lines.append(md_row(cells))
    if any(r.get("continued_after_iteration") for r in results["runs"]):
        lines += [
            "",
            "\\* A tuning run continued after a kill (`mert-moses.pl --continue`): its seconds "
            "are its last invocation's plus the finished iterations it continued from, timed by "
            "mert-moses.pl's log (≥: the log could not say, see the warnings). The time of an "
            "iteration a kill cut short is not counted, nor that of a run killed in its first "
            "iteration, which starts over.",
        ]
    return "\n".join(lines) + "\n"
