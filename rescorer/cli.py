"""The ``rescorer`` command line: a thin click layer over the library.

Each command parses its flags, builds a config, calls one library function and turns
``RescorerError`` into one line on stderr with exit code 1 (click's usage errors exit with 2).
Heavy imports (torch, kenlm) stay inside the commands so ``rescorer --help`` is instant.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

from rescorer import __version__
from rescorer.errors import RescorerError

F = TypeVar("F", bound=Callable[..., Any])


def user_errors(func: F) -> F:
    """Turn a RescorerError into ``rescorer: error: ...`` on stderr and exit code 1."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except RescorerError as exc:
            click.echo(f"rescorer: error: {exc}", err=True)
            sys.exit(1)
        except BrokenPipeError:
            sys.stderr.close()
            sys.exit(1)

    return wrapper  # type: ignore[return-value]


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="rescorer")
def cli() -> None:
    """Score Moses phrase tables with the RNN Encoder-Decoder of Cho et al. (2014)."""


@cli.command()
@click.argument("table")
@click.option("-o", "--output", "out_dir", required=True, help="Folder for vocab.{src,tgt}.json.")
@click.option("--src-vocab-size", default=15000, show_default=True, help="Source shortlist ids.")
@click.option("--tgt-vocab-size", default=15000, show_default=True, help="Target shortlist ids.")
@user_errors
def vocab(table: str, out_dir: str, src_vocab_size: int, tgt_vocab_size: int) -> None:
    """Build the source and target shortlists of TABLE (gzip or plain, - for stdin).

    \b
    Example:
      rescorer vocab model/phrase-table.gz -o vocab/ --src-vocab-size 15000
    """
    from rescorer.phrase_table import TableReader
    from rescorer.vocab import build_vocabs, save_vocabs

    with TableReader(table) as reader:
        src, tgt = build_vocabs(((e.src, e.tgt) for e in reader), src_vocab_size, tgt_vocab_size)
    paths = save_vocabs(out_dir, src, tgt)
    click.echo(
        f"{reader.stats.lines} pairs: {len(src.words)} source and {len(tgt.words)} target words "
        f"in the shortlists; wrote {paths[0]} and {paths[1]}",
        err=True,
    )


def parse_shard(
    ctx: click.Context, param: click.Parameter, value: str | None
) -> tuple[int, int] | None:
    """``K/N`` -> (K, N) with 1 <= K <= N."""
    if value is None:
        return None
    try:
        k, n = (int(x) for x in value.split("/"))
    except ValueError:
        raise click.BadParameter(f"{value!r}: expected K/N, e.g. 3/16") from None
    if not 1 <= k <= n:
        raise click.BadParameter(f"{value!r}: expected 1 <= K <= N")
    return k, n


@cli.command()
@click.argument("table")
@click.option("-m", "--model", "model_dir", required=True, help="Model folder from rescorer train.")
@click.option("-o", "--output", "out", required=True, help="Output table (.gz: gzip; - stdout).")
@click.option(
    "--column",
    type=click.Choice(["prob", "logp"]),
    default="prob",
    show_default=True,
    help="prob = exp(log p) (Moses takes ln of every column); logp = raw log p for other tools.",
)
@click.option(
    "--word-penalty", is_flag=True, help="Also append exp(#target words not in shortlist)."
)
@click.option("--device", default="auto", show_default=True, help="auto, cpu, cuda or cuda:N.")
@click.option(
    "--precision",
    type=click.Choice(["auto", "bf16", "fp32"]),
    default="auto",
    show_default=True,
    help="auto: bf16 autocast on GPUs and on CPUs with AMX/AVX512-BF16, else fp32.",
)
@click.option("--batch-tokens", default=8192, show_default=True, help="Padded tokens per batch.")
@click.option("--workers", default=0, show_default=True, help="Parse/format worker processes.")
@click.option("--chunk-bytes", default=1 << 20, show_default=True, help="Input bytes per chunk.")
@click.option("--shard", callback=parse_shard, metavar="K/N", help="Score the K-th of N shards.")
@click.option("--resume", is_flag=True, help="Continue an interrupted run from OUT.partial.")
@click.option("--compress-level", default=1, show_default=True, help="gzip level of a .gz OUT.")
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
    from rescorer.pipeline import ScoreConfig, score_table

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


def main() -> None:
    """Console entry point."""
    cli()
