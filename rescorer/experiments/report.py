"""results.md: warnings, the models, the systems, the dev split and every run of results.json."""

from __future__ import annotations

import math
import re
from typing import Any

from rescorer.experiments.models import model_size
from rescorer.experiments.new_pairs import EXAMPLES
from rescorer.experiments.report_notes import (
    collapsed_replicas,
    detectable,
    fewer_pairs,
    had_the_baseline_varied,
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
    lines += _systems_table(results)
    lines += collapsed_replicas(results)
    lines += had_the_baseline_varied(results)
    lines += fewer_pairs(results)
    lines += detectable(results)
    lines += _groups_table(results)
    lines += _extended_tables(results)
    lines += _weights_table(results)
    lines += _dev_split_table(results)
    lines += _runs_table(results)
    return "\n".join(lines) + "\n"


def _systems_table(results: dict[str, Any]) -> list[str]:
    """The systems: BLEU, Δ against the baseline, its interval and p's, the new weights."""
    lines = [
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
    return lines


def _dev_split_table(results: dict[str, Any]) -> list[str]:
    """The dev sentences tuned on against the others, where results.json splits them."""
    if "dev_rest_mean" not in results["systems"][0]:
        return []
    sents = results["sentences"]
    n = sents["tune"]
    lines = [
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
    return lines


def _runs_table(results: dict[str, Any]) -> list[str]:
    """Every tuning run, and the note on runs continued after a kill."""
    lines = [
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
    return lines
