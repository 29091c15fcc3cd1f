"""The evaluation of a Table 1 run: BLEU of every decoded run, means, spreads, significance."""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from rescorer.errors import RescorerError
from rescorer.experiments.actions import phrase_table_feature
from rescorer.experiments.bleu import bleu_from_totals, corpus_stats, sacrebleu_score
from rescorer.experiments.breakdown import (
    Group,
    gains_by_group,
    length_groups,
    table_source_words,
    unknown_groups,
)
from rescorer.experiments.config import Table1Config
from rescorer.experiments.layout import Context, read_lines
from rescorer.experiments.new_pairs import (
    count_use,
    examples,
    new_pairs_used,
    read_pairs,
    read_segmentation,
)
from rescorer.experiments.power import T_METHOD
from rescorer.experiments.significance import (
    gain_interval,
    pooled_randomization,
    shared_coin_randomization,
)
from rescorer.experiments.systems import TUNERS, System, column_names
from rescorer.experiments.tools import multi_bleu
from rescorer.experiments.tuning_log import tuning_seconds
from rescorer.moses.ini import read_ini

PARTS = ("dev", "test")


def _mean_sd(values: Sequence[float]) -> tuple[float, float | None]:
    mean = statistics.fmean(values)
    return mean, (statistics.stdev(values) if len(values) > 1 else None)


def named_weights(
    weights: dict[str, list[float]], feature: str, base_columns: int, names: Sequence[str]
) -> dict[str, float]:
    """A tuned ini's weights, one per name: ``Feature`` for a feature of one weight,
    ``Feature[i]`` for the i-th of several, and the new columns of the phrase-table feature
    (past its ``base_columns``) by their own names (RNN, RNN inverse, WP), in the ini's order."""
    flat: dict[str, float] = {}
    for name, values in weights.items():
        for i, value in enumerate(values):
            if name == feature and base_columns <= i < base_columns + len(names):
                flat[names[i - base_columns]] = value
            else:
                flat[name if len(values) == 1 else f"{name}[{i}]"] = value
    return flat


def _means(rows: Sequence[dict[str, Any]], key: str, names: Iterable[str]) -> dict[str, float]:
    """Each named weight's mean over the runs, for the names every run has under ``key``."""
    return {
        name: statistics.fmean(r[key][name] for r in rows)
        for name in names
        if all(name in r[key] for r in rows)
    }


def _versus(baseline: np.ndarray, system: np.ndarray, cfg: Table1Config) -> dict[str, Any]:
    """A system against the baseline: ``baseline`` and ``system`` are [K, S, STATS_WIDTH]."""
    pooled = pooled_randomization(baseline, system, trials=cfg.trials, seed=cfg.seed)
    shared = shared_coin_randomization(baseline, system, trials=cfg.trials, seed=cfg.seed)
    interval = gain_interval(baseline, system, trials=cfg.trials, seed=cfg.seed)
    return {
        "delta": interval.delta,  # every replica of each system
        "interval": [interval.low, interval.high],
        "interval_method": T_METHOD,  # mean +- t(df) sqrt(v_s + runs_var): significance.py
        "sampling_var": interval.sampling_var,  # v_s, over the test sentences
        "runs_var": interval.runs_var,  # sd_a^2/K_a + sd_b^2/K_b
        "df": None if math.isinf(interval.df) else interval.df,  # JSON has no inf
        "p": pooled.p_value,  # MultEval's test
        "reached": pooled.reached,
        "pooled_delta": pooled.delta,
        "p_shared_coin": shared.p_value,  # our first edition's test
        "reached_shared_coin": shared.reached,
        "trials": cfg.trials,
        "pairs": pooled.replicas,
    }


def evaluate(ctx: Context) -> dict[str, Any]:
    """BLEU of every decoded run, means and spreads, each system against its baseline."""
    cfg, prep, records = ctx.cfg, ctx.paths.prepare, ctx.records
    refs = {part: read_lines(prep / f"{part}.ref") for part in PARTS}
    feature, _ = phrase_table_feature(read_ini(str(prep / "base.ini")), cfg.feature_name)
    base_columns = len(read_ini(str(prep / "base.ini")).weights()[feature])
    runs, stats, signature, tuning_times = _score_runs(ctx, refs, feature, base_columns)
    n_tune = records["prepare"]["sentences"]["tune"]
    start = (
        f"shipped weights of {cfg.system / 'moses.ini'}"
        if cfg.start_weights is None
        else f"weights of {cfg.start_weights} (--start-weights), not the system's own,"
    )
    sources = read_lines(prep / "test.src")
    groups = length_groups(sources) + unknown_groups(
        sources, table_source_words(str(ctx.paths.filter / "phrase-table.gz"))
    )
    systems = [
        _system_entry(
            ctx, system, [r for r in runs if r["system"] == system.key], stats, n_tune, groups
        )
        for system in ctx.systems
    ]
    models = []
    for label in ctx.models:
        users = [s.key for s in ctx.systems if label in s.models]
        models.append({"label": label, **ctx.infos[label].to_json(), "systems": users})
    tuners = sorted({s.tuner for s in ctx.systems}, key=list(TUNERS).index)
    return {
        "config": cfg.settings(),
        "tuners": {t: TUNERS[t] for t in tuners},
        "start": (
            f"every tuned system starts from the {start} "
            f"and {cfg.new_weight:g} for each new column, and tunes on dev sentences 1-{n_tune}"
        ),
        "sentences": records["prepare"]["sentences"],
        "tables": {
            "phrase_table": records["filter"]["phrase_table"],
            "phrase_table_sha256": records["filter"].get("phrase_table_sha256"),
            "full_lines": records["filter"]["full_lines"],
            "filtered_lines": records["filter"]["filtered_lines"],
        },
        "best": ctx.best,
        "models": models,
        "sacrebleu_signature": signature,
        "systems": systems,
        "runs": runs,
        "step_seconds": {
            name: tuning_times.get(name, rec["seconds"]) for name, rec in records.items()
        },
        "significance": (
            "p: MultEval's approximate randomisation (Clark et al. 2011), each system's "
            "replicas pooled, one coin per (sentence, replica), pooled BLEU; p shared coin (ours): "
            "one coin per sentence for every replica pair, mean BLEU; both over the first "
            f"min(K) replica pairs, {cfg.trials} trials, p = (c+1)/(R+1) (both hold the runs "
            "fixed: test-set sampling only); interval: 95% of the mean gain, mean +- t(df) * "
            "sqrt(v_s + sd_a^2/K_a + sd_b^2/K_b), v_s the variance over a bootstrap of the test "
            f"sentences ({cfg.trials} trials), sd the sample sd over each system's runs, df "
            "Welch-Satterthwaite's (the tuner's spread taken in)"
        ),
        "warnings": list(ctx.warnings),
    }


def _score_runs(
    ctx: Context, refs: dict[str, list[str]], feature: str, base_columns: int
) -> tuple[list[dict[str, Any]], dict[tuple[str, str], list[np.ndarray]], str, dict[str, float]]:
    """Every decoded run's row (BLEU both ways, weights, table size, times), the BLEU
    statistics of each (system, part) over its runs, sacreBLEU's signature and each tuning
    step's whole time (continued ones included)."""
    runs: list[dict[str, Any]] = []
    stats: dict[tuple[str, str], list[np.ndarray]] = {}  # (system, part) -> K x [S, W]
    signature = ""
    tuning_times: dict[str, float] = {}  # a tuning step's whole time, continued ones included
    for system in ctx.systems:
        names = column_names(system, ctx.models)
        for run in range(1, system.runs + 1):
            row, signature = _run_row(ctx, system, run, refs, stats)
            tune_step = f"tune-{system.pruned_from or system.key}-{run}"
            tune = ctx.records[tune_step]
            named = named_weights(tune["weights"], feature, base_columns, names)
            row["new_weights"] = {name: named[name] for name in names if name in named}
            row["weights"] = tune["weights"]
            row["named_weights"] = named
            row["iterations"] = tune["iterations"]
            row["table_lines"] = _table_lines(ctx, system, run)
            row["tune_seconds"] = None
            if system.tuned:  # tuned_from is its own key
                row["tune_seconds"], problem = tuning_seconds(ctx.paths.root / tune_step, tune)
                tuning_times[tune_step] = row["tune_seconds"]
                if tune.get("continued_after_iteration"):
                    row["continued_after_iteration"] = tune["continued_after_iteration"]
                if problem is not None:  # its last invocation's time: a lower bound
                    row["tune_seconds_lower_bound"] = True
                    ctx.warnings.append(f"{problem}: its tuning time is its last invocation's")
            row["decode_seconds"] = ctx.records[f"decode-{system.key}-{run}"]["seconds"]
            runs.append(row)
    return runs, stats, signature, tuning_times


def _run_row(
    ctx: Context,
    system: System,
    run: int,
    refs: dict[str, list[str]],
    stats: dict[tuple[str, str], list[np.ndarray]],
) -> tuple[dict[str, Any], str]:
    """A run's row begun: its BLEU on each part (sacreBLEU's and multi-bleu.perl's), its
    statistics added to ``stats``; and sacreBLEU's signature."""
    prep = ctx.paths.prepare
    tune = ctx.records[f"tune-{system.pruned_from or system.key}-{run}"]
    row: dict[str, Any] = {"system": system.key, "run": run, "seed": tune["seed"]}
    signature = ""
    for part in PARTS:
        hyp_path = ctx.paths.hyp(system.key, run, part)
        hyps = read_lines(hyp_path)
        if len(hyps) != len(refs[part]):  # damaged after its step's check
            raise RescorerError(
                f"{hyp_path}: {len(hyps)} lines, expected {len(refs[part])} (one per "
                f"{part} sentence): remove {hyp_path.parent} and run the same command "
                f"again to redo step {hyp_path.parent.name}"
            )
        row[f"{part}_bleu"], signature = sacrebleu_score(hyps, refs[part])
        row[f"{part}_multi_bleu"] = multi_bleu(ctx.tools, prep / f"{part}.ref", hyp_path)
        stats.setdefault((system.key, part), []).append(corpus_stats(hyps, refs[part]))
    return row, signature


def _table_lines(ctx: Context, system: System, run: int) -> Any:
    """The lines of the phrase table a run tuned with: (d)'s pruned one, (f)'s extended one,
    or the filtered table."""
    if system.pruned_from:
        return ctx.records[f"prune-{system.key}-{run}"]["table_lines"]
    if system.extend_step:
        return ctx.records[system.extend_step]["table_lines"]
    return ctx.records["filter"]["filtered_lines"]


def _system_entry(
    ctx: Context,
    system: System,
    rows: list[dict[str, Any]],
    stats: dict[tuple[str, str], list[np.ndarray]],
    n_tune: int,
    groups: Sequence[Group],
) -> dict[str, Any]:
    """A system's line of the table: means, spreads, the tests against its baseline, and its
    test gain in each group of test sentences."""
    entry: dict[str, Any] = {
        "system": system.key,
        "letter": system.letter,
        "name": system.name,
        "tuner": system.tuner,
        "runs": len(rows),
        "models": list(system.models),
        "baseline": system.baseline,
        "second_baseline": system.second_baseline,
    }
    base = system.baseline
    for part in PARTS:
        entry[f"{part}_mean"], entry[f"{part}_sd"] = _mean_sd([r[f"{part}_bleu"] for r in rows])
        entry[f"{part}_multi_bleu_mean"], _ = _mean_sd([r[f"{part}_multi_bleu"] for r in rows])
        if base is not None:
            entry[f"{part}_vs_baseline"] = _versus(
                np.stack(stats[(base, part)]), np.stack(stats[(system.key, part)]), ctx.cfg
            )
        if system.second_baseline is not None:
            entry[f"{part}_vs_second_baseline"] = _versus(
                np.stack(stats[(system.second_baseline, part)]),
                np.stack(stats[(system.key, part)]),
                ctx.cfg,
            )
    # With --dev-lines, dev BLEU mixes sentences the weights were tuned on with unseen ones:
    # both halves separately (the baseline's starting weights may have seen all of dev).
    n_dev = len(stats[(system.key, "dev")][0])
    if n_tune < n_dev:
        for part, rows_of in (("dev_tuned", slice(0, n_tune)), ("dev_rest", slice(n_tune, None))):
            ours = np.stack(stats[(system.key, "dev")])[:, rows_of]  # [K, S', W]
            bleus = [float(bleu_from_totals(x.sum(axis=0))) for x in ours]
            entry[f"{part}_mean"], entry[f"{part}_sd"] = _mean_sd(bleus)
            if base is not None:
                theirs = np.stack(stats[(base, "dev")])[:, rows_of]
                entry[f"{part}_vs_baseline"] = _versus(theirs, ours, ctx.cfg)
    if base is not None:
        entry["test_by_group"] = gains_by_group(
            np.stack(stats[(base, "test")]),
            np.stack(stats[(system.key, "test")]),
            groups,
            trials=ctx.cfg.trials,
            seed=ctx.cfg.seed,
        )
    entry["new_weight_means"] = _means(rows, "new_weights", column_names(system, ctx.models))
    # Which features moved: every weight's mean over the runs (each run's ini as its tuner
    # wrote it; mert-moses.pl normalises the weights to sum 1 in absolute value).
    entry["weight_means"] = _means(rows, "named_weights", rows[0]["named_weights"])
    entry["table_lines"] = round(statistics.fmean(r["table_lines"] for r in rows))
    # Replicas that reached the same weights (seeds aside) add no tuner spread: the interval
    # then measures the test sentences' sampling error alone (Clark et al. 2011's caveat).
    entry["distinct_weights"] = len({json.dumps(r["weights"], sort_keys=True) for r in rows})
    if system.extended:
        entry["new_pairs"] = _new_pair_use(ctx, system)
    return entry


def _new_pair_use(ctx: Context, system: System) -> dict[str, Any]:
    """(f): the generated pairs its test 1-best used, run by run (-report-segmentation), and
    examples from run 1 against run 1 of its second baseline, (b)."""
    assert system.extend_step is not None and system.second_baseline is not None
    prep, record = ctx.paths.prepare, ctx.records[system.extend_step]
    generated = read_pairs(ctx.paths.generated_pairs(system))
    sources, refs = read_lines(prep / "test.src"), read_lines(prep / "test.ref")
    runs, first_used = [], None
    for run in range(1, system.runs + 1):
        seg = ctx.paths.segmentation(system.key, run)
        used = [
            new_pairs_used(src, read_segmentation(line, where=f"{seg}:{i}"), generated)
            for i, (src, line) in enumerate(zip(sources, read_lines(seg), strict=True), 1)
        ]
        runs.append({"run": run, **count_use(used)})
        if run == 1:
            first_used = used
    assert first_used is not None
    hyps = read_lines(ctx.paths.hyp(system.key, 1, "test"))
    versus = read_lines(ctx.paths.hyp(system.second_baseline, 1, "test"))
    return {
        "generated_pairs": record["generated_pairs"],
        "generated_sources": record["generated_sources"],
        "test_sentences": len(sources),
        "runs": runs,
        "mean": {
            k: statistics.fmean(r[k] for r in runs) for k in ("sentences", "pairs", "distinct")
        },
        "examples": examples(sources, refs, hyps, versus, first_used),
    }
