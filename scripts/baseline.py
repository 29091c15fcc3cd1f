#!/usr/bin/env python3
"""A tuned Moses phrase-based baseline from a bitext, by one command, with the real tools.

Thin over rescorer.experiments.baseline (its docstring lists the steps): tokenise and lowercase
with Moses' scripts, clean-corpus-n 1-80, a 5-gram KenLM of the target side, train-model.perl
(MGIZA++, grow-diag-final-and, msd-bidirectional-fe), cube pruning, MERT on dev, then the test
set decoded and scored. Every step runs in its own folder of --work and is skipped once done,
so the same command after a kill goes on where it stopped (train-model.perl from its first
unfinished step of nine, MERT from its last iteration). The training shows a line per
train-model.perl step with its time, and MGIZA++'s iterations as they finish. Ctrl-C or SIGTERM
ends the command running and everything it started, and exits 130 or 143 with one line.

CORPUS holds train.SRC train.TGT dev.SRC dev.TGT test.SRC test.TGT (raw text, one segment a
line; --tokenized when they are tokenised and lowercased already). WORK/system is then a Moses
system folder that scripts/table1.py takes as its SYSTEM.

Example (the help-prose system of Table 1's third edition; scripts/help_system.py runs both
commands as one):

    python scripts/help_corpus.py -o runs/help/corpus
    nice python scripts/baseline.py runs/help/corpus --work runs/help/baseline
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import click

from rescorer.cli.drivers import (
    LINES,
    drive,
    max_iterations_option,
    mert_seed_option,
    moses_option,
    threads_option,
)
from rescorer.cli.ranges import Int
from rescorer.experiments.baseline import DEFAULT_MERT_SEED, BaselineConfig, run_baseline

HERE = Path(__file__).resolve().parent


@click.command(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.argument("corpus", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--work", required=True, type=click.Path(path_type=Path), help="Work folder.")
@moses_option(HERE.parent.parent / "shared" / "tools" / "moses", "bin/, scripts/, mgiza/")
@click.option("--src", default="en", show_default=True, help="Source language (file suffix).")
@click.option("--tgt", default="fr", show_default=True, help="Target language (file suffix).")
@click.option("--tokenized", is_flag=True, help="The corpus is tokenised and lowercased.")
@click.option(
    "--max-length",
    default=80,
    type=Int(1, 1000),
    show_default=True,
    help="clean-corpus-n's limit (words a side).",
)
@click.option(
    "--lm-order",
    default=5,
    type=Int(1, 6, "(the KenLM built into Moses loads orders up to 6)"),
    show_default=True,
)
@click.option(
    "--discount-fallback",
    is_flag=True,
    help="lmplz --discount_fallback from the start [default: only when lmplz asks].",
)
@click.option("--max-phrase-length", default=7, type=Int(1, 100), show_default=True)
@click.option(
    "--no-cube-pruning",
    "cube_pruning",
    flag_value=False,
    default=True,
    help="Keep Moses' default search (cube pruning is added before tuning).",
)
@max_iterations_option(15)
@click.option("--dev-lines", type=LINES, help="Tune on the first N dev lines [default: all].")
@threads_option(len(os.sched_getaffinity(0)), "usable CPUs")
@mert_seed_option(DEFAULT_MERT_SEED)
def main(**opts: object) -> None:
    """Build, tune and evaluate a Moses baseline from CORPUS in --work."""
    config = BaselineConfig(**opts)  # type: ignore[arg-type]
    record = drive(
        "baseline",
        config.work,
        lambda: run_baseline(config, echo=lambda m: click.echo(m, err=True)),
    )
    click.echo(json.dumps(record, indent=2))
    click.echo(f"system folder: {config.work / 'system'}", err=True)


if __name__ == "__main__":
    main()
