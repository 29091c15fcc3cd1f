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

This module runs the steps in order; the rest lives beside it: the settings (``config``), the
commands of Moses and rescorer (``tools``), the work folder (``layout``), the steps (``actions``),
what a model directory says (``models``), the evaluation (``evaluate``, ``bleu``) and
results.md (``report``).
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

from rescorer.experiments import actions
from rescorer.experiments.config import TUNED, Table1Config, absolute, check_config, check_work_dir
from rescorer.experiments.evaluate import evaluate
from rescorer.experiments.layout import Context, Layout
from rescorer.experiments.models import model_warnings, read_model, sha256_file
from rescorer.experiments.report import results_markdown
from rescorer.experiments.steps import WorkDir
from rescorer.experiments.tools import MosesTools
from rescorer.io.files import write_json, write_text

__all__ = ["Table1Config", "check_config", "run_table1"]


def run_table1(cfg: Table1Config) -> dict[str, Any]:
    """Run every step not yet complete, then evaluate; returns what results.json holds."""
    check_config(cfg)
    tools = MosesTools(cfg.moses.resolve())
    tools.check()
    cfg = absolute(cfg)
    check_work_dir(cfg)
    ctx = Context(cfg, tools, Layout(cfg.work), WorkDir(cfg.work))
    step = ctx.work.step
    ctx.records["prepare"] = step("prepare", partial(actions.prepare, ctx))
    if cfg.train_budget is not None:
        ctx.records["train"] = step("train", partial(actions.train, ctx), keep_partial=True)
        ctx.model = cfg.work / "train" / "model"
    else:
        ctx.model = cfg.model
    ctx.records["filter"] = step("filter", partial(actions.filter_tables, ctx))
    _check_model(ctx)
    for name, wp in (("score-rnn", False), ("score-rnn-wp", True)):
        ctx.records[name] = step(name, partial(actions.score, ctx, word_penalty=wp))
    for run in range(1, cfg.runs + 1):  # replica by replica: a cut-short run has whole rows
        for system in TUNED:
            name = f"tune-{system}-{run}"
            ctx.records[name] = step(name, partial(actions.tune, ctx, system=system, run=run))
            name = f"decode-{system}-{run}"
            ctx.records[name] = step(name, partial(actions.decode, ctx, system=system, run=run))
        name = f"prune-d-{run}"
        ctx.records[name] = step(name, partial(actions.prune, ctx, run=run))
        name = f"decode-d-{run}"
        ctx.records[name] = step(name, partial(actions.decode, ctx, system="d", run=run))
    results = evaluate(ctx)
    write_json(cfg.work / "results.json", results)
    write_text(cfg.work / "results.md", results_markdown(results))
    ctx.work.say(f"table1: wrote {cfg.work / 'results.json'} and {cfg.work / 'results.md'}")
    return results


def _check_model(ctx: Context) -> None:
    """Warn, before the long steps, when the model may not help this system."""
    assert ctx.model is not None
    table = ctx.records["filter"]
    sha = table.get("phrase_table_sha256")
    if sha is None:  # a filter step done by an older driver
        sha = sha256_file(Path(table["phrase_table"]))
    for warning in model_warnings(read_model(ctx.model), Path(table["phrase_table"]), sha):
        ctx.warnings.append(warning)
        ctx.work.say(f"table1: warning: {warning}")
