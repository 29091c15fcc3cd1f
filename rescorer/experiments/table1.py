"""The paper's Table 1 on a real Moses system: does the RNN column raise BLEU after tuning, and
does the gain grow as the model learns?

Cho et al. (2014), Table 1: a tuned phrase-based baseline against the same system with the RNN
Encoder-Decoder's log p(target|source) as one more phrase-table feature (+RNN), and with the
paper's word penalty for out-of-shortlist words (+RNN+WP). The second edition runs, in one work
folder, the systems of :mod:`rescorer.experiments.systems`: (b) once per model snapshot (the
learning curve, ``curve.png``), (c) and (d) with the best snapshot, (e) with an inverse-direction
model's column too, (f) with the best snapshot's table filled up with the model's own pairs
(``rescorer extend``; opt-in, ``runs_f``), and (a) and the best (b) again with batch MIRA.

Every tuned system is tuned K times (mert-moses.pl, a recorded seed each; a killed run goes on
from its last finished iteration) from the same start on the same dev sentences, then decodes
dev and test; BLEU is sacreBLEU's (``--tokenize none``) and multi-bleu.perl's, and each system
is tested against its baseline over the replicas (:mod:`rescorer.experiments.significance`).
Before the long steps the driver warns when a model has not clearly learned or was trained on
another table (:mod:`rescorer.experiments.models`). Each step runs in its own folder of the
work directory and is skipped once complete (:mod:`rescorer.experiments.steps`), so a killed
run goes on where it stopped, and a later snapshot or more runs extend the same folder. The
rescorer parts run as ``python -m rescorer`` subprocesses, exactly the commands a user types;
Moses' decoder, tuners and BLEU script are the real ones.

System folder (like ``../shared/data/en-fr``): ``moses.ini`` (relative paths resolved against
its folder), the tables and LM it names, ``dev.SRC dev.TGT test.SRC test.TGT``.

This module runs the steps in order, plans them (``plan_table1``: how far each is) and
evaluates the runs finished so far (``interim_table1``), both beside a running driver; the
rest lives beside it: the settings (``config``), the systems (``systems``), the commands of
Moses and rescorer (``tools``), the work folder (``layout``), the steps (``actions``), what a
model directory says (``models``), the evaluation (``evaluate``, ``bleu``,
``significance``), results.md (``report``) and the curve (``curve``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from functools import partial
from pathlib import Path
from typing import Any, Literal, Protocol

from rescorer.constants import CONFIG_FILE, WEIGHTS_FILE
from rescorer.durations import parse_duration
from rescorer.errors import RescorerError
from rescorer.experiments import actions
from rescorer.experiments.bleu import require_sacrebleu
from rescorer.experiments.config import (
    TRAINED_LABEL,
    Table1Config,
    absolute,
    check_config,
    check_work_dir,
    model_label,
)
from rescorer.experiments.curve import write_curve
from rescorer.experiments.evaluate import evaluate
from rescorer.experiments.layout import TABLE_FILE, Context, Layout
from rescorer.experiments.models import ModelInfo, model_warnings, read_model, sha256_file
from rescorer.experiments.power import require_scipy
from rescorer.experiments.report import results_markdown
from rescorer.experiments.steps import WorkDir, check_work_folder, read_done
from rescorer.experiments.systems import Model, System, plan
from rescorer.experiments.tools import MosesTools
from rescorer.io.jsonfiles import read_json_object, write_json
from rescorer.io.outputs import write_text
from rescorer.job.output import record_path

__all__ = [
    "INTERIM_FILES",
    "PlannedStep",
    "Table1Config",
    "check_config",
    "interim_table1",
    "plan_table1",
    "run_table1",
]

INTERIM_FILES = ("interim.json", "interim.md")  # never results.json/md: those are the whole run


def run_table1(cfg: Table1Config) -> dict[str, Any]:
    """Run every step not yet complete, then evaluate; returns what results.json holds."""
    require_sacrebleu()  # the last step's: before the first
    require_scipy()
    check_config(cfg)
    tools = MosesTools(cfg.moses.resolve())
    tools.check()
    cfg = absolute(cfg)
    ctx = Context(cfg, tools, Layout(cfg.work), WorkDir(cfg.work))
    ctx.work.lock()  # one driver per work folder
    _add_models(ctx, record_new=True)
    step = ctx.work.step
    ctx.records["prepare"] = step("prepare", partial(actions.prepare, ctx))
    if cfg.train_budget is not None:
        ctx.records["train"] = step("train", partial(actions.train, ctx), keep_partial=True)
        _add_model(ctx, Path(ctx.records["train"]["model"]), "forward", "--train", TRAINED_LABEL)
        check_work_dir(cfg, {TRAINED_LABEL: ctx.infos[TRAINED_LABEL].weights_sha256})
    ctx.records["filter"] = step("filter", partial(actions.filter_tables, ctx))
    _warn_about_models(ctx)
    ctx.best = cfg.best or _best_model(ctx)
    why = "--best" if cfg.best else "the lowest validation perplexity; --best LABEL to choose"
    ctx.work.say(f"table1: the best model, for (c)-(f) and MIRA: {ctx.best} ({why})")
    ctx.systems = plan(cfg, list(ctx.models.values()), ctx.best)
    for system in ctx.systems:
        # Both keep their folders: a killed run's command goes on from its own record.
        name = system.score_step
        if name is not None and name not in ctx.records:
            ctx.records[name] = step(
                name, partial(actions.score, ctx, system=system), keep_partial=True
            )
        name = system.extend_step
        if name is not None and name not in ctx.records:
            ctx.records[name] = step(
                name, partial(actions.extend, ctx, system=system), keep_partial=True
            )
    ctx.work.run_chains(
        [partial(_tune_and_decode, ctx, systems, run) for run, systems in _chains(ctx.systems)],
        cfg.jobs,
    )
    results = evaluate(ctx)
    png = cfg.work / "curve.png"
    png.unlink(missing_ok=True)
    problem = write_curve(results, png)
    if problem is not None:
        ctx.work.say(f"table1: warning: {problem}")
        results["warnings"].append(problem)
    results["curve"] = png.name if png.is_file() else None
    write_json(cfg.work / "results.json", results)
    write_text(cfg.work / "results.md", results_markdown(results))
    ctx.work.say(f"table1: wrote {cfg.work / 'results.json'} and {cfg.work / 'results.md'}")
    return results


def _chains(systems: list[System]) -> list[tuple[int, list[System]]]:
    """The tuning chains, in the order they start: replica by replica (a cut-short run has
    whole rows); (d)'s run r prunes with (b)'s tuned weights of run r, so it follows that
    tuning in its chain."""
    chains: dict[tuple[int, str], list[System]] = {}
    for run in range(1, max(s.runs for s in systems) + 1):
        for system in systems:
            if run <= system.runs:
                chains.setdefault((run, system.pruned_from or system.key), []).append(system)
    return [(run, members) for (run, _), members in chains.items()]


def _tuning_step(system: System, run: int) -> str:
    return f"{'tune' if system.tuned else 'prune'}-{system.key}-{run}"


def _decode_step(system: System, run: int) -> str:
    return f"decode-{system.key}-{run}"


def _tune_and_decode(ctx: Context, systems: list[System], run: int) -> None:
    """Tuning run ``run`` of each system in turn (or its pruning, for (d)), then its decoding."""
    for system in systems:
        name = _tuning_step(system, run)
        action = actions.tune if system.tuned else actions.prune
        ctx.records[name] = ctx.work.step(
            name, partial(action, ctx, system=system, run=run), keep_partial=system.tuned
        )
        name = _decode_step(system, run)
        ctx.records[name] = ctx.work.step(
            name,
            partial(actions.decode, ctx, system=system, run=run),
            damaged=partial(actions.decoded_damage, ctx.paths, key=system.key, run=run),
        )


@dataclass(frozen=True)
class PlannedStep:
    """A step of a configuration and how far it is."""

    name: str
    state: Literal["done", "partial", "to do"]
    seconds: float | None = None  # a finished step's
    detail: str = ""  # why partial (finished iterations, damage), or why a time is a bound


def plan_table1(cfg: Table1Config) -> tuple[list[PlannedStep], str]:
    """Every step that ``run_table1(cfg)`` would run, in its order, and how far each is;
    nothing runs and nothing is written, and no lock is taken: safe beside a running driver.
    Returns the steps and a note on what cannot be planned yet (the systems of a --train model
    before it is trained). A model folder without saved weights yet (a training that has not
    reached it) is planned by its label, not read: its steps are listed, and the note names
    it; the run itself refuses it until it exists."""
    check_config(cfg)
    cfg = absolute(cfg)
    check_work_folder(cfg.work)
    ctx = _Models()
    waiting: list[Path] = []
    for path in cfg.models:
        _add_planned_model(ctx, path, "forward", "--model", waiting)
    if cfg.inverse_model is not None:
        _add_planned_model(ctx, cfg.inverse_model, "inverse", "--inverse-model", waiting)
    weights = {label: info.weights_sha256 for label, info in ctx.infos.items()}
    check_work_dir(cfg, weights, record_new=False)
    names = ["prepare"]
    notes = []
    if waiting:
        notes.append(
            f"not there yet: {', '.join(map(str, waiting))} (their steps are listed; the run "
            "refuses them until they exist)"
        )
    if cfg.train_budget is not None:
        names.append("train")
        trained = _done_record(cfg.work, "train")
        if trained is None:
            notes.append("the systems of the --train model are planned once it is trained")
        else:
            _add_model(ctx, Path(trained["model"]), "forward", "--train", TRAINED_LABEL)
    names.append("filter")
    damage: dict[str, Callable[[dict[str, Any]], str | None]] = {}  # the decode steps' checks
    models = list(ctx.models.values())
    forward = [m for m in models if m.direction == "forward"]
    best = cfg.best
    waiting_forward = any(ctx.models[model_label(p)].direction == "forward" for p in waiting)
    if best is None and (waiting_forward or not forward):  # the best is not known yet
        models = forward
        cfg = replace(cfg, runs_c=0, runs_f=0, runs_mira=0)
        if forward:
            notes.append(
                "(c)-(f) and MIRA are planned once every model exists, or with --best: they "
                "take the model of the lowest validation perplexity"
            )
    if models:
        if best is None:  # when the best is not known, no system of plan() takes it (above)
            best = forward[0].label if waiting_forward else _best_model(ctx)
        systems = plan(cfg, models, best)
        for system in systems:
            for name in (system.score_step, system.extend_step):
                if name is not None and name not in names:
                    names.append(name)
        for run, members in _chains(systems):
            for system in members:
                names += [_tuning_step(system, run), _decode_step(system, run)]
                damage[names[-1]] = partial(
                    actions.decoded_damage, Layout(cfg.work), key=system.key, run=run
                )
    return [_step_state(cfg.work, name, damage.get(name)) for name in names], "; ".join(notes)


def interim_table1(cfg: Table1Config) -> dict[str, Any]:
    """What results.json would hold if the run stopped now: every system evaluated on its
    replicas finished so far (runs 1..r with both the tuning, or (d)'s pruning, and the
    decoding done and undamaged), written to interim.json and interim.md in the work folder.
    Nothing runs and no lock is taken: safe beside a running driver. A system appears once it
    and the systems it is tested against have a finished run; results.json is left alone.

    An interim table is a look, not a result: K was fixed before tuning (the power analysis),
    and fewer runs give wider intervals, or at K = 1 none of the tuner's spread."""
    require_sacrebleu()
    require_scipy()
    check_config(cfg)
    tools = MosesTools(cfg.moses.resolve())
    tools.check()
    cfg = absolute(cfg)
    check_work_folder(cfg.work)
    if not cfg.work.is_dir():
        raise RescorerError(f"{cfg.work}: no work folder yet (nothing has run)")
    for name in INTERIM_FILES:  # an older look must not outlive a failed one
        (cfg.work / name).unlink(missing_ok=True)
    ctx = Context(cfg, tools, Layout(cfg.work), WorkDir(cfg.work))
    _add_models(ctx, record_new=False)
    for name in ("prepare", "filter"):
        record = _done_record(cfg.work, name)
        if record is None:
            raise RescorerError(f"{cfg.work}: step {name} has not finished: no run to report")
        ctx.records[name] = record
    if cfg.train_budget is not None:
        trained = _done_record(cfg.work, "train")
        if trained is not None:
            ctx.records["train"] = trained
            _add_model(ctx, Path(trained["model"]), "forward", "--train", TRAINED_LABEL)
            weights = {TRAINED_LABEL: ctx.infos[TRAINED_LABEL].weights_sha256}
            check_work_dir(cfg, weights, record_new=False)
    _warn_about_models(ctx)
    ctx.best = cfg.best or _best_model(ctx)
    planned = plan(cfg, list(ctx.models.values()), ctx.best)
    finished = {s.key: _finished_runs(ctx, s) for s in planned}  # and damage in ctx.warnings
    systems: list[System] = []
    for system in planned:
        tested = [k for k in (system.baseline, system.second_baseline) if k is not None]
        if finished[system.key] and all(finished[k] for k in tested):
            systems.append(replace(system, runs=finished[system.key]))
    if not systems:
        raise RescorerError(f"{cfg.work}: no system has a finished tuning and decoding yet")
    ctx.systems = systems
    results = evaluate(ctx)
    results["curve"] = None
    results["interim"] = {
        "utc": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "planned_runs": {s.key: s.runs for s in planned},
        "finished_runs": finished,
        "tunings_done": sum(
            _done_record(cfg.work, _tuning_step(s, run)) is not None
            for s in planned
            if s.tuned
            for run in range(1, s.runs + 1)
        ),
        "tunings_planned": sum(s.runs for s in planned if s.tuned),
    }
    json_file, md_file = INTERIM_FILES
    write_json(cfg.work / json_file, results)
    write_text(cfg.work / md_file, interim_header(results) + results_markdown(results))
    return results


def interim_header(results: dict[str, Any]) -> str:
    """interim.md's first paragraph: which replicas it holds, and why it is no result."""
    interim = results["interim"]
    shown = {s["system"] for s in results["systems"]}
    finished, planned = interim["finished_runs"], interim["planned_runs"]
    counts = ", ".join(f"{key} {finished[key]} of {k}" for key, k in planned.items())
    absent = [key for key in planned if key not in shown]
    return (
        f"**Interim ({interim['utc']}): not this run's result.** The replicas finished so "
        f"far ({counts}; "
        f"{interim['tunings_done']} of {interim['tunings_planned']} tunings). K was fixed "
        "before tuning: fewer runs give wider intervals, and a system with one run "
        "brings none of the tuner's spread, so its interval is too narrow; each p pairs only "
        "the first min(K) runs of a system and its baseline, while Δ and the interval use "
        "every finished run. Do not stop the run on what this shows."
        + (
            " Not shown yet (no finished run of theirs, or none of a system they are "
            f"tested against): {', '.join(absent)}."
            if absent
            else ""
        )
        + "\n\n"
    )


def _finished_runs(ctx: Context, system: System) -> int:
    """How many of ``system``'s runs, from run 1 on, have their tuning (or (d)'s pruning) and
    decoding finished and undamaged; the records of those steps go into ``ctx.records``. A
    finished decoding whose output is damaged ends the count and is named in
    ``ctx.warnings``: a driver already past it would fail on it at the end."""
    if system.score_step is not None:
        for name in (system.score_step, system.extend_step):
            if name is None:
                continue
            record = _done_record(ctx.cfg.work, name)
            if record is None:
                return 0
            ctx.records[name] = record
    done = 0
    for run in range(1, system.runs + 1):
        names = [f"tune-{system.pruned_from or system.key}-{run}", _decode_step(system, run)]
        if system.pruned_from is not None:
            names.insert(1, _tuning_step(system, run))  # prune-KEY-RUN
        found = {name: _done_record(ctx.cfg.work, name) for name in names}
        records = {name: r for name, r in found.items() if r is not None}
        if len(records) < len(names):
            break
        try:
            problem = actions.decoded_damage(ctx.paths, records[names[-1]], key=system.key, run=run)
        except RescorerError as exc:  # an output it cannot read
            problem = str(exc)
        if problem is not None:
            ctx.warnings.append(
                f"{problem}: step {names[-1]} is decoded again when the same command runs "
                "again (a driver already past it stops on it at the end)"
            )
            break
        ctx.records.update(records)
        done = run
    return done


def _add_planned_model(
    ctx: _Models, path: Path, direction: str, option: str, waiting: list[Path]
) -> None:
    """:func:`_add_model` for a plan. A model still training is waited for: a folder without
    a config or weights yet (``rescorer train -o`` made it), or an absent ``NAME@LABEL`` whose
    training folder ``NAME`` is beside it (a snapshot scripts/train_snapshots.py has not
    copied yet). Anything else absent is refused, so a mistyped path is not planned as a
    model to come."""
    if not (path / CONFIG_FILE).is_file() or not (path / WEIGHTS_FILE).is_file():
        if path.exists() and not path.is_dir():
            raise RescorerError(f"{option} {path}: a file, not a model folder")
        if not path.is_dir():
            _check_snapshot_to_come(path, option)
        waiting.append(path)
        ctx.models[model_label(path)] = Model(model_label(path), path, direction)
        return
    _add_model(ctx, path, direction, option)


def _check_snapshot_to_come(path: Path, option: str) -> None:
    """Refuse an absent ``path`` unless it names a snapshot ``NAME@LABEL`` that
    scripts/train_snapshots.py will copy from the training folder ``NAME`` beside it, LABEL a
    duration (its ``--snapshot``)."""
    name, at, label = path.name.rpartition("@")
    why = "no such model folder"
    if at and name:
        try:
            parse_duration(label)
        except RescorerError as exc:
            why += f", and {label!r} after the @ is not a snapshot's duration ({exc})"
        else:
            if path.with_name(name).is_dir():
                return
            why += f", and no training folder {path.with_name(name)} beside it"
    raise RescorerError(
        f"{option} {path}: {why} (a model still training is planned by its folder, or a "
        "snapshot NAME@LABEL by its training folder NAME)"
    )


def _done_record(work: Path, name: str) -> dict[str, Any] | None:
    """Step ``name``'s record if it is complete (steps.read_done, silently: a look)."""
    return read_done(work, name)[0]


def _step_state(
    work: Path, name: str, damaged: Callable[[dict[str, Any]], str | None] | None = None
) -> PlannedStep:
    """How far a step is, as the run that comes would find it (the actions' own rules: a
    tuning goes on from MERT's last finished iteration unless it had finished, a training
    from its saved state, a score or extend command from its progress record, a finished
    step whose outputs ``damaged`` finds at fault runs again)."""
    record = _done_record(work, name)
    if record is not None:
        try:
            problem = damaged(record) if damaged is not None else None
        except RescorerError as exc:  # an output it cannot read: the run redoes the step too
            problem = str(exc)
        if problem is not None:
            return PlannedStep(name, "partial", detail=f"{problem}: runs again from its start")
        if not name.startswith("tune-"):
            return PlannedStep(name, "done", float(record["seconds"]))
        seconds, why = actions.tuning_seconds(work / name, record)
        return PlannedStep(name, "done", seconds, detail=f"at least: {why}" if why else "")
    folder = work / name
    if not folder.exists():
        return PlannedStep(name, "to do")
    if name.startswith("tune-"):
        done = actions.finished_iterations(folder / "mert")
        if done:
            return PlannedStep(name, "partial", detail=f"{done} tuning iterations finished")
        if (folder / "mert" / "moses.ini").is_file():
            return PlannedStep(name, "partial", detail="its tuning had finished, its record "
                               "was lost: runs again from its start")  # fmt: skip
    if name == "train" and actions.training_resumes(folder):
        return PlannedStep(name, "partial", detail="goes on from its saved state")
    progress = Path(record_path(str(folder / TABLE_FILE)))  # a score or extend step's command
    if name.startswith(("score-", "extend-")) and progress.is_file():
        try:
            line = int(read_json_object(progress, what="a progress record")["next_line"])
        except (RescorerError, KeyError, TypeError, ValueError):
            return PlannedStep(name, "partial", detail=f"its record {progress} is unreadable")
        return PlannedStep(name, "partial", detail=f"goes on from table line {line:,}")
    return PlannedStep(name, "partial", detail="runs again from its start")


class _HasModels(Protocol):
    models: dict[str, Model]  # by label
    infos: dict[str, ModelInfo]  # what each says of itself


@dataclass
class _Models:
    """The models of a plan (a run's are in its Context)."""

    models: dict[str, Model] = field(default_factory=dict)
    infos: dict[str, ModelInfo] = field(default_factory=dict)


def _add_model(
    ctx: _HasModels, path: Path, direction: str, option: str, label: str | None = None
) -> None:
    """Read a model directory (refused when it is none, or of the other direction)."""
    try:
        info = read_model(path)
    except RescorerError as exc:
        raise RescorerError(f"{option} {path}: {exc}") from None
    if info.direction != direction:
        article = {"forward": "a forward", "inverse": "an inverse"}
        how = "--direction inverse" if direction == "inverse" else "without --direction"
        raise RescorerError(
            f"{option} {path}: {article[info.direction]}-direction model; expected "
            f"{article[direction]} one (rescorer train {how})"
        )
    label = label or model_label(path)
    ctx.models[label] = Model(label, path, direction)
    ctx.infos[label] = info


def _add_models(ctx: Context, *, record_new: bool) -> None:
    """The --model and --inverse-model folders of ``ctx.cfg``, checked against the weights the
    work folder knew under their labels (new labels recorded when ``record_new``)."""
    cfg = ctx.cfg
    for path in cfg.models:
        _add_model(ctx, path, "forward", "--model")
    if cfg.inverse_model is not None:
        _add_model(ctx, cfg.inverse_model, "inverse", "--inverse-model")
    weights = {label: info.weights_sha256 for label, info in ctx.infos.items()}
    check_work_dir(cfg, weights, record_new=record_new)


def _warn_about_models(ctx: Context) -> None:
    """Warn, before the long steps, when a model may not help this system."""
    table = ctx.records["filter"]
    sha = table.get("phrase_table_sha256") or sha256_file(Path(table["phrase_table"]))
    for info in ctx.infos.values():
        for warning in model_warnings(info, Path(table["phrase_table"]), sha):
            ctx.warnings.append(warning)
            ctx.work.say(f"table1: warning: {warning}")


def _best_model(ctx: _HasModels) -> str:
    """The forward model of the lowest validation perplexity (the last one given on a tie)."""
    forward = [label for label, m in ctx.models.items() if m.direction == "forward"]

    def ppl(label: str) -> float:
        value = ctx.infos[label].valid_ppl
        return math.inf if value is None else value

    return min(reversed(forward), key=ppl)
