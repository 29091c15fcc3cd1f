"""The paper's Table 1 on a real Moses system: does the RNN column raise BLEU after tuning?

Cho et al. (2014), Table 1: a tuned phrase-based baseline against the same system with the RNN
Encoder-Decoder's log p(target|source) as one more phrase-table feature (+RNN), and with the
paper's word penalty for out-of-shortlist words (+RNN+WP). We add (d): the +RNN table pruned to
the top K targets per source by (b)'s tuned log-linear score, decoded with those weights.

Every system is tuned K times (mert-moses.pl, fresh working directory, a recorded seed each) and
then decodes dev and test; BLEU is sacreBLEU's (``--tokenize none``) and multi-bleu.perl's, and
each system is tested against the baseline by approximate randomisation over the replicas
(:mod:`rescorer.experiments.bleu`). Each step runs in its own folder of the work directory and
is skipped once complete (:mod:`rescorer.experiments.steps`), so a killed run goes on where it
stopped. The rescorer parts run as ``python -m rescorer`` subprocesses, exactly the commands a
user types; Moses' decoder, tuner and BLEU script are the real ones.

System folder (like ``../shared/data/en-fr``): ``moses.ini`` (relative paths resolved against
its folder), the tables and LM it names, ``dev.SRC dev.TGT test.SRC test.TGT``.
"""

from __future__ import annotations

import gzip
import json
import math
import os
import re
import shutil
import statistics
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from rescorer.errors import RescorerError
from rescorer.experiments.bleu import (
    approximate_randomization,
    bleu_from_totals,
    corpus_stats,
    sacrebleu_score,
)
from rescorer.experiments.steps import Step, StepError, WorkDir
from rescorer.io.files import write_json, write_text
from rescorer.moses.ini import (
    MosesIni,
    absolute_paths,
    pick_table_feature,
    read_ini,
    with_feature_paths,
)

SYSTEMS = {
    "a": "baseline",
    "b": "+RNN",
    "c": "+RNN+WP",
    "d": "+RNN, top-K table",
}
TUNED = ("a", "b", "c")  # (d) reuses (b)'s tuned weights
REORDERING = "LexicalReordering"
TUNERS = ("mert", "mira")
# Settings that change results: a work directory made with other values is refused.
RESULT_KEYS = (
    "system",
    "model",
    "train_budget",
    "train_args",
    "score_args",
    "dev_lines",
    "max_iterations",
    "tuner",
    "top_k",
    "new_weight",
    "seed",
    "src",
    "tgt",
    "feature_name",
)


@dataclass(frozen=True)
class MosesTools:
    """The prebuilt Moses toolkit: decoder, tuning binaries and Moses' scripts."""

    root: Path

    @property
    def moses(self) -> Path:
        return self.root / "bin" / "moses"

    @property
    def mertdir(self) -> Path:
        return self.root / "bin"

    @property
    def mert_moses(self) -> Path:
        return self.root / "scripts" / "training" / "mert-moses.pl"

    @property
    def multi_bleu(self) -> Path:
        return self.root / "scripts" / "generic" / "multi-bleu.perl"

    def check(self) -> None:
        for path in (self.moses, self.mertdir / "mert", self.mert_moses, self.multi_bleu):
            if not path.exists():
                raise RescorerError(f"--moses {self.root}: {path} is missing (a Moses toolkit?)")


@dataclass(frozen=True)
class Table1Config:
    """What ``scripts/table1.py`` runs; every field is recorded in results.json."""

    system: Path
    work: Path
    moses: Path
    model: Path | None = None  # a rescorer model directory, or train one with train_budget
    train_budget: str | None = None  # --max-time of `rescorer train`, e.g. 2h
    train_args: tuple[str, ...] = ()  # more `rescorer train` flags, e.g. --hidden-size 256
    score_args: tuple[str, ...] = ()  # more `rescorer score` flags, e.g. --precision fp32
    runs: int = 3  # K tuning runs per system
    dev_lines: int | None = None  # tune on the first N dev sentences (None: all)
    max_iterations: int = 10  # mert-moses.pl --maximum-iterations
    tuner: str = "mert"  # mert or mira (mert-moses.pl --batch-mira)
    top_k: int = 5  # system (d): targets kept per source
    new_weight: float = 0.05  # tuning starts the RNN (and WP) weight here (moses-ini --weight)
    threads: int = 2  # decoder threads
    seed: int = 1  # run r of every system uses tuner seed seed * 1000 + r
    src: str = "en"
    tgt: str = "fr"
    feature_name: str | None = None  # the phrase-table feature when the ini has several
    trials: int = 10000  # approximate randomisation trials

    def tuner_seed(self, run: int) -> int:
        return self.seed * 1000 + run

    def recorded(self) -> dict[str, Any]:
        """The settings that change results, as plain JSON values."""
        data = asdict(self)
        return {
            k: (str(v) if isinstance(v, Path) else list(v) if isinstance(v, tuple) else v)
            for k, v in data.items()
            if k in RESULT_KEYS
        }


@dataclass
class _Layout:
    """Paths of the files the steps pass to each other."""

    root: Path

    @property
    def prepare(self) -> Path:
        return self.root / "prepare"

    @property
    def filter(self) -> Path:
        return self.root / "filter"

    def tuned_ini(self, system: str, run: int) -> Path:
        return self.root / f"tune-{system}-{run}" / "tuned.ini"

    def decode_ini(self, system: str, run: int) -> Path:
        if system == "d":
            return self.root / f"prune-d-{run}" / "d.ini"
        return self.tuned_ini(system, run)

    def hyp(self, system: str, run: int, part: str) -> Path:
        return self.root / f"decode-{system}-{run}" / f"{part}.hyp"


@dataclass
class _Context:
    cfg: Table1Config
    tools: MosesTools
    paths: _Layout
    work: WorkDir
    model: Path | None = None
    records: dict[str, dict[str, Any]] = field(default_factory=dict)


def rescorer_argv(*args: str | os.PathLike[str]) -> list[str]:
    """``python -m rescorer ...`` with this interpreter (the same installation)."""
    return [sys.executable, "-m", "rescorer", *(os.fspath(a) for a in args)]


def count_lines(path: Path) -> int:
    """Lines of a plain or gzip file."""
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rb") as f:
        return sum(1 for _ in f)


def read_lines(path: Path) -> list[str]:
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


def check_config(cfg: Table1Config) -> None:
    if (cfg.model is None) == (cfg.train_budget is None):
        raise RescorerError("give a model directory (--model) or --train BUDGET, not both")
    if cfg.runs < 1:
        raise RescorerError(f"--runs {cfg.runs}: expected at least 1 tuning run per system")
    if cfg.tuner not in TUNERS:
        raise RescorerError(f"--tuner {cfg.tuner}: expected one of {', '.join(TUNERS)}")
    if cfg.dev_lines is not None and cfg.dev_lines < 1:
        raise RescorerError(f"--dev-lines {cfg.dev_lines}: expected a positive count")
    if cfg.top_k < 1 or cfg.max_iterations < 1 or cfg.threads < 1:
        raise RescorerError("--top-k, --max-iterations and --threads must be positive")
    if cfg.model is not None and not (cfg.model / "config.json").is_file():
        raise RescorerError(f"--model {cfg.model}: not a rescorer model directory (no config.json)")
    if not (cfg.system / "moses.ini").is_file():
        raise RescorerError(f"{cfg.system}: no moses.ini (expected a Moses system folder)")
    for part in ("dev", "test"):
        for lang in (cfg.src, cfg.tgt):
            path = cfg.system / f"{part}.{lang}"
            if not path.is_file():
                raise RescorerError(f"{cfg.system}: no {path.name} (expected dev/test source/ref)")


def _check_work_dir(cfg: Table1Config) -> None:
    """Refuse to go on in a work directory made with settings that change results."""
    path = cfg.work / "config.json"
    if path.is_file():
        with open(path, encoding="utf-8") as f:
            old = json.load(f)
        changed = [k for k in RESULT_KEYS if old.get(k) != cfg.recorded().get(k)]
        if changed:
            raise RescorerError(
                f"{cfg.work} was made with other settings ({', '.join(changed)}): "
                "use a new --work folder or the same settings"
            )
    else:
        cfg.work.mkdir(parents=True, exist_ok=True)
        write_json(path, cfg.recorded())


def run_table1(cfg: Table1Config) -> dict[str, Any]:
    """Run every step not yet complete, then evaluate; returns what results.json holds."""
    check_config(cfg)
    tools = MosesTools(cfg.moses.resolve())
    tools.check()
    cfg = _absolute(cfg)
    _check_work_dir(cfg)
    ctx = _Context(cfg, tools, _Layout(cfg.work), WorkDir(cfg.work))
    step = ctx.work.step
    ctx.records["prepare"] = step("prepare", partial(_prepare, ctx))
    if cfg.train_budget is not None:
        ctx.records["train"] = step("train", partial(_train, ctx), keep_partial=True)
        ctx.model = cfg.work / "train" / "model"
    else:
        ctx.model = cfg.model
    ctx.records["filter"] = step("filter", partial(_filter, ctx))
    for name, wp in (("score-rnn", False), ("score-rnn-wp", True)):
        ctx.records[name] = step(name, partial(_score, ctx, word_penalty=wp))
    for run in range(1, cfg.runs + 1):  # replica by replica: a cut-short run has whole rows
        for system in TUNED:
            name = f"tune-{system}-{run}"
            ctx.records[name] = step(name, partial(_tune, ctx, system=system, run=run))
            name = f"decode-{system}-{run}"
            ctx.records[name] = step(name, partial(_decode, ctx, system=system, run=run))
        name = f"prune-d-{run}"
        ctx.records[name] = step(name, partial(_prune, ctx, run=run))
        name = f"decode-d-{run}"
        ctx.records[name] = step(name, partial(_decode, ctx, system="d", run=run))
    results = evaluate(ctx)
    write_json(cfg.work / "results.json", results)
    write_text(cfg.work / "results.md", results_markdown(results))
    ctx.work.say(f"table1: wrote {cfg.work / 'results.json'} and {cfg.work / 'results.md'}")
    return results


def _absolute(cfg: Table1Config) -> Table1Config:
    from dataclasses import replace

    return replace(
        cfg,
        system=cfg.system.resolve(),
        work=cfg.work.resolve(),
        moses=cfg.moses.resolve(),
        model=cfg.model.resolve() if cfg.model is not None else None,
    )


# --- steps -----------------------------------------------------------------------------------


def _prepare(ctx: _Context, step: Step) -> dict[str, Any]:
    """base.ini with absolute paths; the dev, tuning and test sets; dev+test for filtering."""
    cfg, out = ctx.cfg, step.folder
    ini = read_ini(str(cfg.system / "moses.ini"))
    write_text(out / "base.ini", absolute_paths(ini))
    sets: dict[str, int] = {}
    for part in ("dev", "test"):
        src = read_lines(cfg.system / f"{part}.{cfg.src}")
        ref = read_lines(cfg.system / f"{part}.{cfg.tgt}")
        if len(src) != len(ref):
            raise StepError(
                f"step prepare: {part}.{cfg.src} has {len(src)} lines, "
                f"{part}.{cfg.tgt} has {len(ref)}: expected parallel files"
            )
        shutil.copyfile(cfg.system / f"{part}.{cfg.src}", out / f"{part}.src")
        shutil.copyfile(cfg.system / f"{part}.{cfg.tgt}", out / f"{part}.ref")
        sets[part] = len(src)
    dev_src, dev_ref = read_lines(out / "dev.src"), read_lines(out / "dev.ref")
    n = len(dev_src) if cfg.dev_lines is None else min(cfg.dev_lines, len(dev_src))
    write_text(out / "tune.src", "".join(f"{line}\n" for line in dev_src[:n]))
    write_text(out / "tune.ref", "".join(f"{line}\n" for line in dev_ref[:n]))
    with open(out / "devtest.src", "wb") as f:
        for part in ("dev", "test"):
            f.write((out / f"{part}.src").read_bytes())
    sets["tune"] = n
    return {"sentences": sets}


def _train(ctx: _Context, step: Step) -> dict[str, Any]:
    """`rescorer train` on the system's phrase table; a killed training run is resumed."""
    cfg = ctx.cfg
    model = step.folder / "model"
    table = _phrase_table(ctx)
    argv = rescorer_argv(
        "train", table, "-o", model, "--max-time", str(cfg.train_budget), *cfg.train_args
    )
    if (model / "train-state.pt").is_file():
        argv.append("--resume")
    step.run(argv)
    return {"model": str(model), **_model_summary(model)}


def _phrase_table(ctx: _Context) -> Path:
    ini = read_ini(str(ctx.paths.prepare / "base.ini"))
    return Path(_phrase_table_feature(ini, ctx.cfg.feature_name)[1])


def _phrase_table_feature(ini: MosesIni, feature_name: str | None) -> tuple[str, str]:
    """The name and the table path of the phrase table the experiment scores."""
    feature = pick_table_feature(ini, feature_name)
    path = feature.get("path")
    if path is None or feature.kind != "PhraseDictionaryMemory":
        raise StepError(
            f"{ini.path}:{feature.lineno}: {feature.name} is a {feature.kind}; the experiment "
            "needs a text phrase table (PhraseDictionaryMemory with path=)"
        )
    return feature.name, ini.resolve(path)


def _filter(ctx: _Context, step: Step) -> dict[str, Any]:
    """Phrase and reordering tables filtered to dev+test by `rescorer filter --input`."""
    cfg, out, prep = ctx.cfg, step.folder, ctx.paths.prepare
    base = read_ini(str(prep / "base.ini"))
    name, table = _phrase_table_feature(base, cfg.feature_name)
    step.need(Path(table))
    step.run(
        rescorer_argv(
            "filter", table, "--input", prep / "devtest.src", "--moses-ini", prep / "base.ini",
            "--feature-name", name, "--ini-out", out / "a.ini", "-o", out / "phrase-table.gz",
        )
    )  # fmt: skip
    reordering: dict[str, str] = {}
    for i, feature in enumerate(base.features_of_kind(REORDERING)):
        path = feature.get("path")
        if path is None:
            continue
        source = Path(base.resolve(path))
        if not source.is_file() and Path(f"{source}.gz").is_file():
            source = Path(f"{source}.gz")  # Moses also tries the name with .gz
        if not source.is_file():
            if Path(f"{source}.minlexr").is_file():
                continue  # a compact (binarised) table: used as it is
            raise StepError(f"step filter: missing {source}, the table of {feature.name}")
        target = out / f"reordering-{i}.gz"
        step.run(rescorer_argv("filter", source, "--input", prep / "devtest.src", "-o", target))
        reordering[feature.name] = str(target)
    if reordering:
        write_text(out / "a.ini", with_feature_paths(read_ini(str(out / "a.ini")), reordering))
    return {
        "phrase_table": table,
        "full_lines": count_lines(Path(table)),
        "filtered_lines": count_lines(out / "phrase-table.gz"),
        "reordering_tables": reordering,
    }


def _score(ctx: _Context, step: Step, *, word_penalty: bool) -> dict[str, Any]:
    """`rescorer score` on the filtered table, then `rescorer moses-ini` for (b) or (c)."""
    assert ctx.model is not None
    out, filtered = step.folder, ctx.paths.filter
    suffix = "rnn-wp" if word_penalty else "rnn"
    table = out / f"phrase-table.{suffix}.gz"
    flags = ["--word-penalty"] if word_penalty else []
    step.run(
        rescorer_argv(
            "score", filtered / "phrase-table.gz", "-m", ctx.model, "-o", table, "-q",
            *flags, *ctx.cfg.score_args,
        )
    )  # fmt: skip
    ini = out / ("c.ini" if word_penalty else "b.ini")
    weights = [str(ctx.cfg.new_weight)] * (2 if word_penalty else 1)
    step.run(
        rescorer_argv(
            "moses-ini", filtered / "a.ini", "--phrase-table", table, "-o", ini,
            *(arg for w in weights for arg in ("--new-weight", w)),
        )
    )  # fmt: skip
    return {"table": str(table), "ini": str(ini), "model": str(ctx.model)}


def _system_ini(ctx: _Context, system: str) -> Path:
    return {
        "a": ctx.paths.filter / "a.ini",
        "b": ctx.paths.root / "score-rnn" / "b.ini",
        "c": ctx.paths.root / "score-rnn-wp" / "c.ini",
    }[system]


def _tune(ctx: _Context, step: Step, *, system: str, run: int) -> dict[str, Any]:
    """mert-moses.pl in a fresh working directory, with this replica's seed."""
    cfg, tools, prep = ctx.cfg, ctx.tools, ctx.paths.prepare
    ini = _system_ini(ctx, system)
    step.need(ini, prep / "tune.src", prep / "tune.ref")
    seed = cfg.tuner_seed(run)
    argv: list[str | os.PathLike[str]] = [
        "perl", tools.mert_moses, prep / "tune.src", prep / "tune.ref", tools.moses, ini,
        "--mertdir", tools.mertdir, "--decoder-flags", f"-threads {cfg.threads}",
        "--working-dir", step.folder / "mert", "--maximum-iterations", str(cfg.max_iterations),
        "--no-filter-phrase-table",
    ]  # fmt: skip
    if cfg.tuner == "mira":
        argv += ["--batch-mira", "--batch-mira-args", f"--random-seed {seed}"]
    else:
        argv += ["--mertmertargs", f"-r {seed} "]  # mert-moses.pl appends "--sctype" unspaced
    step.run(argv, cwd=step.folder)
    tuned = step.folder / "mert" / "moses.ini"
    step.need(tuned)
    shutil.copyfile(tuned, step.folder / "tuned.ini")
    iterations = len(list((step.folder / "mert").glob("run*.moses.ini")))
    return {"seed": seed, "iterations": iterations, "weights": _weights(step.folder / "tuned.ini")}


def _weights(ini_path: Path) -> dict[str, list[float]]:
    return {k: list(v) for k, v in read_ini(str(ini_path)).weights().items()}


def _decode(ctx: _Context, step: Step, *, system: str, run: int) -> dict[str, Any]:
    """The real decoder on dev and test with the tuned ini."""
    cfg, prep = ctx.cfg, ctx.paths.prepare
    ini = ctx.paths.decode_ini(system, run)
    step.need(ini)
    lines = {}
    for part in ("dev", "test"):
        hyp = step.folder / f"{part}.hyp"
        step.run(
            [ctx.tools.moses, "-f", ini, "-threads", str(cfg.threads)],
            stdin=prep / f"{part}.src",
            stdout=hyp,
        )
        lines[part] = count_lines(hyp)
        expected = count_lines(prep / f"{part}.src")
        if lines[part] != expected:
            raise StepError(
                f"step {step.name}: the decoder wrote {lines[part]} lines for {expected} "
                f"{part} sentences; see {step.log}"
            )
    return {"ini": str(ini), "lines": lines}


def _prune(ctx: _Context, step: Step, *, run: int) -> dict[str, Any]:
    """(d): the +RNN table cut to the top K per source by (b)'s tuned score (`filter --top-k`)."""
    tuned = ctx.paths.tuned_ini("b", run)
    table = ctx.paths.root / "score-rnn" / "phrase-table.rnn.gz"
    step.need(tuned, table)
    pruned = step.folder / "phrase-table.gz"
    step.run(
        rescorer_argv(
            "filter", table, "--top-k", str(ctx.cfg.top_k), "--weights", tuned,
            "--ini-out", step.folder / "d.ini", "-o", pruned,
        )
    )  # fmt: skip
    return {"table_lines": count_lines(pruned), "ini": str(step.folder / "d.ini")}


# --- evaluation ------------------------------------------------------------------------------


def multi_bleu(tools: MosesTools, ref: Path, hyp: Path) -> float:
    """BLEU by Moses' multi-bleu.perl (``BLEU = 65.56, ...``)."""
    import subprocess

    with open(hyp, "rb") as f:
        proc = subprocess.run(
            ["perl", str(tools.multi_bleu), str(ref)], stdin=f, capture_output=True, check=False
        )
    match = re.search(rb"BLEU = ([0-9.]+)", proc.stdout)
    if proc.returncode != 0 or match is None:
        raise RescorerError(f"multi-bleu.perl failed on {hyp}: {proc.stderr.decode()[-300:]}")
    return float(match.group(1))


def _model_summary(model: Path) -> dict[str, Any]:
    """Size, updates, time and best validation perplexity of a model directory."""
    summary: dict[str, Any] = {}
    config_path = model / "config.json"
    if config_path.is_file():
        with open(config_path, encoding="utf-8") as f:
            summary["model_config"] = json.load(f).get("model")
    log = model / "train.log.jsonl"
    if log.is_file():
        best, last = None, None
        with open(log, encoding="utf-8") as f:
            for line in f:
                record = json.loads(line)
                last = record
                if "valid_ppl" in record and (
                    best is None or record["valid_ppl"] < best["valid_ppl"]
                ):
                    best = record
        if last is not None:
            summary["updates"] = last.get("update")
            summary["train_seconds"] = last.get("time")
        if best is not None:
            summary["best_valid_ppl"] = best["valid_ppl"]
            summary["unigram_ppl"] = best.get("unigram_ppl")
            summary["best_update"] = best["update"]
    return summary


def _mean_sd(values: Sequence[float]) -> tuple[float, float | None]:
    mean = statistics.fmean(values)
    return mean, (statistics.stdev(values) if len(values) > 1 else None)


def _new_weights(weights: dict[str, list[float]], feature: str, base_columns: int) -> list[float]:
    return weights.get(feature, [])[base_columns:]


def evaluate(ctx: _Context) -> dict[str, Any]:
    """BLEU of every decoded run, means and spreads, significance against (a)."""
    cfg, prep, records = ctx.cfg, ctx.paths.prepare, ctx.records
    refs = {part: read_lines(prep / f"{part}.ref") for part in ("dev", "test")}
    feature, _ = _phrase_table_feature(read_ini(str(prep / "base.ini")), cfg.feature_name)
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
                sig = approximate_randomization(
                    np.stack(stats[("a", part)]),
                    np.stack(stats[(system, part)]),
                    trials=cfg.trials,
                    seed=cfg.seed,
                )
                entry[f"{part}_vs_a"] = {"delta": sig.delta, "p": sig.p_value, "trials": sig.trials}
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
                    sig = approximate_randomization(
                        np.stack(stats[("a", "dev")])[:, rows_of], ours, trials=cfg.trials,
                        seed=cfg.seed,
                    )  # fmt: skip
                    entry[f"{part}_vs_a"] = {"delta": sig.delta, "p": sig.p_value}
        for key in ("rnn_weight", "wp_weight"):
            values = [r[key] for r in rows if r[key] is not None]
            entry[f"{key}_mean"] = statistics.fmean(values) if values else None
        entry["table_lines"] = round(statistics.fmean(r["table_lines"] for r in rows))
        systems.append(entry)
    steps = {name: rec["seconds"] for name, rec in records.items()}
    model = records["train"] if "train" in records else {"model": str(ctx.model)}
    if ctx.model is not None:
        model = {**model, **_model_summary(ctx.model)}
    return {
        "config": {**cfg.recorded(), "runs": cfg.runs, "threads": cfg.threads},
        "tuner": "MERT (mert-moses.pl, mert)" if cfg.tuner == "mert" else "batch MIRA (kbmira)",
        "sentences": records["prepare"]["sentences"],
        "tables": {
            "full_lines": records["filter"]["full_lines"],
            "filtered_lines": records["filter"]["filtered_lines"],
        },
        "model": model,
        "sacrebleu_signature": signature,
        "systems": systems,
        "runs": runs,
        "step_seconds": steps,
        "significance": (
            "approximate randomisation over the K replica pairs (Clark et al. 2011), "
            f"{cfg.trials} trials, p = (c+1)/(R+1)"
        ),
    }


def _fmt(value: float | None, spec: str = ".2f") -> str:
    return (
        "–"
        if value is None or (isinstance(value, float) and math.isnan(value))
        else format(value, spec)
    )


def results_markdown(results: dict[str, Any]) -> str:
    """The summary table and the per-run table of results.json, in Markdown."""
    cfg, sents = results["config"], results["sentences"]
    lines = [
        f"Tuner: {results['tuner']}, {cfg['runs']} run(s) per system, tuned on "
        f"{sents['tune']} of {sents['dev']} dev sentences, test {sents['test']} sentences; "
        f"BLEU = sacreBLEU ({results['sacrebleu_signature']}); ± = sample standard deviation "
        f"over runs; p = {results['significance']}.",
        "",
        "| system | table lines | dev BLEU | test BLEU | Δ test vs (a) | p (test) | Δ dev vs (a) "
        "| p (dev) | RNN weight | WP weight |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for s in results["systems"]:
        test_sig, dev_sig = s.get("test_vs_a"), s.get("dev_vs_a")
        lines.append(
            f"| ({s['system']}) {s['name']} | {s['table_lines']:,} "
            f"| {_fmt(s['dev_mean'])} ± {_fmt(s['dev_sd'])} "
            f"| {_fmt(s['test_mean'])} ± {_fmt(s['test_sd'])} "
            f"| {_fmt(test_sig['delta'], '+.2f') if test_sig else '–'} "
            f"| {_fmt(test_sig['p'], '.3f') if test_sig else '–'} "
            f"| {_fmt(dev_sig['delta'], '+.2f') if dev_sig else '–'} "
            f"| {_fmt(dev_sig['p'], '.3f') if dev_sig else '–'} "
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
                    _fmt(sig["p"], ".3f") if sig else "–",
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
