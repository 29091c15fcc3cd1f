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

This module runs the steps in order; ``progress`` plans them (``plan_table1``: how far each
is) and evaluates the runs finished so far (``interim_table1``), both beside a running driver;
the rest lives beside it: the models of a run (``run_models``), the settings (``config``), the
systems (``systems``), the commands of Moses and rescorer (``tools``), the work folder
(``layout``), the steps (``actions``), what a model directory says (``models``), the
evaluation (``evaluate``, ``bleu``, ``significance``), results.md (``report``) and the curve
(``curve``).
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

from rescorer.experiments import actions
from rescorer.experiments.bleu import require_sacrebleu
from rescorer.experiments.config import (
    TRAINED_LABEL,
    Table1Config,
    absolute,
    check_config,
    check_work_dir,
)
from rescorer.experiments.curve import write_curve
from rescorer.experiments.evaluate import evaluate
from rescorer.experiments.layout import Context, Layout
from rescorer.experiments.power import require_scipy
from rescorer.experiments.progress import INTERIM_FILES, PlannedStep, interim_table1, plan_table1
from rescorer.experiments.report import results_markdown
from rescorer.experiments.run_models import add_model, add_models, best_model, warn_about_models
from rescorer.experiments.steps import WorkDir
from rescorer.experiments.systems import System, chains, decode_step, plan, tuning_step
from rescorer.experiments.tools import MosesTools
from rescorer.io.jsonfiles import write_json
from rescorer.io.outputs import write_text

__all__ = [
    "INTERIM_FILES",
    "PlannedStep",
    "Table1Config",
    "check_config",
    "interim_table1",
    "plan_table1",
    "run_table1",
]


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
    add_models(ctx, record_new=True)
    step = ctx.work.step
    ctx.records["prepare"] = step("prepare", partial(actions.prepare, ctx))
    if cfg.train_budget is not None:
        ctx.records["train"] = step("train", partial(actions.train, ctx), keep_partial=True)
        add_model(ctx, Path(ctx.records["train"]["model"]), "forward", "--train", TRAINED_LABEL)
        check_work_dir(cfg, {TRAINED_LABEL: ctx.infos[TRAINED_LABEL].weights_sha256})
    ctx.records["filter"] = step("filter", partial(actions.filter_tables, ctx))
    warn_about_models(ctx)
    ctx.best = cfg.best or best_model(ctx)
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
        [partial(_tune_and_decode, ctx, systems, run) for run, systems in chains(ctx.systems)],
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


def _tune_and_decode(ctx: Context, systems: list[System], run: int) -> None:
    """Tuning run ``run`` of each system in turn (or its pruning, for (d)), then its decoding."""
    for system in systems:
        name = tuning_step(system, run)
        action = actions.tune if system.tuned else actions.prune
        ctx.records[name] = ctx.work.step(
            name, partial(action, ctx, system=system, run=run), keep_partial=system.tuned
        )
        name = decode_step(system, run)
        ctx.records[name] = ctx.work.step(
            name,
            partial(actions.decode, ctx, system=system, run=run),
            damaged=partial(actions.decoded_damage, ctx.paths, key=system.key, run=run),
        )
