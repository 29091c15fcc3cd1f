"""``rescorer plot``: the paper's figures (Figs. 3-5, docs/analyses.md) as PNG files.

Each figure is drawn from the side of the table the model reads: a forward model's source
phrases, an inverse model's target ones (:mod:`rescorer.analysis.sides`); titles say which.
"""

from __future__ import annotations

import os

import click

from rescorer.cli.analysis import (
    analysis_stages,
    column_option,
    load_for_analysis,
    model_name,
    score_in_parts,
    seed_option,
    tell_direction,
    unlearned_note,
)
from rescorer.cli.common import (
    Group,
    device_option,
    model_option,
    progress_option,
    quiet_option,
    say,
    threads_option,
    user_errors,
)
from rescorer.cli.ranges import Int
from rescorer.errors import RescorerError
from rescorer.io.table import MAX_PHRASE_TOKENS


@click.group(cls=Group)
def plot() -> None:
    """PNG figures of the paper: scatter, words, phrases (Figs. 3-5).

    Each writes OUT (a PNG) and beside it OUT's .json (fig.png -> fig.json): what the figure
    shows, read back from it: per panel the title, the axis labels, the points drawn, the words
    or phrases they are and the labels with their boxes. Labels never overlap.

    \b
    Example:
      rescorer plot scatter model/phrase-table.gz -m rnn-model/ -o fig3-scatter.png
      rescorer plot words -m rnn-model/ --side both -o fig4-words.png
      rescorer plot phrases model/phrase-table.gz -m rnn-model/ -o fig5-phrases.png
    """


png_option = click.option(
    "-o", "--output", "out", required=True, help="PNG file to write (and its .json beside it)."
)


@plot.command()
@click.argument("table")
@model_option
@png_option
@click.option(
    "--pairs",
    default=5000,
    show_default=True,
    type=Int(2, 1_000_000),
    help="Pairs drawn, a seeded uniform sample of TABLE's lines.",
)
@column_option
@seed_option
@device_option
@threads_option
@progress_option
@quiet_option
@user_errors
def scatter(
    table: str,
    model_dir: str,
    out: str,
    pairs: int,
    column: int | None,
    seed: int,
    device: str,
    threads: int | None,
    progress_every: float,
    quiet: bool,
) -> None:
    """RNN ln p(e|f) against the table's, over a random sample of pairs (Fig. 3).

    An inverse model's ln p(f|e) is drawn against the table's p(f|e) (its column 0).

    \b
    Example:
      rescorer plot scatter model/phrase-table.gz -m rnn-model/ --pairs 5000 -o fig3.png
    """
    from rescorer.analysis.plots import plot_scatter, sample_pairs

    stages = analysis_stages(quiet, progress_every)
    loaded, sides, announce = load_for_analysis(model_dir, device, threads, quiet)
    tell_direction(sides, quiet)
    sampled = sample_pairs(table, pairs, seed, sides.column_or_default(column), stages)
    announce()
    given, predicted = (sampled.tgt, sampled.src) if sides.inverse else (sampled.src, sampled.tgt)
    logp = score_in_parts(loaded, list(zip(given, predicted, strict=True)), stages)
    title = f"{os.path.basename(table)} vs {model_name(model_dir)} ({sides.direction})"
    caption = plot_scatter(
        out, sampled.table_p, logp, title, sides.probability, note=unlearned_note(loaded)
    )
    if not quiet:
        say(f"{out}: {caption}")


@plot.command()
@model_option
@png_option
@click.option(
    "--side",
    type=click.Choice(["target", "source", "both"]),
    default="target",
    show_default=True,
    help="Which language's embeddings: the table's target side, its source side, or one panel"
    " each (a forward model's decoder reads target words; an inverse model's, source words).",
)
@click.option(
    "--points",
    default=3000,
    show_default=True,
    type=Int(5, 100_000),
    help="Words drawn per panel: the most frequent of the shortlist.",
)
@click.option(
    "--labels",
    default=300,
    show_default=True,
    type=Int(0, 100_000),
    help="Words named at most per panel: the most frequent whose label overlaps no other.",
)
@seed_option
@threads_option
@progress_option
@quiet_option
@user_errors
def words(
    model_dir: str,
    out: str,
    side: str,
    points: int,
    labels: int,
    seed: int,
    threads: int | None,
    progress_every: float,
    quiet: bool,
) -> None:
    """2-D map (t-SNE) of the word embeddings, frequent words named (Fig. 4).

    \b
    Example:
      rescorer plot words -m rnn-model/ --side both --points 2000 --labels 200 -o fig4.png
    """
    from rescorer.analysis.plots import embedding_rows, plot_words

    loaded, sides, announce = load_for_analysis(model_dir, "cpu", threads, quiet)
    announce()
    tell_direction(sides, quiet)
    panels = []
    for s in ["source", "target"] if side == "both" else [side]:
        part = sides.model_side(s)  # the encoder's ("source") or the decoder's ("target")
        vocab = loaded.src_vocab if part == "source" else loaded.tgt_vocab
        panels.append((s, embedding_rows(loaded.model, part), vocab))
    stages = analysis_stages(quiet, progress_every)
    named = plot_words(
        out,
        panels,
        points,
        labels,
        seed,
        f"word embeddings of {model_name(model_dir)} ({sides.direction} model: the encoder "
        f"reads {sides.given} words, the decoder {sides.predicted} words)",
        stages=stages,
        note=unlearned_note(loaded),
    )
    if not quiet:
        say(f"{out}: {' and '.join(f'{n:,}' for n in named)} words named")


@plot.command()
@click.argument("table")
@model_option
@png_option
@click.option(
    "--phrases",
    "size",
    default=5000,
    show_default=True,
    type=Int(5, 100_000),
    help="Phrases drawn, a seeded uniform sample of TABLE's long ones on the side the model"
    " reads (source; target for an inverse model).",
)
@click.option(
    "--min-words",
    default=4,
    show_default=True,
    type=Int(1, MAX_PHRASE_TOKENS),
    help="A long phrase has at least this many words.",
)
@click.option(
    "--zoom",
    multiple=True,
    metavar="PHRASE",
    help="A zoomed panel around this phrase (repeatable; default: 3 random ones).",
)
@click.option(
    "--neighbours",
    default=20,
    show_default=True,
    type=Int(2, 1000),
    help="Phrases in a zoomed panel: the centre's nearest in the map.",
)
@seed_option
@device_option
@threads_option
@progress_option
@quiet_option
@user_errors
def phrases(
    table: str,
    model_dir: str,
    out: str,
    size: int,
    min_words: int,
    zoom: tuple[str, ...],
    neighbours: int,
    seed: int,
    device: str,
    threads: int | None,
    progress_every: float,
    quiet: bool,
) -> None:
    """2-D map (t-SNE) of the summary vectors c of long source phrases (Fig. 5).

    An inverse model's encoder reads target phrases: the map is of long target phrases.

    \b
    Example:
      rescorer plot phrases model/phrase-table.gz -m rnn-model/ --phrases 3000 -o fig5.png
      rescorer plot phrases pt.gz -m rnn-model/ --zoom "the european union" -o fig5.png
    """
    import random

    from rescorer.analysis.plots import long_phrase_sample, plot_phrases, summary_vectors

    stages = analysis_stages(quiet, progress_every)
    loaded, sides, announce = load_for_analysis(model_dir, device, threads, quiet)
    tell_direction(sides, quiet)
    chosen = long_phrase_sample(table, size, min_words, seed, stages, sides)
    announce()
    if len(chosen) < 5:
        raise RescorerError(
            f"{table}: only {len(chosen)} {sides.given} phrases of >= {min_words} words"
        )
    chosen += [z for z in zoom if z not in chosen]
    centres = (
        [chosen.index(z) for z in zoom]
        if zoom
        else random.Random(seed).sample(range(len(chosen)), min(3, len(chosen)))
    )
    vectors = summary_vectors(loaded.model, loaded.src_vocab, chosen, stages=stages)
    plot_phrases(
        out,
        chosen,
        vectors,
        centres,
        neighbours,
        seed,
        f"phrase representations c of {model_name(model_dir)} ({sides.direction} model)",
        min_words=min_words,
        side=sides.given,
        stages=stages,
        note=unlearned_note(loaded),
    )
    if not quiet:
        say(f"{out}: {len(chosen):,} phrases")
