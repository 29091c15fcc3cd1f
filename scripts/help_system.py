#!/usr/bin/env python3
"""The help-prose Moses system of Table 1's third edition from Debian's packages, by one command.

Thin over rescorer.experiments.help_system: the corpus (scripts/help_corpus.py's steps:
`apt-get download` of the two LibreOffice help packages, never installed, `dpkg -x`, paragraphs
aligned by page and id, cleaned and split) into WORK/corpus, then the tuned baseline
(scripts/baseline.py's steps: Moses' tokenizer and lowercasing, clean-corpus-n 1-80, a 5-gram
KenLM, train-model.perl with MGIZA++, grow-diag-final-and and msd-bidirectional-fe, MERT on dev,
test decoded and scored) in WORK/baseline. Every step is skipped once done: the same command
after a kill goes on where it stopped. WORK/baseline/system is the system folder that
scripts/table1.py takes.

Example (the third edition's system; hours on two cores):

    nice python scripts/help_system.py --work runs/help

Another help language: `--tgt-package libreoffice-help-de --tgt de`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import click
from help_corpus import corpus_options

from rescorer.cli.drivers import (
    drive,
    max_iterations_option,
    mert_seed_option,
    moses_option,
    threads_option,
)
from rescorer.experiments.baseline import DEFAULT_MERT_SEED, BaselineConfig
from rescorer.experiments.help_corpus import CorpusConfig
from rescorer.experiments.help_system import build_help_system

HERE = Path(__file__).resolve().parent


@click.command(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option("--work", required=True, type=click.Path(path_type=Path), help="Work folder.")
@corpus_options
@moses_option(HERE.parent.parent / "shared" / "tools" / "moses", "bin/, scripts/, mgiza/")
@max_iterations_option(15)
@threads_option(len(os.sched_getaffinity(0)), "usable CPUs")
@mert_seed_option(DEFAULT_MERT_SEED)
def main(
    work: Path,
    moses: Path,
    max_iterations: int,
    threads: int,
    mert_seed: int | None,
    **corpus_opts: Any,
) -> None:
    """Build the corpus into WORK/corpus and a tuned Moses baseline from it in WORK/baseline."""
    # corpus_options are named as CorpusConfig's fields (help_corpus.py passes them so too)
    corpus = CorpusConfig(out=work / "corpus", **corpus_opts)
    baseline = BaselineConfig(
        corpus=corpus.out,
        work=work / "baseline",
        moses=moses,
        max_iterations=max_iterations,
        threads=threads,
        mert_seed=mert_seed,
    )
    record = drive(
        "help-system",
        work,
        lambda: build_help_system(work, corpus, baseline, echo=lambda m: click.echo(m, err=True)),
    )
    click.echo(json.dumps(record, indent=2))
    click.echo(f"system folder: {work / 'baseline' / 'system'}", err=True)


if __name__ == "__main__":
    main()
