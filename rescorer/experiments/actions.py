"""The steps of a Table 1 run: prepare, train, filter, score, extend, tune, decode, prune.

Each action runs in its step's folder (:mod:`rescorer.experiments.steps`) and returns what
``done.json`` records; the files the steps pass to each other are named by
:class:`~rescorer.experiments.layout.Layout`.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from rescorer.constants import FIELD_SEP, TRAIN_STATE_FILE
from rescorer.experiments.layout import Context, Layout, count_lines, read_lines
from rescorer.experiments.models import sha256_file
from rescorer.experiments.new_pairs import read_generated_pairs, strip_segmentation, write_pairs
from rescorer.experiments.steps import Step, StepError, WorkDir
from rescorer.experiments.systems import System
from rescorer.experiments.tools import rescorer_argv
from rescorer.experiments.tuning_log import date_env, finished_iterations
from rescorer.experiments.tuning_log import (
    earlier_iteration_seconds as earlier_iteration_seconds,  # re-exported
)
from rescorer.io.inputs import open_text
from rescorer.io.outputs import write_text
from rescorer.job.output import RESUME_REFUSED, record_path
from rescorer.moses.ini import MosesIni, pick_table_feature, read_ini
from rescorer.moses.ini_rewrite import absolute_paths, with_feature_paths, with_start_weights

REORDERING = "LexicalReordering"


def prepare(ctx: Context, step: Step) -> dict[str, Any]:
    """base.ini with absolute paths (and the weights of ``start_weights``, when given); the dev,
    tuning and test sets; dev+test for filtering."""
    cfg, out = ctx.cfg, step.folder
    ini = read_ini(str(cfg.system / "moses.ini"))
    write_text(out / "base.ini", absolute_paths(ini))
    if cfg.start_weights is not None:  # every tuning starts from these weights
        start = read_ini(str(cfg.start_weights))
        write_text(out / "base.ini", with_start_weights(read_ini(str(out / "base.ini")), start))
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


def train(ctx: Context, step: Step) -> dict[str, Any]:
    """`rescorer train` on the system's phrase table; a killed training run is resumed."""
    cfg = ctx.cfg
    model = step.folder / "model"
    table = _phrase_table(ctx)
    argv = rescorer_argv(
        "train", table, "-o", model, "--max-time", str(cfg.train_budget), *cfg.train_args
    )
    if training_resumes(step.folder):
        argv.append("--resume")
    step.run(argv)
    return {"model": str(model)}


def _phrase_table(ctx: Context) -> Path:
    ini = read_ini(str(ctx.paths.prepare / "base.ini"))
    return Path(phrase_table_feature(ini, ctx.cfg.feature_name)[1])


def phrase_table_feature(ini: MosesIni, feature_name: str | None) -> tuple[str, str]:
    """The name and the table path of the phrase table the experiment scores."""
    feature = pick_table_feature(ini, feature_name)
    path = feature.get("path")
    if path is None or feature.kind != "PhraseDictionaryMemory":
        raise StepError(
            f"{ini.path}:{feature.lineno}: {feature.name} is a {feature.kind}; the experiment "
            "needs a text phrase table (PhraseDictionaryMemory with path=)"
        )
    return feature.name, ini.resolve(path)


def filter_tables(ctx: Context, step: Step) -> dict[str, Any]:
    """Phrase and reordering tables filtered to dev+test by `rescorer filter --input`."""
    cfg, out, prep = ctx.cfg, step.folder, ctx.paths.prepare
    base = read_ini(str(prep / "base.ini"))
    name, table = phrase_table_feature(base, cfg.feature_name)
    step.need(Path(table))
    # The reordering tables first: filter --ini-out checks every path of the ini too, and this
    # names the missing one as the step's own error.
    sources: list[tuple[int, str, Path]] = []
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
        sources.append((i, feature.name, source))
    step.run(
        rescorer_argv(
            "filter", table, "--input", prep / "devtest.src", "--moses-ini", prep / "base.ini",
            "--feature-name", name, "--ini-out", out / "a.ini", "-o", out / "phrase-table.gz",
        )
    )  # fmt: skip
    reordering: dict[str, str] = {}
    for i, feature_name, source in sources:
        target = out / f"reordering-{i}.gz"
        step.run(rescorer_argv("filter", source, "--input", prep / "devtest.src", "-o", target))
        reordering[feature_name] = str(target)
    if reordering:
        write_text(out / "a.ini", with_feature_paths(read_ini(str(out / "a.ini")), reordering))
    return {
        "phrase_table": table,
        "phrase_table_sha256": sha256_file(Path(table)),
        "full_lines": count_lines(Path(table)),
        "filtered_lines": count_lines(out / "phrase-table.gz"),
        "reordering_tables": reordering,
    }


def _scores_per_line(table: Path) -> int:
    """The number of scores on a phrase table's first line (0 for an empty table)."""
    with open_text(str(table)) as lines:
        for line in lines:
            fields = line.split(FIELD_SEP)
            return len(fields[2].split()) if len(fields) > 2 else 0
    return 0


def _resumed(out: Path) -> list[str]:
    """``--resume`` when a killed run of this step's command left its progress record (the
    score and extend steps keep their folders), so a long table goes on from its last chunk;
    else the command starts over, and a complete OUT that a run killed after it wrote (before
    the step's record) is made again."""
    if Path(record_path(str(out))).is_file():
        return ["--resume"]
    out.unlink(missing_ok=True)
    return []


def _run_resuming(work: WorkDir, step: Step, argv: list[str], out: Path) -> None:
    """Run a score or extend command that writes ``out``, with ``--resume`` when a killed run
    left its record (:func:`_resumed`). The command refuses a record it cannot continue
    before it reads a line (written with other options, say a ``--chunk-bytes`` that another
    device chose, or damaged): then the step starts over with ``--restart``, and says so."""
    resume = _resumed(out)
    start = step.log.stat().st_size if step.log.exists() else 0
    try:
        step.run([*argv, *resume])
    except StepError:
        if not resume or RESUME_REFUSED not in _log_since(step.log, start):
            raise
        why = f"the progress record of {out.name} cannot be resumed (see the log)"
        step.say_in_log(f"{why}: starting over with --restart")
        work.say(f"{work.prog}: warning: step {step.name}: {why}; started over")
        step.run([*argv, "--restart"])


def _log_since(log: Path, offset: int) -> str:
    """What a step's log gained after ``offset`` bytes."""
    with open(log, "rb") as f:
        f.seek(offset)
        return f.read().decode("utf-8", errors="replace")


def score(ctx: Context, step: Step, *, system: System) -> dict[str, Any]:
    """`rescorer score` of the filtered table with the system's models (one ``-m`` each, in
    order, ``--word-penalty`` last), then `rescorer moses-ini`: the shipped weights and
    ``--new-weight`` for every new column."""
    out, filtered = step.folder, ctx.paths.filter / "phrase-table.gz"
    table, ini = ctx.paths.scored_table(system), ctx.paths.start_ini(system)
    models = [ctx.models[label].path for label in system.models]
    step.need(filtered, *models)
    wp = ["--word-penalty"] if system.word_penalty else []
    models_argv = [arg for m in models for arg in ("-m", m)]
    argv = rescorer_argv("score", filtered, *models_argv, "-o", table, "-q", *wp)
    _run_resuming(ctx.work, step, [*argv, *ctx.cfg.score_args], table)
    added = _scores_per_line(table) - _scores_per_line(filtered)
    columns = len(models) + len(wp)
    if added != columns:
        raise StepError(
            f"step {step.name}: rescorer score added {added} column(s) for {len(models)} "
            f"model(s){' and --word-penalty' if wp else ''}, expected {columns}: this rescorer "
            f"does not score with several -m (rescorer score TABLE -m FWD -m INV); see {step.log}"
        )
    weights = [str(ctx.cfg.new_weight)] * columns
    step.run(
        rescorer_argv(
            "moses-ini", ctx.paths.filter / "a.ini", "--phrase-table", table, "-o", ini,
            *(arg for w in weights for arg in ("--new-weight", w)),
        )
    )  # fmt: skip
    return {"table": str(table), "ini": str(out / ini.name), "models": list(system.models)}


def extend(ctx: Context, step: Step, *, system: System) -> dict[str, Any]:
    """(f): `rescorer extend` of the scored table with the same model, for the sources of dev
    and test (``--input``, filter's rule), as a fill-up: the table's lines and the new pairs,
    each new pair with its RNN column and provenance 2.718 (the table's own: 1); then
    `rescorer moses-ini`: the shipped weights and ``--new-weight`` for RNN and provenance."""
    scored, prep = ctx.paths.scored_table(system), ctx.paths.prepare
    table, ini = ctx.paths.extended_table(system), ctx.paths.start_ini(system)
    models = [ctx.models[label].path for label in system.models]
    step.need(scored, prep / "devtest.src", *models)
    models_argv = [arg for m in models for arg in ("-m", m)]
    argv = rescorer_argv(
        "extend", scored, *models_argv, "--input", prep / "devtest.src", "--form", "fill-up",
        "-o", table, "-q",
    )  # fmt: skip
    _run_resuming(ctx.work, step, [*argv, *ctx.cfg.extend_args], table)
    added = _scores_per_line(table) - _scores_per_line(scored)
    if added != 1:
        raise StepError(
            f"step {step.name}: rescorer extend added {added} column(s), expected 1 (the "
            f"provenance of a fill-up); see {step.log}"
        )
    generated = read_generated_pairs(table)
    write_pairs(ctx.paths.generated_pairs(system), generated)
    weights = [str(ctx.cfg.new_weight)] * (len(models) + 1)
    step.run(
        rescorer_argv(
            "moses-ini", ctx.paths.filter / "a.ini", "--phrase-table", table, "-o", ini,
            *(arg for w in weights for arg in ("--new-weight", w)),
        )
    )  # fmt: skip
    return {
        "table": str(table),
        "ini": str(ini),
        "models": list(system.models),
        "table_lines": count_lines(table),
        "generated_pairs": len(generated),
        "generated_sources": len({src for src, _ in generated}),
    }


def tune(ctx: Context, step: Step, *, system: System, run: int) -> dict[str, Any]:
    """mert-moses.pl with this replica's seed: MERT (``mert -r``) or batch MIRA (``kbmira
    --random-seed``, with ``--return-best-dev`` as the Moses manual advises for MIRA, whose
    last iteration need not be its best). A run killed after an iteration goes on from its last
    finished one (``--continue``: the same seed, so the same weights as a run never killed); one
    killed in its first iteration starts again in a fresh working directory."""
    cfg, tools, prep = ctx.cfg, ctx.tools, ctx.paths.prepare
    ini = ctx.paths.start_ini(system)
    step.need(ini, prep / "tune.src", prep / "tune.ref")
    seed = cfg.tuner_seed(run)
    argv: list[str | os.PathLike[str]] = [
        "perl", tools.mert_moses, prep / "tune.src", prep / "tune.ref", tools.moses, ini,
        "--mertdir", tools.mertdir, "--decoder-flags", f"-threads {cfg.threads}",
        "--working-dir", step.folder / "mert", "--maximum-iterations", str(cfg.max_iterations),
        "--no-filter-phrase-table",
    ]  # fmt: skip
    if system.tuner == "mira":
        argv += ["--batch-mira", "--return-best-dev", "--batch-mira-args", f"--random-seed {seed}"]
    else:
        argv += ["--mertmertargs", f"-r {seed} "]  # mert-moses.pl appends "--sctype" unspaced
    mert = step.folder / "mert"
    continued = finished_iterations(mert)
    if continued:
        argv.append("--continue")
    elif mert.exists():
        shutil.rmtree(mert)  # killed in its first iteration: nothing to go on from
    step.run(argv, cwd=step.folder, env=date_env(os.environ))
    tuned = step.folder / "mert" / "moses.ini"
    step.need(tuned)
    shutil.copyfile(tuned, step.folder / "tuned.ini")
    iterations = len(list((step.folder / "mert").glob("run*.moses.ini")))
    weights = _weights(step.folder / "tuned.ini")
    record = {"seed": seed, "iterations": iterations, "weights": weights}
    if continued:  # the seconds of done.json are then this last invocation's only
        record["continued_after_iteration"] = continued
    return record


def training_resumes(folder: Path) -> bool:
    """Whether the --train step in ``folder`` goes on from a saved state (``--resume``)."""
    return (folder / "model" / TRAIN_STATE_FILE).is_file()


def _weights(ini_path: Path) -> dict[str, list[float]]:
    return {k: list(v) for k, v in read_ini(str(ini_path)).weights().items()}


def decode(ctx: Context, step: Step, *, system: System, run: int) -> dict[str, Any]:
    """The real decoder on dev and test with the tuned (or pruned) ini. (f) decodes test with
    ``-report-segmentation`` (test.seg: which source span each target phrase translates) and
    its test.hyp is that output without the spans, as Moses writes it without the flag: one
    decode, not two, since where options tie (new pairs of equal scores can) two decodes of
    one ini need not give the same 1-best."""
    cfg, prep = ctx.cfg, ctx.paths.prepare
    ini = ctx.paths.decode_ini(system, run)
    step.need(ini)
    lines = {}
    record: dict[str, Any] = {}
    for part in ("dev", "test"):
        hyp = step.folder / f"{part}.hyp"
        argv: list[str | os.PathLike[str]] = [
            ctx.tools.moses,
            "-f",
            ini,
            "-threads",
            str(cfg.threads),
        ]
        if system.extended and part == "test":
            seg = ctx.paths.segmentation(system.key, run)
            step.run([*argv, "-report-segmentation"], stdin=prep / f"{part}.src", stdout=seg)
            write_text(hyp, "".join(f"{strip_segmentation(line)}\n" for line in read_lines(seg)))
            record["segmentation"] = str(seg)
        else:
            step.run(argv, stdin=prep / f"{part}.src", stdout=hyp)
        lines[part] = count_lines(hyp)
        expected = count_lines(prep / f"{part}.src")
        if lines[part] != expected:
            raise StepError(
                f"step {step.name}: the decoder wrote {lines[part]} lines for {expected} "
                f"{part} sentences; see {step.log}"
            )
    return {"ini": str(ini), "lines": lines, **record}


def decoded_damage(paths: Layout, record: dict[str, Any], *, key: str, run: int) -> str | None:
    """What is wrong with a finished decode step's output, if anything: each hypothesis file
    must hold one line per sentence (a file cut short would be scored as it is); so must
    (f)'s segmented test output."""
    outputs = [(paths.hyp(key, run, part), part) for part in ("dev", "test")]
    if "segmentation" in record:
        outputs.append((paths.segmentation(key, run), "test"))
    for hyp, part in outputs:
        if not hyp.is_file():
            return f"{hyp}: missing"
        found, expected = count_lines(hyp), count_lines(paths.prepare / f"{part}.src")
        if found != expected:
            return f"{hyp}: {found} lines, expected {expected} (one per {part} sentence)"
    return None


def prune(ctx: Context, step: Step, *, system: System, run: int) -> dict[str, Any]:
    """(d): the +RNN table cut to the top K per source by (b)'s tuned score (`filter --top-k`)."""
    assert system.pruned_from is not None
    tuned = ctx.paths.tuned_ini(system.pruned_from, run)
    table = ctx.paths.scored_table(ctx.system(system.pruned_from))
    step.need(tuned, table)
    pruned = step.folder / "phrase-table.gz"
    ini = ctx.paths.pruned_ini(system.key, run)
    step.run(
        rescorer_argv(
            "filter", table, "--top-k", str(ctx.cfg.top_k), "--weights", tuned,
            "--ini-out", ini, "-o", pruned,
        )
    )  # fmt: skip
    return {"table_lines": count_lines(pruned), "ini": str(ini)}
