#!/usr/bin/env python3
"""Table 1 of several systems side by side, beside the paper's rows, in Markdown.

Thin over rescorer.experiments.side_by_side: each --edition names a finished Table-1
results.json (scripts/table1.py writes one in its work folder) and the name its rows carry. A Δ,
its interval and its p compare a system with the baseline of its own work folder.

Example (the en-fr software messages, en-fr's (f), and the help prose):

    python scripts/side_by_side.py --edition en-fr=docs/results/table1-2nd/results.json \
        --edition "en-fr (f)=docs/results/table1-enfr-f/results.json" \
        --edition help=docs/results/table1-3rd/results.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from rescorer.errors import RescorerError
from rescorer.experiments.side_by_side import Edition, check_results, editions_table
from rescorer.io.outputs import write_text


def _edition(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> list[Edition]:
    editions = []
    for value in values:
        name, sep, path = value.partition("=")
        if not sep or not name or not path:
            raise click.BadParameter(f"{value!r}: expected NAME=RESULTS.json", ctx, param)
        try:
            results = check_results(json.loads(Path(path).read_text(encoding="utf-8")), path)
        except OSError as e:
            raise click.BadParameter(f"{path}: {e.strerror}", ctx, param) from e
        except ValueError as e:  # not JSON, or not a results.json this version reads
            raise click.BadParameter(str(e) if str(e).startswith(path) else f"{path}: {e}",
                                     ctx, param) from e  # fmt: skip
        editions.append(Edition(name, results))
    return editions


@click.command(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option(
    "--edition",
    "editions",
    multiple=True,
    required=True,
    callback=_edition,
    help="NAME=RESULTS.json, once per work folder, in the order of the rows.",
)
@click.option(
    "-o", "--output", type=click.Path(dir_okay=False, path_type=Path), help="[default: stdout]"
)
def main(editions: list[Edition], output: Path | None) -> None:
    text = editions_table(editions)
    if output is None:
        sys.stdout.write(text)
    else:
        try:
            write_text(output, text)
        except RescorerError as e:
            raise click.ClickException(str(e)) from e


if __name__ == "__main__":
    main()
