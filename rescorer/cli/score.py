"""``rescorer score``: the feature column(s) for every line of a phrase table."""

from __future__ import annotations

from typing import Any

import click

from rescorer.cli.common import device_option, parse_shard, precision_option, user_errors
from rescorer.score.pipeline import ScoreConfig

SCORE = ScoreConfig()  # each default is written once, there


@click.command()
@click.argument("table")
@click.option("-m", "--model", "model_dir", required=True, help="Model folder from rescorer train.")
@click.option("-o", "--output", "out", required=True, help="Output table (.gz: gzip; - stdout).")
@click.option(
    "--column",
    type=click.Choice(["prob", "logp"]),
    default=SCORE.column,
    show_default=True,
    help="prob = exp(log p) (Moses takes ln of every column); logp = raw log p for other tools.",
)
@click.option(
    "--word-penalty", is_flag=True, help="Also append exp(#target words not in shortlist)."
)
@device_option
@precision_option
@click.option(
    "--batch-tokens",
    type=click.IntRange(min=1),
    help="Padded tokens per batch [default: 4096 on CPU, 65536 on GPU].",
)
@click.option(
    "--workers",
    default=SCORE.workers,
    type=click.IntRange(min=0),
    show_default=True,
    help="Parse/format worker processes.",
)
@click.option(
    "--compile",
    type=click.Choice(["auto", "yes", "no"]),
    default=SCORE.compile,
    show_default=True,
    help="torch.compile the recurrence and softmax (auto: for inputs of 4 MiB or more).",
)
@click.option(
    "--chunk-bytes",
    default=SCORE.chunk_bytes,
    type=click.IntRange(min=1),
    show_default=True,
    help="Input bytes per chunk.",
)
@click.option("--shard", callback=parse_shard, metavar="K/N", help="Score the K-th of N shards.")
@click.option("--resume", is_flag=True, help="Continue an interrupted run from OUT.partial.")
@click.option(
    "--compress-level",
    default=SCORE.compresslevel,
    type=click.IntRange(0, 3),
    show_default=True,
    help="gzip level of a .gz OUT (isal: 0-3).",
)
@click.option("--skip-bad-lines", metavar="FILE", help="Write malformed lines to FILE; go on.")
@click.option("-q", "--quiet", is_flag=True, help="No progress bar or summary.")
@user_errors
def score(table: str, model_dir: str, out: str, shard: tuple[int, int] | None, **opts: Any) -> None:
    """Append log p(target|source) to the scores of every line of TABLE.

    TABLE is a Moses phrase table, plain or gzip (detected by content), - for stdin. Every byte
    outside the score field, the line count and the order stay as they are. Then raise
    num-features in moses.ini (rescorer moses-ini) and re-tune.

    \b
    Example:
      rescorer score model/phrase-table.gz -m rnn-model/ -o model/phrase-table.rnn.gz
      rescorer score pt.gz -m rnn-model/ -o pt.3of16.gz --shard 3/16 --resume
    """
    from rescorer.score.pipeline import ScoreConfig, score_table

    config = ScoreConfig(shard=shard, compresslevel=opts.pop("compress_level"), **opts)
    stats = score_table(table, model_dir, out, config)
    if not config.quiet:
        rate = stats.pairs_scored / max(stats.seconds, 1e-9)
        click.echo(
            f"scored {stats.pairs_scored:,} pairs in {stats.seconds:.1f} s ({rate:,.0f} pairs/s, "
            f"{stats.device}, {stats.precision}); {stats.lines_out:,} of {stats.lines_in:,} "
            f"lines written to {out}",
            err=True,
        )
    if stats.bad:
        click.echo(
            f"skipped {stats.bad} malformed line(s), written to {config.skip_bad_lines}; first: "
            f"{stats.bad_examples[0]}",
            err=True,
        )
