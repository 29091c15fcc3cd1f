#!/usr/bin/env python3
"""The paper's Table 1 on a Moses system folder: baseline, +RNN, +RNN+WP, +RNN top-K table.

Thin over rescorer.experiments.table1: every step runs in its own folder of --work and is
skipped when complete, so re-running the same command after a kill goes on where it stopped.

Example (the en-fr system, a model trained before, 3 MERT runs per system):

    python scripts/table1.py ../shared/data/en-fr --model runs/h256 --work runs/table1 --runs 3
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

import click

from rescorer.cli.common import check_duration
from rescorer.errors import RescorerError
from rescorer.experiments.table1 import Table1Config, run_table1

HERE = Path(__file__).resolve().parent


@click.command(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.argument("system", type=click.Path(file_okay=False, path_type=Path))
@click.option("--work", required=True, type=click.Path(path_type=Path), help="Work folder.")
@click.option("--model", type=click.Path(path_type=Path), help="A rescorer model directory.")
@click.option(
    "--train",
    "train_budget",
    metavar="BUDGET",
    callback=check_duration,
    help="Train a model first (e.g. 2h).",
)
@click.option("--train-args", default="", help="More `rescorer train` flags, one string.")
@click.option("--score-args", default="", help="More `rescorer score` flags, one string.")
@click.option(
    "--moses",
    type=click.Path(file_okay=False, path_type=Path),
    default=HERE.parent.parent / "shared" / "tools" / "moses",
    show_default="../shared/tools/moses",
    help="The Moses toolkit (bin/, scripts/).",
)
@click.option("--runs", default=3, show_default=True, help="Tuning runs per system (K).")
@click.option("--dev-lines", type=int, help="Tune on the first N dev sentences [default: all].")
@click.option("--max-iterations", default=10, show_default=True, help="Tuning iterations at most.")
@click.option("--tuner", type=click.Choice(["mert", "mira"]), default="mert", show_default=True)
@click.option("--top-k", default=5, show_default=True, help="System (d): targets per source.")
@click.option(
    "--new-weight",
    default=0.05,
    show_default=True,
    help="Starting weight of the RNN (and WP) column for tuning.",
)
@click.option("--threads", default=os.cpu_count() or 1, show_default="all cores")
@click.option("--seed", default=1, show_default=True, help="Run r tunes with seed SEED*1000+r.")
@click.option("--src", default="en", show_default=True, help="Source suffix of dev/test files.")
@click.option("--tgt", default="fr", show_default=True, help="Target suffix of dev/test files.")
@click.option("--feature-name", help="The phrase-table feature when the ini has several.")
@click.option("--trials", default=10000, show_default=True, help="Randomisation trials.")
def main(system: Path, train_args: str, score_args: str, moses: Path, **opts: object) -> None:
    """Tune and evaluate the four systems of Table 1 on SYSTEM (a Moses system folder)."""
    config = Table1Config(
        system=system,
        moses=moses,
        train_args=tuple(shlex.split(train_args)),
        score_args=tuple(shlex.split(score_args)),
        **opts,  # type: ignore[arg-type]
    )
    try:
        run_table1(config)
    except RescorerError as exc:
        click.echo(f"table1: error: {exc}", err=True)
        sys.exit(1)
    click.echo((config.work / "results.md").read_text(encoding="utf-8"))


if __name__ == "__main__":
    main()
