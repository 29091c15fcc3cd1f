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

This module runs the steps in order; the rest lives beside it: the settings (``config``), the
systems (``systems``), the commands of Moses and rescorer (``tools``), the work folder
(``layout``), the steps (``actions``), what a model directory says (``models``), the evaluation
(``evaluate``, ``bleu``, ``significance``), results.md (``report``) and the curve (``curve``).
"""

from __future__ import annotations

import math
from functools import partial
from pathlib import Path
from typing import Any

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
from rescorer.experiments.layout import Context, Layout
from rescorer.experiments.models import model_warnings, read_model, sha256_file
from rescorer.experiments.report import results_markdown
from rescorer.experiments.steps import WorkDir
from rescorer.experiments.systems import Model, System, plan
from rescorer.experiments.tools import MosesTools
from rescorer.io.jsonfiles import write_json
from rescorer.io.outputs import write_text

__all__ = ["Table1Config", "check_config", "run_table1"]


def run_table1(cfg: Table1Config) -> dict[str, Any]:
    """Run every step not yet complete, then evaluate; returns what results.json holds."""
    require_sacrebleu()  # the last step's: before the first
    check_config(cfg)
    tools = MosesTools(cfg.moses.resolve())
    tools.check()
    cfg = absolute(cfg)
    ctx = Context(cfg, tools, Layout(cfg.work), WorkDir(cfg.work))
    ctx.work.lock()  # one driver per work folder
    for path in cfg.models:
        _add_model(ctx, path, "forward", "--model")
    if cfg.inverse_model is not None:
        _add_model(ctx, cfg.inverse_model, "inverse", "--inverse-model")
    check_work_dir(cfg, {label: info.weights_sha256 for label, info in ctx.infos.items()})
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
        name = system.score_step
        if name is not None and name not in ctx.records:
            ctx.records[name] = step(name, partial(actions.score, ctx, system=system))
        name = system.extend_step
        if name is not None and name not in ctx.records:
            ctx.records[name] = step(name, partial(actions.extend, ctx, system=system))
    # Replica by replica (a cut-short run has whole rows), cfg.jobs chains at once; (d)'s run r
    # prunes with (b)'s tuned weights of run r, so it follows that tuning in its chain.
    chains: dict[tuple[int, str], list[System]] = {}
    for run in range(1, max(s.runs for s in ctx.systems) + 1):
        for system in ctx.systems:
            if run <= system.runs:
                chains.setdefault((run, system.pruned_from or system.key), []).append(system)
    ctx.work.run_chains(
        [partial(_tune_and_decode, ctx, systems, run) for (run, _), systems in chains.items()],
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
        name = f"{'tune' if system.tuned else 'prune'}-{system.key}-{run}"
        action = actions.tune if system.tuned else actions.prune
        ctx.records[name] = ctx.work.step(
            name, partial(action, ctx, system=system, run=run), keep_partial=system.tuned
        )
        name = f"decode-{system.key}-{run}"
        ctx.records[name] = ctx.work.step(
            name,
            partial(actions.decode, ctx, system=system, run=run),
            damaged=partial(actions.decoded_damage, ctx, key=system.key, run=run),
        )


def _add_model(
    ctx: Context, path: Path, direction: str, option: str, label: str | None = None
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


def _warn_about_models(ctx: Context) -> None:
    """Warn, before the long steps, when a model may not help this system."""
    table = ctx.records["filter"]
    sha = table.get("phrase_table_sha256") or sha256_file(Path(table["phrase_table"]))
    for info in ctx.infos.values():
        for warning in model_warnings(info, Path(table["phrase_table"]), sha):
            ctx.warnings.append(warning)
            ctx.work.say(f"table1: warning: {warning}")


def _best_model(ctx: Context) -> str:
    """The forward model of the lowest validation perplexity (the last one given on a tie)."""
    forward = [label for label, m in ctx.models.items() if m.direction == "forward"]

    def ppl(label: str) -> float:
        value = ctx.infos[label].valid_ppl
        return math.inf if value is None else value

    return min(reversed(forward), key=ppl)
