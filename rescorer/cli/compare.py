"""``rescorer compare``: the top targets of source phrases by the table and by the RNN (the
paper's Table 2, docs/analyses.md). What it shares with ``sample`` and ``plot`` is in
cli/analysis.py."""

from __future__ import annotations

from typing import Any

import click

from rescorer.cli.analysis import (
    analysis_stages,
    column_option,
    echo_lines,
    load_for_analysis,
    score_in_parts,
    seed_option,
    tell_direction,
)
from rescorer.cli.common import (
    device_option,
    model_option,
    progress_option,
    quiet_option,
    threads_option,
    user_errors,
)
from rescorer.cli.ranges import Float, Int
from rescorer.io.table import MAX_PHRASE_TOKENS


@click.command()
@click.argument("table")
@click.argument("phrases", nargs=-1)
@model_option
@click.option(
    "--frequent",
    default=5,
    show_default=True,
    type=Int(0, 10_000),
    help="Random frequent long phrases compared (without PHRASES).",
)
@click.option(
    "--rare",
    default=5,
    show_default=True,
    type=Int(0, 10_000),
    help="Random rare long phrases compared (without PHRASES).",
)
@click.option(
    "--band",
    default=0.1,
    show_default=True,
    type=Float(0, 1, low_open=True),
    help="Frequent/rare: the top/bottom share of long phrases by the table's count of them.",
)
@click.option(
    "--min-words",
    default=4,
    show_default=True,
    type=Int(1, MAX_PHRASE_TOKENS),
    help="A long phrase has at least this many words.",
)
@click.option(
    "--min-candidates",
    "--min-targets",
    "min_candidates",
    default=3,
    show_default=True,
    type=Int(1, 10_000),
    help="Random phrases are paired with at least this many phrases in TABLE.",
)
@click.option(
    "--summary-phrases",
    "--summary-sources",
    "summary_phrases",
    default=1000,
    show_default=True,
    type=Int(0, 10_000_000),
    help="Random long phrases the length summary is measured on (0: none).",
)
@column_option
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "markdown"]),
    default="text",
    show_default=True,
    help="markdown: one table row per given phrase, as in docs/analyses.md.",
)
@click.option("-o", "--output", "out", required=True, help="Output file (.gz: gzip; - stdout).")
@seed_option
@device_option
@threads_option
@progress_option
@quiet_option
@user_errors
def compare(
    table: str,
    phrases: tuple[str, ...],
    model_dir: str,
    frequent: int,
    rare: int,
    band: float,
    min_words: int,
    min_candidates: int,
    summary_phrases: int,
    column: int | None,
    fmt: str,
    out: str,
    seed: int,
    device: str,
    threads: int | None,
    progress_every: float,
    quiet: bool,
) -> None:
    """The top-3 targets of source phrases by the table's p(e|f) and by the RNN (Table 2).

    PHRASES, or a seeded random choice of long frequent and rare source phrases; then the mean
    target length of each side's top choice over --summary-phrases random long sources. An
    inverse model (train --direction inverse) reads target phrases: it ranks the sources of
    target PHRASES by the table's p(f|e) and by the RNN.

    \b
    Example:
      rescorer compare model/phrase-table.gz -m rnn-model/ --format markdown -o table2.md
      rescorer compare model/phrase-table.gz "n&apos; est pas" -m inverse-model/ -o -
    """
    from rescorer.analysis.compare import compare_table, format_markdown, format_text

    loaded, sides, announce = load_for_analysis(model_dir, device, threads, quiet)
    tell_direction(sides, quiet)
    stages = analysis_stages(quiet, progress_every)

    def score(pairs: list[tuple[str, str]]) -> Any:
        announce()
        return score_in_parts(loaded, pairs, stages)

    rows, summary = compare_table(
        table,
        score,
        phrases=phrases,
        frequent=frequent,
        rare=rare,
        band=band,
        min_words=min_words,
        min_candidates=min_candidates,
        summary_phrases=summary_phrases,
        seed=seed,
        column=column,
        stages=stages,
        sides=sides,
    )
    fmt_rows = format_markdown if fmt == "markdown" else format_text
    lines = fmt_rows(rows, sides=sides)
    if summary is not None:
        lines += ["", *summary.lines()]
    echo_lines(out, iter(lines))
