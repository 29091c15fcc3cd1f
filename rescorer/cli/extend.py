"""``rescorer extend``: new phrase pairs from the model, for Moses (docs/extend.md)."""

from __future__ import annotations

import sys
from typing import Any

import click

from rescorer.cli.common import (
    chunk_bytes_option,
    device_option,
    interrupt_status,
    progress_option,
    score_precision_option,
    threads_option,
    user_errors,
)
from rescorer.cli.ranges import MAX_SEED, Float, Int, Shard
from rescorer.cli.score import workers_option
from rescorer.durations import MAX_SECONDS
from rescorer.extend.config import FILL_UP, SECOND_TABLE, ExtendConfig

EXTEND = ExtendConfig()  # each default is written once, there
MAX_BEAM = 1000  # targets per source phrase
MAX_SAMPLES = 10_000  # draws per source phrase
MAX_BATCH_SOURCES = 1 << 16  # source phrases per beam batch: 16x a GPU's default


@click.command()
@click.argument("table")
@click.option(
    "-m",
    "--model",
    "model_dirs",
    required=True,
    multiple=True,
    help="Model folder; the first (forward) generates, each gives the new pairs a column, "
    "in this order (an inverse one: p(source|target)).",
)
@click.option("-o", "--output", "out", required=True, help="Output table (.gz: gzip; - stdout).")
@click.option(
    "--form",
    type=click.Choice([FILL_UP, SECOND_TABLE]),
    default=EXTEND.form,
    show_default=True,
    help="fill-up: TABLE's lines plus the new ones, with a provenance column (1 or 2.718); "
    "second-table: the new pairs alone, for a second TranslationModel.",
)
@click.option(
    "-n",
    "--beam",
    type=Int(1, MAX_BEAM),
    default=EXTEND.beam,
    show_default=True,
    help="Beam width: the N best targets per source phrase (those TABLE has are dropped).",
)
@click.option(
    "--samples",
    type=Int(0, MAX_SAMPLES),
    default=EXTEND.samples,
    show_default=True,
    metavar="K",
    help="Also draw K samples per source phrase (the paper's sampling) and add the distinct "
    "finished ones the beam did not propose (those TABLE has are dropped).",
)
@click.option(
    "--seed",
    type=Int(0, MAX_SEED),
    default=EXTEND.seed,
    show_default=True,
    help="Seed of --samples' draws (each source phrase has a stream of its own: the same draws "
    "whatever the chunks, shards or --resume).",
)
@click.option(
    "--input",
    metavar="FILE",
    help="Only the source phrases that are n-grams (n <= 10) of FILE's lines (filter --input).",
)
@click.option(
    "--lex-f2e", metavar="FILE", help="train-model.perl's model/lex.f2e (with --lex-e2f)."
)
@click.option(
    "--lex-e2f",
    metavar="FILE",
    help="train-model.perl's model/lex.e2f: lexical weights (each p in [0, 1]; 0 is one: "
    "train-model.perl writes p to 7 decimals).",
)
@click.option(
    "--floor",
    type=Float(0, 1, low_open=True),
    default=EXTEND.floor,
    show_default=True,
    help="The value of a feature a new pair has none for (phrase probabilities; lexical "
    "weights without --lex-*; docs/extend.md).",
)
@device_option
@score_precision_option
@threads_option
@click.option(
    "--batch-sources",
    type=Int(1, MAX_BATCH_SOURCES),
    help="Source phrases per beam batch [default: 256 on CPU, 4096 on GPU].",
)
@workers_option(EXTEND.workers, "Read/write")
@chunk_bytes_option
@click.option(
    "--checkpoint-every",
    default=EXTEND.checkpoint_every,
    type=Float(0, MAX_SECONDS),
    show_default=True,
    metavar="SECONDS",
    help="Record progress for --resume this often; 0: after every chunk.",
)
@click.option("--shard", type=Shard(), metavar="K/N", help="Extend the K-th of N shards.")
@click.option("--resume", is_flag=True, help="Continue an interrupted run from OUT.partial.")
@click.option(
    "--restart",
    is_flag=True,
    help="Start over, discarding an interrupted run's OUT.partial (refused without this or "
    "--resume).",
)
@click.option(
    "--force", is_flag=True, help="With --resume: replace a complete OUT; without: as --restart."
)
@click.option(
    "--compress-level",
    default=EXTEND.compresslevel,
    type=click.IntRange(0, 9),
    show_default=True,
    help="gzip (zlib) level of a .gz OUT.",
)
@click.option("--skip-bad-lines", metavar="FILE", help="Write malformed lines to FILE; go on.")
@progress_option
@click.option("-q", "--quiet", is_flag=True, help="No progress bar or summary.")
@user_errors
def extend(
    table: str, model_dirs: tuple[str, ...], out: str, shard: tuple[int, int] | None, **opts: Any
) -> None:
    """Add the model's own target phrases for TABLE's source phrases: new pairs only.

    The first -m model's beam search proposes the N best targets of each source phrase (or
    of those an --input needs), and with --samples K its K draws add the distinct finished
    ones; targets TABLE has for it are dropped, and targets with a word outside the shortlist
    are never proposed. Each new pair gets one column per -m model
    (p = exp(log p), as rescorer score writes it) and the features docs/extend.md defines.

    --form fill-up writes TABLE's lines unchanged but for one more column, the provenance
    (1 for TABLE's pairs, 2.718 = exp(1) for new ones, Moses' combine-ptables.pl --mode=fillup
    convention), and the new lines among them in Moses' byte order. TABLE may have Moses' 4
    columns, or those plus the columns rescorer score added with the same -m models. --form
    second-table writes the new pairs alone, for a second TranslationModel (rescorer moses-ini
    --second-table). Resumable and shardable as score is (merge joins the shards); the record
    keeps the sha256 of --input and the lex files, and --resume refuses one changed since.

    As score, it says first how it computes (device, precision, threads), warns when a model
    has NOT LEARNED (the first one's new pairs may be noise), and stops on a model whose
    scores are not finite (weights that overflow), writing nothing.

    \b
    Example:
      rescorer extend model/phrase-table.rnn.gz -m rnn/ -n 5 --input test.en \\
          --lex-f2e model/lex.f2e --lex-e2f model/lex.e2f -o model/phrase-table.ext.gz
      rescorer extend model/phrase-table.gz -m rnn/ -m rnn-inv/ --form second-table -o new.gz
    """
    from rescorer.extend.pipeline import extend_table

    if table == "-" and (opts["resume"] or shard):
        raise click.UsageError("--resume and --shard need a regular input file, not stdin (-)")
    if out == "-" and opts["resume"]:
        raise click.UsageError("--resume needs an output file, not stdout (-o -)")
    if opts["resume"] and opts["restart"]:
        raise click.UsageError("--resume continues OUT.partial, --restart discards it: give one")
    config = ExtendConfig(shard=shard, compresslevel=opts.pop("compress_level"), **opts)
    try:
        stats = extend_table(table, list(model_dirs), out, config)
    except KeyboardInterrupt as exc:  # SIGINT, or SIGTERM (common.Terminated)
        where = (
            "output to stdout cannot be resumed"
            if out == "-"
            else (f"{out}.partial is kept: run the same command with --resume to continue")
        )
        click.echo(f"rescorer extend: interrupted; {where}", err=True)
        sys.exit(interrupt_status(exc))
    if stats.already_done:
        if not config.quiet:
            click.echo(f"rescorer extend: {out}: this shard is already complete", err=True)
        return
    if not config.quiet:
        rate = stats.searched / max(stats.seconds, 1e-9)
        resumed = stats.resumed_from_line  # the counts but lines written are this run's
        click.echo(
            "rescorer extend: "
            + (f"resumed at line {resumed:,}, this run: " if resumed > 1 else "")
            + f"{stats.searched:,} source phrases searched in "
            f"{stats.seconds:.1f} s ({rate:,.1f}/s, {stats.device}, {stats.precision}); "
            f"{stats.proposed:,} targets proposed, {stats.known:,} already in the table, "
            + (f"{stats.sampled:,} more new ones sampled, " if config.samples else "")
            + f"{stats.new_pairs:,} new pairs; {stats.lines_out:,} lines written to {out}",
            err=True,
        )
    if stats.bad:
        click.echo(
            f"rescorer extend: skipped {stats.bad:,} malformed line(s), written to "
            f"{config.skip_bad_lines}; first: {stats.bad_examples[0]}",
            err=True,
        )
