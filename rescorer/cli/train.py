"""``rescorer vocab``, ``train`` and ``info``: shortlists, training, model directories."""

from __future__ import annotations

import sys
from typing import Any

import click

from rescorer.cli.common import (
    command_start,
    compile_option,
    device_option,
    precision_option,
    progress_option,
    threads_option,
    user_errors,
    vocab_size_options,
)
from rescorer.cli.ranges import MAX_SEED, MAX_UPDATES, CountOrAuto, Duration, Float, Int
from rescorer.constants import DIRECTIONS
from rescorer.model.config import ModelConfig
from rescorer.train.config import BATCH_AUTO_HELP, TrainConfig

# Each default is written once, in the dataclasses (torch-free modules).
MODEL = ModelConfig()
TRAIN = TrainConfig()


MAX_LAYER = 1 << 14  # hidden units, rank, maxout units: a 16384-unit RNN is 3 GB a matrix
MAX_BATCH = 1 << 16  # pairs per update: 1,000 times the paper's
MAX_VALID_PAIRS = 10_000_000


VALID_FRACTION_HELP = "Sources held out."
SEED_HELP = "Data split, order and init."
DIRECTION_HELP = (
    "forward: p(target|source); inverse: p(source|target) (the encoder reads the target "
    "phrase; --src-vocab-size is then the shortlist of the table's targets)."
)


@click.command()
@click.argument("table")
@click.option("-o", "--output", "out_dir", required=True, help="Folder for vocab.{src,tgt}.json.")
@vocab_size_options
@click.option(
    "--valid-fraction",
    default=TRAIN.valid_fraction,
    type=Float(0, 1, high_open=True),
    show_default=True,
    help=VALID_FRACTION_HELP + " (as train: their words are not counted)",
)
@click.option(
    "--seed", default=TRAIN.seed, type=Int(0, MAX_SEED), show_default=True, help=SEED_HELP
)
@click.option(
    "--direction",
    type=click.Choice(DIRECTIONS),
    default=TRAIN.direction,
    show_default=True,
    help=DIRECTION_HELP,
)
@click.option("--skip-bad-lines", metavar="FILE", help="Write malformed lines to FILE; go on.")
@user_errors
def vocab(table: str, out_dir: str, **opts: Any) -> None:
    """Build the shortlists 'rescorer train TABLE' would build, for 'train --vocab DIR'.

    The same rule as train, in the same code: the most frequent words of each side of the
    training split (the held-out validation sources are left out, as train holds them out with
    the same --valid-fraction and --seed), each pair once. Then train with --vocab vocab/.

    \b
    Example:
      rescorer vocab model/phrase-table.gz -o vocab/ --src-vocab-size 15000
    """
    from rescorer.model.config import ModelConfig as Sizes
    from rescorer.train.data import SHORTLIST_SETTINGS, build_training_vocabs
    from rescorer.vocab import save_vocabs

    sizes = Sizes(
        src_vocab_size=opts.pop("src_vocab_size"), tgt_vocab_size=opts.pop("tgt_vocab_size")
    )
    cfg = TrainConfig(**opts)
    src, tgt = build_training_vocabs(table, sizes, cfg)
    settings = {key: getattr(cfg, key) for key in SHORTLIST_SETTINGS}
    paths = save_vocabs(out_dir, src, tgt, settings)
    click.echo(
        f"rescorer vocab: {len(src.words):,} source and {len(tgt.words):,} target words in the "
        f"shortlists (held out: --valid-fraction {cfg.valid_fraction}, --seed {cfg.seed}; "
        f"{cfg.direction}); wrote {paths[0]} and {paths[1]}",
        err=True,
    )


@click.command()
@click.argument("table", required=False)
@click.option("-o", "--output", "out_dir", required=True, help="The model folder to write.")
@click.option("--pairs", nargs=2, metavar="SRC TGT", help="Parallel phrase files, not TABLE.")
@vocab_size_options
@click.option(
    "--hidden-size",
    default=MODEL.hidden_size,
    type=Int(1, MAX_LAYER),
    show_default=True,
    help="Hidden units (both RNNs).",
)
@click.option(
    "--embed-size",
    default=MODEL.embed_size,
    type=Int(1, MAX_LAYER),
    show_default=True,
    help="Rank of the embeddings.",
)
@click.option(
    "--maxout-units",
    default=MODEL.maxout_units,
    type=Int(1, MAX_LAYER),
    show_default=True,
    help="Deep-output maxout units.",
)
@click.option(
    "--maxout-pool",
    default=MODEL.maxout_pool,
    type=Int(1, 16),
    show_default=True,
    help="Pieces per maxout unit.",
)
@click.option(
    "--batch-size",
    default="auto",
    type=CountOrAuto(1, MAX_BATCH, auto=None),
    show_default=True,
    metavar="N|auto",
    help=f"Pairs per update; {BATCH_AUTO_HELP}. Said in the first line.",
)
@click.option(
    "--max-updates", type=Int(0, MAX_UPDATES), help="Stop after this many updates in all."
)
@click.option(
    "--max-time",
    metavar="DURATION",
    type=Duration(),
    help="Finish the whole command within this long, e.g. 30m, 2h: starting, reading the table,"
    " counting, encoding, compiling, training, the final validation and save and the exit all"
    " count (training stops early enough for the save; a setup that eats it all stops with an"
    " error, nothing written).",
)
@click.option(
    "--patience",
    default=TRAIN.patience,
    type=Int(0, 1_000_000),
    show_default=True,
    help="Validations w/o gain (0: off).",
)
@click.option(
    "--valid-fraction",
    default=TRAIN.valid_fraction,
    type=Float(0, 1, high_open=True),
    show_default=True,
    help=VALID_FRACTION_HELP,
)
@click.option(
    "--valid-max-pairs",
    default=TRAIN.valid_max_pairs,
    type=Int(1, MAX_VALID_PAIRS),
    show_default=True,
    help="Held-out pairs scored.",
)
@click.option(
    "--valid-every",
    default=TRAIN.valid_every,
    type=Int(1, MAX_UPDATES),
    show_default=True,
    help="Updates per validation.",
)
@click.option(
    "--sort-batches",
    default=TRAIN.sort_batches,
    type=Int(1, 10_000),
    show_default=True,
    help="Batches regrouped by length.",
)
@click.option(
    "--seed", default=TRAIN.seed, type=Int(0, MAX_SEED), show_default=True, help=SEED_HELP
)
@click.option(
    "--direction",
    type=click.Choice(DIRECTIONS),
    default=TRAIN.direction,
    show_default=True,
    help=DIRECTION_HELP,
)
@click.option(
    "--vocab",
    metavar="DIR",
    help="Take the shortlists 'rescorer vocab' wrote in DIR (and their sizes), not count them.",
)
@device_option
@threads_option
@precision_option
@compile_option("100,000 training pairs or more; a first compile past 4 minutes is given up")
@click.option(
    "--capture",
    type=click.Choice(["auto", "on", "off", "compile"]),
    default=TRAIN.capture,
    show_default=True,
    help="The whole update (forward, backward, clip, Adadelta) at fixed shapes, batches bucketed"
    " by length, replayed as a CUDA graph (on), or through torch.compile(mode='reduce-overhead')"
    " (compile); auto: off on every device until the GPU tests have passed on a GPU (on a CPU,"
    " on runs the fixed-shape update without a graph). Said in the first line.",
)
@click.option(
    "--log-every",
    default=TRAIN.log_every,
    type=Int(1, MAX_UPDATES),
    show_default=True,
    help="Updates per progress line (and log record).",
)
@progress_option
@click.option("--skip-bad-lines", metavar="FILE", help="Write malformed lines to FILE; go on.")
@click.option("--resume", is_flag=True, help="Continue the run saved in MODEL_DIR.")
@click.option(
    "--profile",
    is_flag=True,
    help="At the end, print where the updates' time went, phase by phase (not under torchrun).",
)
@click.option("-q", "--quiet", is_flag=True, help="No progress lines.")
@user_errors
def train(table: str | None, out_dir: str, pairs: tuple[str, str] | None, **opts: Any) -> None:
    """Train the RNN Encoder-Decoder on the phrase pairs of TABLE into MODEL_DIR (-o).

    Paper defaults (Cho et al., 2014); --direction inverse trains p(source|target) on the same
    pairs, for a second column. Holds out --valid-fraction of the source phrases, keeps
    the weights with the best validation perplexity, stops on --max-updates, --max-time or
    --patience; SIGINT/SIGTERM save the state for --resume.

    \b
    Example:
      rescorer train model/phrase-table.gz -o rnn-model/ --max-time 3d
      rescorer train model/phrase-table.gz -o rnn-model/ --resume --max-time 3d
      rescorer train model/phrase-table.gz -o rnn-inverse/ --direction inverse
    """
    from click.core import ParameterSource

    from rescorer.train.config import configs_from_flags
    from rescorer.train.loop import train as run_training

    started = command_start()  # where --max-time counts from: the process's start

    ctx = click.get_current_context()
    given = {k for k in opts if ctx.get_parameter_source(k) is not ParameterSource.DEFAULT}
    resume = opts.pop("resume")
    if opts["batch_size"] is None:  # auto: chosen for the device at the start (a resume keeps its)
        opts["batch_size"], opts["batch_auto"] = TRAIN.batch_size, True
        given.discard("batch_size")
    if (table is None) == (pairs is None):
        raise click.UsageError("give either TABLE or --pairs SRC TGT")
    if table is not None:
        from rescorer.io.reordering import not_a_reordering_table, sniff_table_kind

        not_a_reordering_table(table, sniff_table_kind(table))  # its first lines, before any work
    model_cfg, train_cfg = configs_from_flags(opts, given, out_dir if resume else None)
    result = run_training(
        table or pairs,  # type: ignore[arg-type]
        out_dir,
        model_cfg,
        train_cfg,
        resume=resume,
        started=started,
    )
    if result.signal:  # interrupted, state saved: 130 for SIGINT, 143 for SIGTERM, as a shell
        sys.exit(128 + result.signal)


@click.command()
@click.argument("model_dir")
@user_errors
def info(model_dir: str) -> None:
    """Print MODEL_DIR's configuration, vocabulary sizes, parameter count and provenance.

    \b
    Example:
      rescorer info rnn-model/
    """
    from rescorer.model.checkpoint import describe_model_dir

    click.echo(describe_model_dir(model_dir))
