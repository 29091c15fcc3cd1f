"""results.md: the summary, the dev split and the per-run tables of a run's results.json."""

from __future__ import annotations

import math
from typing import Any

from rescorer.experiments.significance import format_p


def _p(sig: dict[str, Any] | None, which: str = "") -> str:
    """A p cell: MultEval's (``which`` empty) or the shared-coin test's (``_shared_coin``)."""
    if sig is None:
        return "–"
    return format_p(sig[f"p{which}"], sig["trials"], sig[f"reached{which}"])


def _interval(sig: dict[str, Any] | None) -> str:
    return "–" if sig is None else f"[{sig['interval'][0]:+.2f}, {sig['interval'][1]:+.2f}]"


def _model_line(model: dict[str, Any]) -> str:
    hours = model.get("train_hours")
    return (
        f"Model: {model['model']} (weights sha256 {model['weights_sha256']}), direction "
        f"{model['direction']}, {_fmt(model['updates'], ',')} updates, "
        f"{_fmt(model['epochs'], '.2f')} epochs, best validation perplexity "
        f"{_fmt(model['valid_ppl'])} (unigram {_fmt(model['unigram_ppl'])}), "
        f"{_fmt(hours, '.2f')} h of training to these weights."
    )


def _fmt(value: float | int | None, spec: str = ".2f") -> str:
    return (
        "–"
        if value is None or (isinstance(value, float) and math.isnan(value))
        else format(value, spec)
    )


def results_markdown(results: dict[str, Any]) -> str:
    """The summary table and the per-run table of results.json, in Markdown."""
    cfg, sents = results["config"], results["sentences"]
    lines = [f"**Warning:** {w}" for w in results.get("warnings", [])]
    lines += [""] if lines else []
    lines += [
        f"Tuner: {results['tuner']}, {cfg['runs']} run(s) per system, tuned on "
        f"{sents['tune']} of {sents['dev']} dev sentences, test {sents['test']} sentences; "
        f"BLEU = sacreBLEU ({results['sacrebleu_signature']}); ± = sample standard deviation "
        f"over runs; {results['significance']}.",
        "",
        _model_line(results["model"]),
        "",
        "| system | table lines | dev BLEU | test BLEU | Δ test vs (a) | 95% interval | p (test) "
        "| p (test, shared coin) | Δ dev vs (a) | p (dev) | RNN weight | WP weight |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for s in results["systems"]:
        test_sig, dev_sig = s.get("test_vs_a"), s.get("dev_vs_a")
        lines.append(
            f"| ({s['system']}) {s['name']} | {s['table_lines']:,} "
            f"| {_fmt(s['dev_mean'])} ± {_fmt(s['dev_sd'])} "
            f"| {_fmt(s['test_mean'])} ± {_fmt(s['test_sd'])} "
            f"| {_fmt(test_sig['delta'], '+.2f') if test_sig else '–'} "
            f"| {_interval(test_sig)} | {_p(test_sig)} | {_p(test_sig, '_shared_coin')} "
            f"| {_fmt(dev_sig['delta'], '+.2f') if dev_sig else '–'} | {_p(dev_sig)} "
            f"| {_fmt(s['rnn_weight_mean'], '.4f')} | {_fmt(s['wp_weight_mean'], '.4f')} |"
        )
    if "dev_rest_mean" in results["systems"][0]:
        n = sents["tune"]
        lines += [
            "",
            f"Dev split: the {n} sentences tuned on, and the other {sents['dev'] - n} (which "
            "the baseline's starting weights may have been tuned on):",
            "",
            f"| system | dev 1-{n} | Δ vs (a) | p | dev {n + 1}-{sents['dev']} | Δ vs (a) | p |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        for s in results["systems"]:
            cells = [f"({s['system']}) {s['name']}"]
            for part in ("dev_tuned", "dev_rest"):
                sig = s.get(f"{part}_vs_a")
                cells += [
                    f"{_fmt(s[f'{part}_mean'])} ± {_fmt(s[f'{part}_sd'])}",
                    _fmt(sig["delta"], "+.2f") if sig else "–",
                    _p(sig),
                ]
            lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        "| system | run | seed | iterations | dev BLEU | test BLEU | dev multi-bleu | test "
        "multi-bleu | RNN weight | WP weight | table lines | tune s | decode s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results["runs"]:
        lines.append(
            f"| ({r['system']}) | {r['run']} | {r['seed']} | {r['iterations']} "
            f"| {r['dev_bleu']:.2f} | {r['test_bleu']:.2f} | {r['dev_multi_bleu']:.2f} "
            f"| {r['test_multi_bleu']:.2f} | {_fmt(r['rnn_weight'], '.4f')} "
            f"| {_fmt(r['wp_weight'], '.4f')} | {r['table_lines']:,} "
            f"| {_fmt(r['tune_seconds'], '.0f')} | {_fmt(r['decode_seconds'], '.0f')} |"
        )
    return "\n".join(lines) + "\n"
