"""How far a Table 1 work folder is, read beside a running driver (nothing runs, no lock is
taken): every step a command would run and its state (:func:`plan_table1`, ``--plan``), and
the runs finished so far evaluated into interim.json and interim.md (:func:`interim_table1`,
``--interim``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from functools import partial
from pathlib import Path
from typing import Any, Literal

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
from rescorer.experiments.evaluate import evaluate
from rescorer.experiments.layout import TABLE_FILE, Context, Layout
from rescorer.experiments.power import require_scipy
from rescorer.experiments.report import results_markdown
from rescorer.experiments.run_models import (
    PlanModels,
    add_model,
    add_models,
    add_planned_model,
    best_model,
    warn_about_models,
)
from rescorer.experiments.steps import WorkDir, check_work_folder, read_done
from rescorer.experiments.systems import System, chains, decode_step, plan, tuning_step
from rescorer.experiments.tools import MosesTools
from rescorer.experiments.tuning_log import finished_iterations, tuning_seconds
from rescorer.io.jsonfiles import read_json_object, write_json
from rescorer.io.outputs import write_text
from rescorer.job.output import record_path

INTERIM_FILES = ("interim.json", "interim.md")  # never results.json/md: those are the whole run


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
    ctx = PlanModels()
    waiting: list[Path] = []
    for path in cfg.models:
        add_planned_model(ctx, path, "forward", "--model", waiting)
    if cfg.inverse_model is not None:
        add_planned_model(ctx, cfg.inverse_model, "inverse", "--inverse-model", waiting)
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
        trained = done_record(cfg.work, "train")
        if trained is None:
            notes.append("the systems of the --train model are planned once it is trained")
        else:
            add_model(ctx, Path(trained["model"]), "forward", "--train", TRAINED_LABEL)
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
            best = forward[0].label if waiting_forward else best_model(ctx)
        systems = plan(cfg, models, best)
        for system in systems:
            for name in (system.score_step, system.extend_step):
                if name is not None and name not in names:
                    names.append(name)
        for run, members in chains(systems):
            for system in members:
                names += [tuning_step(system, run), decode_step(system, run)]
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
    add_models(ctx, record_new=False)
    for name in ("prepare", "filter"):
        record = done_record(cfg.work, name)
        if record is None:
            raise RescorerError(f"{cfg.work}: step {name} has not finished: no run to report")
        ctx.records[name] = record
    if cfg.train_budget is not None:
        trained = done_record(cfg.work, "train")
        if trained is not None:
            ctx.records["train"] = trained
            add_model(ctx, Path(trained["model"]), "forward", "--train", TRAINED_LABEL)
            weights = {TRAINED_LABEL: ctx.infos[TRAINED_LABEL].weights_sha256}
            check_work_dir(cfg, weights, record_new=False)
    warn_about_models(ctx)
    ctx.best = cfg.best or best_model(ctx)
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
            done_record(cfg.work, tuning_step(s, run)) is not None
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
            record = done_record(ctx.cfg.work, name)
            if record is None:
                return 0
            ctx.records[name] = record
    done = 0
    for run in range(1, system.runs + 1):
        names = [f"tune-{system.pruned_from or system.key}-{run}", decode_step(system, run)]
        if system.pruned_from is not None:
            names.insert(1, tuning_step(system, run))  # prune-KEY-RUN
        found = {name: done_record(ctx.cfg.work, name) for name in names}
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


def done_record(work: Path, name: str) -> dict[str, Any] | None:
    """Step ``name``'s record if it is complete (steps.read_done, silently: a look)."""
    return read_done(work, name)[0]


def _step_state(
    work: Path, name: str, damaged: Callable[[dict[str, Any]], str | None] | None = None
) -> PlannedStep:
    """How far a step is, as the run that comes would find it (the actions' own rules: a
    tuning goes on from MERT's last finished iteration unless it had finished, a training
    from its saved state, a score or extend command from its progress record, a finished
    step whose outputs ``damaged`` finds at fault runs again)."""
    record = done_record(work, name)
    if record is not None:
        try:
            problem = damaged(record) if damaged is not None else None
        except RescorerError as exc:  # an output it cannot read: the run redoes the step too
            problem = str(exc)
        if problem is not None:
            return PlannedStep(name, "partial", detail=f"{problem}: runs again from its start")
        if not name.startswith("tune-"):
            return PlannedStep(name, "done", float(record["seconds"]))
        seconds, why = tuning_seconds(work / name, record)
        return PlannedStep(name, "done", seconds, detail=f"at least: {why}" if why else "")
    folder = work / name
    if not folder.exists():
        return PlannedStep(name, "to do")
    if name.startswith("tune-"):
        done = finished_iterations(folder / "mert")
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
