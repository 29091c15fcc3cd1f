#!/usr/bin/env python3
"""A parallel corpus of LibreOffice help prose, rebuilt from Debian's packages by one command.

Thin over rescorer.experiments.help_corpus (its docstring says how pages are aligned): the two
help packages are fetched with `apt-get download` (never installed), unpacked with `dpkg -x`,
aligned by page and paragraph id, cleaned and split; the folder gets train/dev/test.{SRC,TGT}
(raw text), *.origin, corpus.json (versions, checksums, counts), files.sha256 and a README.
--out is checked (a folder that can be made and written in) before anything is downloaded.
Ctrl-C or SIGTERM ends the command running (dpkg -x and what it started) and exits 130 or 143
with one line; the downloads are kept for the next run.

Example (the help-prose system of Table 1's third edition):

    python scripts/help_corpus.py -o runs/help/corpus --dev 1500 --test 5000

Another language: `--tgt-package libreoffice-help-de --tgt de`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from rescorer.cli.drivers import LINES, drive
from rescorer.cli.ranges import MAX_SEED, Int
from rescorer.experiments.help_corpus import CorpusConfig, build


def corpus_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """The corpus's settings (CorpusConfig's fields but its folder), for this script and for
    scripts/help_system.py."""
    options = [
        click.option("--src-package", default="libreoffice-help-en-us", show_default=True),
        click.option("--tgt-package", default="libreoffice-help-fr", show_default=True),
        click.option("--src", default="en", show_default=True, help="Suffix of the source files."),
        click.option("--tgt", default="fr", show_default=True, help="Suffix of the target files."),
        click.option(
            "--dev",
            default=1500,
            type=LINES,
            show_default=True,
            help="Distinct sources in dev.",
        ),
        click.option(
            "--test",
            default=5000,
            type=LINES,
            show_default=True,
            help="Distinct sources in test.",
        ),
        click.option(
            "--seed",
            default=12345,
            type=Int(0, MAX_SEED),
            show_default=True,
            help="The split's shuffle seed.",
        ),
    ]
    for option in reversed(options):
        command = option(command)
    return command


@click.command(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option("-o", "--out", required=True, type=click.Path(path_type=Path), help="Folder.")
@corpus_options
def main(**opts: object) -> None:
    """Build the corpus into --out (downloads kept in OUT/debs and reused)."""
    config = CorpusConfig(**opts)  # type: ignore[arg-type]
    drive("help-corpus", config.out, lambda: build(config, say=lambda m: click.echo(m, err=True)))


if __name__ == "__main__":
    main()
