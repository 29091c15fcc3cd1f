#!/usr/bin/env python3
"""The paper's Table 1 on a Moses system folder, second edition: one work folder for
(a) the baseline, (b) +RNN for every model snapshot (the learning curve), (c) +RNN+WP and
(d) the pruned table with the best snapshot, (e) +RNN in both directions with an inverse model,
(f) the best snapshot's table filled up with its own pairs (`rescorer extend`, --runs-f), and
(a) and the best (b) tuned again by batch MIRA.

Thin over rescorer.experiments.table1: every step runs in its own folder of --work and is
skipped when complete, so re-running the same command after a kill goes on where it stopped;
more snapshots, runs or systems can be added to the same folder later. Ctrl-C or SIGTERM ends
the command running (and what it started) and exits 130 or 143 with one line. --jobs N runs N
tuning runs at once, each with its decoding. --plan lists every step and how far it is;
--interim evaluates the runs finished so far into WORK/interim.md (neither runs a step:
both are safe beside a running driver).

Example (the en-fr system, three snapshots of one training run, an inverse model):

    python scripts/table1.py ../shared/data/en-fr --work runs/table1-2 \
        --model runs/curve/fwd@1h --model runs/curve/fwd@3h --model runs/curve/fwd@6h \
        --inverse-model runs/curve/inv@2h --runs 6 --runs-c 4 --runs-mira 3 \
        --dev-lines 400 --max-iterations 8 --score-args "--precision fp32"

From a raw bitext folder (train/dev/test.en/fr) instead of a system folder: `--bitext CORPUS`
builds the baseline first (scripts/baseline.py's steps, in WORK/baseline).
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import click

from rescorer.cli.drivers import (
    LINES,
    MAX_MERT_SEED,
    MAX_RUNS,
    MERT_ITERATIONS,
    RUNS,
    RUNS_OR_NONE,
    THREADS,
    drive,
    fail,
    moses_option,
    threads_option,
)
from rescorer.cli.ranges import MAX_WEIGHT, Duration, Float, Int
from rescorer.experiments.baseline import BaselineConfig, baseline_built, run_baseline
from rescorer.experiments.steps import check_work_folder
from rescorer.experiments.table1 import (
    INTERIM_FILES,
    PlannedStep,
    Table1Config,
    interim_table1,
    plan_table1,
    run_table1,
)

HERE = Path(__file__).resolve().parent


def runs_of_option(
    ctx: click.Context, param: click.Parameter, values: tuple[str, ...]
) -> tuple[tuple[str, int], ...]:
    """--runs-of KEY=K, each as (KEY, K)."""
    pairs = []
    for value in values:
        key, sep, runs = value.rpartition("=")
        if not sep or not key or not runs.strip().isdigit():
            raise click.BadParameter(f"{value!r}: expected KEY=K, e.g. b-fwd@6h=6", ctx, param)
        if int(runs) > MAX_RUNS:
            raise click.BadParameter(f"{value!r}: expected K from 0 to {MAX_RUNS}", ctx, param)
        pairs.append((key, int(runs)))
    return tuple(pairs)


@click.command(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.argument("system", required=False, type=click.Path(file_okay=False, path_type=Path))
@click.option("--work", required=True, type=click.Path(path_type=Path), help="Work folder.")
@click.option(
    "--bitext",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="Build SYSTEM first from a raw bitext folder (train/dev/test.SRC/TGT) with "
    "scripts/baseline.py's steps, in WORK/baseline (its MERT capped by --max-iterations, as "
    "every system's); SYSTEM is then WORK/baseline/system.",
)
@click.option(
    "--model",
    "models",
    multiple=True,
    type=click.Path(path_type=Path),
    help="A forward model directory: one system (b) each, labelled by its folder's name "
    "(e.g. runs/curve/fwd@3h); repeatable.",
)
@click.option(
    "--train",
    "train_budget",
    metavar="BUDGET",
    type=Duration(),
    help="Train a model first (e.g. 2h).",
)
@click.option("--train-args", default="", help="More `rescorer train` flags, one string.")
@click.option(
    "--best",
    metavar="LABEL",
    help="The model of (c)-(f) and MIRA's (b) [default: the lowest validation perplexity].",
)
@click.option(
    "--inverse-model",
    type=click.Path(path_type=Path),
    help="An inverse-direction model: system (e), +RNN p(f|e) and p(e|f).",
)
@click.option("--score-args", default="", help="More `rescorer score` flags, one string.")
@moses_option(HERE.parent.parent / "shared" / "tools" / "moses", "bin/, scripts/")
@click.option(
    "--runs", default=3, type=RUNS, show_default=True, help="K: tuning runs of (a), (b), (e)."
)
@click.option(
    "--runs-c",
    type=RUNS_OR_NONE,
    help="K of (c) and (d), 0 for none [default: --runs].",
)
@click.option(
    "--runs-mira",
    default=0,
    type=RUNS_OR_NONE,
    show_default=True,
    help="K of (a) and the best (b) tuned by batch MIRA (kbmira); 0 for none.",
)
@click.option(
    "--runs-f",
    default=0,
    type=RUNS_OR_NONE,
    show_default=True,
    help="K of (f): the best model's table filled up with its own pairs for the dev and test "
    "sources (rescorer extend), tested against (a) and the best (b); 0 for none.",
)
@click.option(
    "--runs-of",
    "runs_of",
    multiple=True,
    callback=runs_of_option,
    metavar="KEY=K",
    help="K of one system by its key (a, b-fwd@6h, ...: --plan lists its steps), over the "
    "options above; repeatable. For more runs of a system where a rule asks for them.",
)
@click.option(
    "--extend-args",
    default="",
    help="More `rescorer extend` flags of (f), one string (e.g. -n 10, the --precision of "
    "--score-args, --lex-f2e/--lex-e2f).",
)
@click.option(
    "--dev-lines",
    type=LINES,
    help="Tune on the first N dev sentences [default: all].",
)
@click.option(
    "--max-iterations",
    default=10,
    type=MERT_ITERATIONS,
    show_default=True,
    help="Tuning iterations at most.",
)
@click.option(
    "--top-k",
    default=5,
    type=Int(1, 1_000_000),
    show_default=True,
    help="System (d): targets per source.",
)
@click.option(
    "--new-weight",
    default=0.05,
    type=Float(-MAX_WEIGHT, MAX_WEIGHT),
    show_default=True,
    help="Starting weight of every new column (RNN, RNN inverse, WP) for tuning.",
)
@click.option(
    "--start-weights",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Tune every system from this moses.ini's weights (e.g. the untuned model/moses.ini "
    "train-model.perl wrote), so that the baseline's runs vary as a fresh tuning does "
    "[default: the system's own, tuned, weights: the baseline's runs then start where MERT "
    "converged].",
)
@threads_option(os.cpu_count() or 1, "all cores", "Decoder threads of each tuning and decoding. ")
@click.option(
    "--jobs",
    default=1,
    type=Int(1, THREADS),
    show_default=True,
    help="Tuning runs at once, each with its decoding (and (d)'s pruning after (b)'s run); "
    "give each --threads so that jobs x threads fits the cores.",
)
@click.option(
    "--seed",
    default=1,
    type=Int(0, (MAX_MERT_SEED - MAX_RUNS) // 1000),
    show_default=True,
    help="Run r tunes with seed SEED*1000+r.",
)
@click.option("--src", default="en", show_default=True, help="Source suffix of dev/test files.")
@click.option("--tgt", default="fr", show_default=True, help="Target suffix of dev/test files.")
@click.option("--feature-name", help="The phrase-table feature when the ini has several.")
@click.option(
    "--trials",
    default=10000,
    type=Int(1, 10_000_000),
    show_default=True,
    help="Randomisation and bootstrap trials.",
)
@click.option(
    "--plan",
    "plan_only",
    is_flag=True,
    help="Print every step of this command and how far it is (done, partial, to do), then "
    "exit: nothing runs, safe beside a running driver.",
)
@click.option(
    "--interim",
    is_flag=True,
    help="Evaluate the runs finished so far (each system on its runs 1..r whose tuning and "
    "decoding are done) into WORK/interim.md and interim.json, print it, then exit: no step "
    "runs and no lock is taken, safe beside a running driver; results.md is the whole run's "
    "alone.",
)
def main(
    system: Path | None,
    bitext: Path | None,
    models: tuple[Path, ...],
    train_args: str,
    score_args: str,
    extend_args: str,
    moses: Path,
    plan_only: bool,
    interim: bool,
    **opts: object,
) -> None:
    """Tune and evaluate the systems of Table 1 on SYSTEM (a Moses system folder)."""
    if (system is None) == (bitext is None):
        raise click.UsageError("give SYSTEM (a Moses system folder) or --bitext CORPUS, not both")
    if plan_only and interim:
        raise click.UsageError("--plan and --interim: give one of them")
    if bitext is not None:
        work = Path(str(opts["work"]))
        system = work / "baseline" / "system"
        if not (plan_only or interim):
            system = build_system(bitext, work, moses, opts)
        elif not baseline_built(work / "baseline"):
            drive("table1", work, lambda: check_work_folder(work))
            if interim:
                fail("table1", f"{work}: the baseline is not built yet: no run to report")
            click.echo(
                f"baseline  to do: built first from {bitext} in {work / 'baseline'} "
                "(scripts/baseline.py's steps); the systems' steps are planned once it exists"
            )
            return
    assert system is not None
    config = Table1Config(
        system=system,
        models=models,
        moses=moses,
        train_args=tuple(shlex.split(train_args)),
        score_args=tuple(shlex.split(score_args)),
        extend_args=tuple(shlex.split(extend_args)),
        **opts,  # type: ignore[arg-type]
    )
    if plan_only:
        steps, note = drive("table1", config.work, lambda: plan_table1(config))
        click.echo(plan_text(steps, note, config.jobs))
        return
    if interim:
        drive("table1", config.work, lambda: interim_table1(config))
        click.echo((config.work / INTERIM_FILES[1]).read_text(encoding="utf-8"))
        return
    # interrupted, the running command and what it started are ended: one line, 130 or 143
    drive("table1", config.work, lambda: run_table1(config))
    click.echo((config.work / "results.md").read_text(encoding="utf-8"))


def plan_text(steps: list[PlannedStep], note: str, jobs: int = 1) -> str:
    """One line a step, then the counts (tunings apart: they are the hours), then what is left
    at the pace of the finished steps."""
    width = max(len(s.name) for s in steps)
    lines = []
    for s in steps:
        if s.state == "done":
            state = f"done ({s.seconds:.0f} s{'; ' + s.detail if s.detail else ''})"
        else:
            state = s.state + (f": {s.detail}" if s.detail else "")
        lines.append(f"{s.name:<{width}}  {state}")
    tunings = [s for s in steps if s.name.startswith("tune-")]
    lines.append("")
    for what, group in (("steps", steps), ("tunings", tunings)):
        counts = {state: sum(s.state == state for s in group) for state in ("done", "partial")}
        left = len(group) - counts["done"] - counts["partial"]
        lines.append(
            f"{what}: {len(group)}, {counts['done']} done, {counts['partial']} partial, "
            f"{left} to do"
        )
    estimate = time_left(steps, jobs)
    if estimate:
        lines.append(estimate)
    if note:
        lines.append(f"note: {note}")
    return "\n".join(lines)


def time_left(steps: list[PlannedStep], jobs: int) -> str:
    """The tunings and decodings not done, each at the mean of the finished ones of its kind,
    over ``jobs`` at once (never less than a tuning and its decoding one after the other, the
    chain a job runs, where both are left): a rough figure (the systems' tunings differ; a
    partial one counts whole; score, extend and train steps left are not in it), or "" before
    a tuning and a decoding have finished."""
    kinds = {"tune-": "tunings", "decode-": "decodings"}
    total, chain, means = 0.0, 0.0, []
    for prefix, label in kinds.items():
        group = [s for s in steps if s.name.startswith(prefix)]
        done = [s.seconds for s in group if s.state == "done" and s.seconds is not None]
        if not done:
            return ""
        mean = sum(done) / len(done)
        left = sum(s.state != "done" for s in group)
        total += mean * left
        chain += mean if left else 0.0
        means.append(f"{label} {mean:,.0f} s")
    if not total:
        return ""
    others = [s.name for s in steps if s.state != "done" and not s.name.startswith(tuple(kinds))]
    return (
        f"tunings and decodings left: about {_duration(max(total / jobs, chain))} with --jobs "
        f"{jobs}, at the mean of the finished ones ({', '.join(means)}); a rough figure: "
        "systems differ, and a partial tuning counts whole"
        + (f"; not counted: {', '.join(others)}" if others else "")
    )


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def build_system(bitext: Path, work: Path, moses: Path, opts: dict[str, object]) -> Path:
    """The tuned baseline of ``bitext`` in WORK/baseline (each step skipped once done)."""
    config = BaselineConfig(
        corpus=bitext,
        work=work / "baseline",
        moses=moses,
        src=str(opts["src"]),
        tgt=str(opts["tgt"]),
        threads=int(opts["threads"]),  # type: ignore[call-overload]
        max_iterations=int(opts["max_iterations"]),  # type: ignore[call-overload]
    )
    drive("table1", work, lambda: run_baseline(config, echo=lambda m: click.echo(m, err=True)))
    return config.work / "system"


if __name__ == "__main__":
    main()
