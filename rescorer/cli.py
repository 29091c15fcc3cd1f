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


def main() -> None:
    """Console entry point."""
    cli()
