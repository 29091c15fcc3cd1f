"""The evaluation of a Table 1 run: BLEU of every decoded run, means, spreads, significance."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

import numpy as np

from rescorer.experiments.actions import phrase_table_feature
from rescorer.experiments.bleu import bleu_from_totals, corpus_stats, sacrebleu_score
from rescorer.experiments.config import SYSTEMS, Table1Config
from rescorer.experiments.layout import Context, read_lines
from rescorer.experiments.models import read_model
from rescorer.experiments.significance import (
    gain_interval,
    mean_gain,
    pooled_randomization,
    shared_coin_randomization,
)
from rescorer.experiments.tools import multi_bleu
from rescorer.moses.ini import read_ini


def _mean_sd(values: Sequence[float]) -> tuple[float, float | None]:
    mean = statistics.fmean(values)
    return mean, (statistics.stdev(values) if len(values) > 1 else None)


def _new_weights(weights: dict[str, list[float]], feature: str, base_columns: int) -> list[float]:
    return weights.get(feature, [])[base_columns:]


def _versus(baseline: np.ndarray, system: np.ndarray, cfg: Table1Config) -> dict[str, Any]:
    """A system against the baseline: ``baseline`` and ``system`` are [K, S, STATS_WIDTH]."""
    pooled = pooled_randomization(baseline, system, trials=cfg.trials, seed=cfg.seed)
    shared = shared_coin_randomization(baseline, system, trials=cfg.trials, seed=cfg.seed)
    low, high = gain_interval(baseline, system, trials=cfg.trials, seed=cfg.seed)
    return {
        "delta": mean_gain(baseline, system),  # every replica of each system
        "interval": [low, high],
        "p": pooled.p_value,  # MultEval's test
        "reached": pooled.reached,
        "pooled_delta": pooled.delta,
        "p_shared_coin": shared.p_value,  # our first edition's test
        "reached_shared_coin": shared.reached,
        "trials": cfg.trials,
        "pairs": pooled.replicas,
    }


def evaluate(ctx: Context) -> dict[str, Any]:
    """BLEU of every decoded run, means and spreads, significance against (a)."""
    cfg, prep, records = ctx.cfg, ctx.paths.prepare, ctx.records
    refs = {part: read_lines(prep / f"{part}.ref") for part in ("dev", "test")}
    feature, _ = phrase_table_feature(read_ini(str(prep / "base.ini")), cfg.feature_name)
    base_columns = len(read_ini(str(prep / "base.ini")).weights()[feature])
    runs: list[dict[str, Any]] = []
    stats: dict[tuple[str, str], list[np.ndarray]] = {}
    signature = ""
    for run in range(1, cfg.runs + 1):
        for system in SYSTEMS:
            tuned_from = "b" if system == "d" else system
            tune = records[f"tune-{tuned_from}-{run}"]
            row: dict[str, Any] = {"system": system, "run": run, "seed": tune["seed"]}
            for part in ("dev", "test"):
                hyp_path = ctx.paths.hyp(system, run, part)
                hyps = read_lines(hyp_path)
                row[f"{part}_bleu"], signature = sacrebleu_score(hyps, refs[part])
                row[f"{part}_multi_bleu"] = multi_bleu(ctx.tools, prep / f"{part}.ref", hyp_path)
                stats.setdefault((system, part), []).append(corpus_stats(hyps, refs[part]))
            added = _new_weights(tune["weights"], feature, base_columns)
            row["rnn_weight"] = added[0] if system != "a" and added else None
            row["wp_weight"] = added[1] if system == "c" and len(added) > 1 else None
            row["weights"] = tune["weights"]
            row["iterations"] = tune["iterations"]
            row["table_lines"] = (
                records[f"prune-d-{run}"]["table_lines"]
                if system == "d"
                else records["filter"]["filtered_lines"]
            )
            row["tune_seconds"] = None if system == "d" else tune["seconds"]
            row["decode_seconds"] = records[f"decode-{system}-{run}"]["seconds"]
            runs.append(row)
    systems = []
    for system, name in SYSTEMS.items():
        rows = [r for r in runs if r["system"] == system]
        entry: dict[str, Any] = {"system": system, "name": name, "runs": len(rows)}
        for part in ("dev", "test"):
            entry[f"{part}_mean"], entry[f"{part}_sd"] = _mean_sd([r[f"{part}_bleu"] for r in rows])
            entry[f"{part}_multi_bleu_mean"], _ = _mean_sd([r[f"{part}_multi_bleu"] for r in rows])
            if system != "a":
                entry[f"{part}_vs_a"] = _versus(
                    np.stack(stats[("a", part)]), np.stack(stats[(system, part)]), cfg
                )
        # With --dev-lines, dev BLEU mixes sentences the weights were tuned on with unseen ones:
        # both halves separately (the baseline's starting weights may have seen all of dev).
        n_tune, n_dev = records["prepare"]["sentences"]["tune"], len(refs["dev"])
        if n_tune < n_dev:
            for part, rows_of in (
                ("dev_tuned", slice(0, n_tune)),
                ("dev_rest", slice(n_tune, None)),
            ):
                ours = np.stack(stats[(system, "dev")])[:, rows_of]  # [K, S', W]
                bleus = [float(bleu_from_totals(x.sum(axis=0))) for x in ours]
                entry[f"{part}_mean"], entry[f"{part}_sd"] = _mean_sd(bleus)
                if system != "a":
                    entry[f"{part}_vs_a"] = _versus(
                        np.stack(stats[("a", "dev")])[:, rows_of], ours, cfg
                    )
        for key in ("rnn_weight", "wp_weight"):
            values = [r[key] for r in rows if r[key] is not None]
            entry[f"{key}_mean"] = statistics.fmean(values) if values else None
        entry["table_lines"] = round(statistics.fmean(r["table_lines"] for r in rows))
        systems.append(entry)
    steps = {name: rec["seconds"] for name, rec in records.items()}
    assert ctx.model is not None
    model = {"model": str(ctx.model), **read_model(ctx.model).to_json()}
    return {
        "config": {**cfg.recorded(), "runs": cfg.runs, "threads": cfg.threads},
        "tuner": "MERT (mert-moses.pl, mert)" if cfg.tuner == "mert" else "batch MIRA (kbmira)",
        "sentences": records["prepare"]["sentences"],
        "tables": {
            "full_lines": records["filter"]["full_lines"],
            "filtered_lines": records["filter"]["filtered_lines"],
        },
        "model": model,
        "warnings": ctx.warnings,
        "sacrebleu_signature": signature,
        "systems": systems,
        "runs": runs,
        "step_seconds": steps,
        "significance": (
            "p: MultEval's approximate randomisation (Clark et al. 2011), each system's "
            "replicas pooled, one coin per (sentence, replica), pooled BLEU; p shared coin (ours): "
            "one coin per sentence for every replica pair, mean BLEU; both over the first "
            f"min(K) replica pairs, {cfg.trials} trials, p = (c+1)/(R+1); interval: bootstrap "
            f"95% of the mean gain over sentences and replicas, {cfg.trials} trials"
        ),
    }
