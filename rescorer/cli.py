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


device_option = click.option(
    "--device", default="auto", show_default=True, help="auto, cpu, cuda or cuda:N."
)
precision_option = click.option(
    "--precision",
    type=click.Choice(["auto", "bf16", "fp32"]),
    default="auto",
    show_default=True,
    help="auto: bf16 autocast on GPUs and on CPUs with AMX/AVX512-BF16, else fp32.",
)


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
@device_option
@precision_option
@click.option(
    "--batch-tokens", type=int, help="Padded tokens per batch [default: 4096 on CPU, 65536 on GPU]."
)
@click.option("--workers", default=0, show_default=True, help="Parse/format worker processes.")
@click.option(
    "--compile",
    type=click.Choice(["auto", "yes", "no"]),
    default="auto",
    show_default=True,
    help="torch.compile the recurrence and softmax (auto: for inputs of 4 MiB or more).",
)
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


def weight_options(func: F) -> F:
    """The options that say how to weight features: an ini, overrides, the LM."""
    options = [
        click.option("--weights", "ini", metavar="INI", help="moses.ini: features and weights."),
        click.option(
            "--weight",
            "overrides",
            multiple=True,
            metavar="NAME=V1,V2,..",
            help="Set a feature's weights (repeatable), e.g. TranslationModel0=0.2,0.2,0.2,0.2.",
        ),
        click.option("--feature-name", help="The table's feature when the ini has several."),
        click.option(
            "--lm", "lm_path", metavar="FILE", help="KenLM file instead of the ini's path."
        ),
        click.option("--no-lm", is_flag=True, help="Leave the language model out of the score."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def weight_args(ini: str | None, overrides: tuple[str, ...], **opts: Any) -> dict[str, Any]:
    """Keyword arguments for combine_table / filter_table from weight_options' values."""
    from rescorer.combine import parse_weight_option
    from rescorer.moses_ini import read_ini

    if ini is None and not overrides:
        raise RescorerError("no weights: give --weights moses.ini and/or --weight NAME=v1,...")
    return {
        "ini": read_ini(ini) if ini is not None else None,
        "overrides": [parse_weight_option(text) for text in overrides],
        "feature_name": opts["feature_name"],
        "lm_path": opts["lm_path"],
        "use_lm": not opts["no_lm"],
    }


@cli.command("moses-ini")
@click.argument("ini")
@click.option(
    "--phrase-table",
    "table",
    metavar="TABLE",
    required=True,
    help="The scored table (reads line 1).",
)
@click.option("-o", "--output", "out", required=True, help="The new moses.ini.")
@click.option(
    "--weight", "weights", type=float, multiple=True, help="Per added column (default 0.2 each)."
)
@click.option("--feature-name", help="The phrase-table feature, when several could fit.")
@user_errors
def moses_ini(ini: str, table: str, out: str, weights: tuple[float, ...], **opts: Any) -> None:
    """Point INI's phrase table at a scored table: num-features, weights, path.

    Every other line of INI stays byte for byte. Re-tune afterwards with a fresh mert
    --working-dir (a stale features.list or filtered/ breaks re-tuning).

    \b
    Example:
      rescorer moses-ini model/moses.ini --phrase-table model/phrase-table.rnn.gz \\
          -o model/moses.rnn.ini
    """
    from rescorer.moses_ini import write_scored_ini

    update = write_scored_ini(ini, table, out, weights=weights, feature_name=opts["feature_name"])
    f = update.feature
    click.echo(
        f"{f.name}: num-features {f.num_features} -> {update.num_features}, "
        f"path={update.new_path}; wrote {out}",
        err=True,
    )
    if update.binarize_command:
        click.echo(f"{f.kind} is binarised: build it with\n  {update.binarize_command}", err=True)


@cli.command()
@click.argument("table")
@click.option("-o", "--output", "out", required=True, help="Output (.gz: gzip; - stdout).")
@weight_options
@click.option("--column", "column_only", is_flag=True, help="Write only the score per line.")
@user_errors
def combine(table: str, out: str, column_only: bool, **opts: Any) -> None:
    """Score each pair of TABLE as Moses ranks it for table-limit (log-linear, natural log).

    Writes each line with " ||| SCORE" appended, or with --column one score per line: the
    weighted sum of ln(columns) (floored at -100), word and phrase penalties and the KenLM
    score of the target phrase alone.

    \b
    Example:
      rescorer combine model/phrase-table.gz --weights model/moses.ini -o combined.gz
    """
    from rescorer.combine import combine_table

    stats = combine_table(table, out, column_only=column_only, **weight_args(**opts))
    click.echo(f"combined {stats.lines} phrase pairs into {out}", err=True)


@cli.command("filter")
@click.argument("table")
@click.option("-o", "--output", "out", required=True, help="Output (.gz: gzip; - stdout).")
@click.option(
    "--input", "input_path", metavar="FILE", help="Keep sources that are n-grams (n<=10) of FILE."
)
@click.option("--tokenize", "tokenize_lang", metavar="LANG", help="Tokenise --input (sacremoses).")
@click.option("--lowercase", is_flag=True, help="Lowercase --input (after --tokenize).")
@click.option(
    "--min-score",
    "min_scores",
    multiple=True,
    metavar="COL:TH",
    help="Drop pairs whose column COL (from 0) is below TH (repeatable).",
)
@click.option("--top-k", type=int, help="Per source, keep the K best by the combined score.")
@weight_options
@click.option(
    "--moses-ini",
    "ini_in",
    metavar="INI",
    help="The ini to rewrite for --ini-out (default --weights).",
)
@click.option("--ini-out", metavar="NEW_INI", help="Write an ini whose phrase table is OUT.")
@user_errors
def filter_(table: str, out: str, min_scores: tuple[str, ...], **opts: Any) -> None:
    """Filter TABLE as Moses does, in one order-preserving pass.

    \b
    Example:
      rescorer filter model/phrase-table.gz --input test.en -o filtered.gz
      rescorer filter pt.gz --top-k 20 --weights moses.ini --min-score 2:0.0001 -o pruned.gz
    """
    from rescorer.filter import FilterConfig, filter_table, parse_min_score

    config = FilterConfig(
        input_path=opts.pop("input_path"),
        tokenize_lang=opts.pop("tokenize_lang"),
        lowercase=opts.pop("lowercase"),
        min_scores=tuple(spec for text in min_scores for spec in parse_min_score(text)),
        top_k=opts.pop("top_k"),
    )
    extra = {"ini_in": opts.pop("ini_in"), "ini_out": opts.pop("ini_out")}
    if config.top_k is not None or opts["ini"] is not None or opts["overrides"]:
        extra.update(weight_args(**opts))
    else:
        extra["feature_name"] = opts["feature_name"]
    stats = filter_table(table, out, config, **extra)
    click.echo(stats.summary(), err=True)


@cli.command()
@click.argument("nbest")
@click.option("-o", "--output", "out", default="-", help="Output (default stdout).")
@click.option("--weights", "ini", metavar="INI", help="moses.ini whose [weight] to use.")
@click.option("--weight", "overrides", multiple=True, metavar="NAME=V1,..", help="Set weights.")
@click.option("--decoded-with", metavar="INI", help="The ini that made NBEST: keeps hidden parts.")
@click.option(
    "--feature-file", multiple=True, metavar="FILE", help="Extra 'Name= v ..' per n-best line."
)
@click.option("--nbest-out", is_flag=True, help="Write the re-sorted n-best list, new totals.")
@user_errors
def rerank(nbest: str, out: str, ini: str | None, overrides: tuple[str, ...], **opts: Any) -> None:
    """Rerank a Moses n-best list: print each sentence's best hypothesis under new weights.

    \b
    Example:
      rescorer rerank dev.nbest.gz --weights moses.ini --decoded-with moses.ini
      rescorer rerank nbest.gz --weights moses.ini --feature-file rnn.feats --weight RNN0=0.2
    """
    from rescorer.combine import parse_weight_option
    from rescorer.nbest import RerankConfig, build_weights, rerank_nbest

    weights = build_weights(ini, [parse_weight_option(text) for text in overrides])
    decoded_with = build_weights(opts["decoded_with"], []) if opts["decoded_with"] else None
    config = RerankConfig(weights, decoded_with, opts["feature_file"], opts["nbest_out"])
    stats = rerank_nbest(nbest, out, config)
    click.echo(
        f"{stats.sentences} sentences, {stats.hypotheses} hypotheses; "
        f"1-best changed for {stats.changed}",
        err=True,
    )


@cli.command()
@click.argument("table", required=False)
@click.option("-o", "--output", "out_dir", required=True, help="The model folder to write.")
@click.option("--pairs", nargs=2, metavar="SRC TGT", help="Parallel phrase files, not TABLE.")
@click.option("--src-vocab-size", default=15000, show_default=True, help="Source shortlist ids.")
@click.option("--tgt-vocab-size", default=15000, show_default=True, help="Target shortlist ids.")
@click.option("--hidden-size", default=1000, show_default=True, help="Hidden units (both RNNs).")
@click.option("--embed-size", default=100, show_default=True, help="Rank of the embeddings.")
@click.option("--maxout-units", default=500, show_default=True, help="Deep-output maxout units.")
@click.option("--maxout-pool", default=2, show_default=True, help="Pieces per maxout unit.")
@click.option("--batch-size", default=64, show_default=True, help="Pairs per update.")
@click.option("--max-updates", type=int, help="Stop after this many updates in all.")
@click.option("--max-time", metavar="DURATION", help="Stop after this long, e.g. 30m, 2h.")
@click.option("--patience", default=10, show_default=True, help="Validations w/o gain (0: off).")
@click.option("--valid-fraction", default=0.01, show_default=True, help="Sources held out.")
@click.option("--valid-max-pairs", default=5000, show_default=True, help="Held-out pairs scored.")
@click.option("--valid-every", default=1000, show_default=True, help="Updates per validation.")
@click.option("--sort-batches", default=1, show_default=True, help="Batches regrouped by length.")
@click.option("--seed", default=1, show_default=True, help="Data split, order and init.")
@device_option
@precision_option
@click.option("--log-every", default=100, show_default=True, help="Updates per progress line.")
@click.option("--skip-bad-lines", metavar="FILE", help="Write malformed lines to FILE; go on.")
@click.option("--resume", is_flag=True, help="Continue the run saved in MODEL_DIR.")
@click.option("-q", "--quiet", is_flag=True, help="No progress lines.")
@user_errors
def train(table: str | None, out_dir: str, pairs: tuple[str, str] | None, **opts: Any) -> None:
    """Train the RNN Encoder-Decoder on the phrase pairs of TABLE into MODEL_DIR (-o).

    Paper defaults (Cho et al., 2014). Holds out --valid-fraction of the source phrases, keeps
    the weights with the best validation perplexity, stops on --max-updates, --max-time or
    --patience; SIGINT/SIGTERM save the state for --resume.

    \b
    Example:
      rescorer train model/phrase-table.gz -o rnn-model/ --max-time 3d
      rescorer train model/phrase-table.gz -o rnn-model/ --resume --max-time 3d
    """
    from click.core import ParameterSource

    from rescorer.train import configs_from_flags
    from rescorer.train import train as run_training

    ctx = click.get_current_context()
    given = {k for k in opts if ctx.get_parameter_source(k) is not ParameterSource.DEFAULT}
    resume = opts.pop("resume")
    if (table is None) == (pairs is None):
        raise click.UsageError("give either TABLE or --pairs SRC TGT")
    model_cfg, train_cfg = configs_from_flags(opts, given, out_dir if resume else None)
    run_training(table or pairs, out_dir, model_cfg, train_cfg, resume=resume)  # type: ignore[arg-type]


@cli.command()
@click.argument("model_dir")
@user_errors
def info(model_dir: str) -> None:
    """Print MODEL_DIR's configuration, vocabulary sizes, parameter count and provenance.

    \b
    Example:
      rescorer info rnn-model/
    """
    from rescorer.checkpoint import describe_model_dir

    click.echo(describe_model_dir(model_dir))


def main() -> None:
    """Console entry point."""
    cli()
