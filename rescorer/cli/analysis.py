"""``rescorer sample``, ``compare`` and ``plot``: the paper's analyses (docs/analyses.md).

They run in fp32 (their figures are about the model, not about speed) on ``--device``.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import click

from rescorer.cli.common import (
    Group,
    command_name,
    device_option,
    model_option,
    progress_option,
    quiet_option,
    say,
    user_errors,
)
from rescorer.errors import RescorerError

if TYPE_CHECKING:
    import numpy as np

    from rescorer.io.progress import Stages
    from rescorer.model.checkpoint import LoadedModel

seed_option = click.option("--seed", default=1, show_default=True, help="Random choices.")


def _load(model_dir: str, device: str) -> LoadedModel:
    from rescorer.device import resolve_device
    from rescorer.model.checkpoint import load_model_dir

    loaded = load_model_dir(model_dir, resolve_device(device))
    if loaded.direction != "forward":  # the analyses read table pairs as (source, target)
        raise RescorerError(
            f"{model_dir}: an {loaded.direction}-direction model; sample, compare and plot show"
            " p(target | source) and take forward models only (for now)"
        )
    return loaded


def _phrases(phrases: Sequence[str], input_path: str | None) -> list[str]:
    from rescorer.io.files import open_text

    found = [p.strip() for p in phrases]
    if input_path is not None:
        with open_text(input_path) as lines:
            found += [line.strip() for line in lines if line.strip()]
    if not found:
        raise click.UsageError("give source phrases, or --input FILE")
    return found


def _echo_lines(out: str, lines: Iterator[str]) -> None:
    from rescorer.io.files import open_output

    if out == "-":
        for line in lines:
            sys.stdout.write(line + "\n")
        sys.stdout.flush()
        return
    with open_output(out) as stream:
        for line in lines:
            stream.write(line + "\n")


def _stages(quiet: bool, progress_every: float) -> Stages:
    from rescorer.io.progress import Stages

    return Stages(command_name(), every=progress_every, enabled=not quiet)


def _score_in_parts(
    loaded: LoadedModel, pairs: list[tuple[str, str]], stages: Stages, part: int = 4096
) -> np.ndarray:
    """The RNN's ln p of each pair, in parts of ``part`` pairs so that progress is told."""
    import numpy as np

    from rescorer.score.scorer import score_pairs

    progress = stages("scoring", "pairs", "of the pairs")
    out = []
    for start in range(0, len(pairs), part):
        chunk = pairs[start : start + part]
        out.append(np.asarray(score_pairs(loaded.model, loaded.src_vocab, loaded.tgt_vocab, chunk)))
        done = start + len(chunk)
        progress.update(done, done / len(pairs))
    progress.close()
    return np.concatenate(out) if out else np.zeros(0)


# ---------------------------------------------------------------------------------- sample
@click.command()
@click.argument("model_dir")
@click.argument("phrases", nargs=-1)
@click.option("--input", "input_path", metavar="FILE", help="Source phrases, one per line.")
@click.option(
    "-n",
    "--samples",
    default=50,
    show_default=True,
    type=click.IntRange(min=1),
    help="Samples per source phrase.",
)
@click.option(
    "--alpha",
    default=1.0,
    show_default=True,
    type=click.FloatRange(min=0.0, min_open=True),
    help="Inverse temperature: words drawn from softmax(alpha * logits).",
)
@click.option(
    "--beam",
    type=click.IntRange(min=1),
    metavar="K",
    help="Beam search (GroundHog's), not sampling.",
)
@click.option("--normalize", is_flag=True, help="Beam: rank by log p per word (EOS counted).")
@click.option("--ignore-unk", is_flag=True, help="Beam: never generate the UNK word.")
@click.option(
    "--top",
    default=5,
    show_default=True,
    type=click.IntRange(min=1),
    help="Results shown per source phrase (text format).",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "moses"]),
    default="text",
    show_default=True,
    help="moses: 'src ||| tgt ||| p' lines of every distinct finished result without <unk>.",
)
@click.option("-o", "--output", "out", required=True, help="Output file (.gz: gzip; - stdout).")
@click.option(
    "--batch",
    default=64,
    show_default=True,
    type=click.IntRange(min=1),
    help="Source phrases per batch.",
)
@seed_option
@device_option
@progress_option
@quiet_option
@user_errors
def sample(
    model_dir: str,
    phrases: tuple[str, ...],
    input_path: str | None,
    samples: int,
    alpha: float,
    beam: int | None,
    normalize: bool,
    ignore_unk: bool,
    top: int,
    fmt: str,
    out: str,
    batch: int,
    seed: int,
    device: str,
    progress_every: float,
    quiet: bool,
) -> None:
    """Generate target phrases for source PHRASES (the paper's Table 3).

    Ancestral sampling: --samples draws per phrase of at most 3 x its words, cut at EOS; the
    distinct results with their counts and log p, best first. --beam K: GroundHog's beam search.
    Seeded: a phrase's samples do not depend on the other phrases or on --batch.

    \b
    Example:
      rescorer sample rnn-model/ "for the first time" "the past few days ." -o -
      rescorer sample rnn-model/ --input sources.txt --beam 5 -o beam.txt
    """
    from rescorer.analysis.generate import beam_search, sample_phrases
    from rescorer.io.table import format_prob

    if beam is None and (normalize or ignore_unk):
        raise click.UsageError("--normalize and --ignore-unk go with --beam")
    sources = _phrases(phrases, input_path)
    loaded = _load(model_dir, device)
    dropped = 0
    progress = _stages(quiet, progress_every)(
        "sampling" if beam is None else "beam search", "phrases", "of the phrases"
    )

    def lines() -> Iterator[str]:
        nonlocal dropped
        for start in range(0, len(sources), batch):
            part = sources[start : start + batch]
            if beam is None:
                found = sample_phrases(
                    loaded.model,
                    loaded.src_vocab,
                    loaded.tgt_vocab,
                    part,
                    num_samples=samples,
                    alpha=alpha,
                    seed=seed,
                    first_index=start,
                )
            else:
                found = beam_search(
                    loaded.model,
                    loaded.src_vocab,
                    loaded.tgt_vocab,
                    part,
                    beam_size=beam,
                    normalize=normalize,
                    ignore_unk=ignore_unk,
                )
            for src, results in zip(part, found, strict=True):
                if fmt == "moses":
                    for g in results:
                        if g.finished and g.words and not g.has_unk:
                            yield f"{src} ||| {g.text} ||| {format_prob(g.logp)}"
                        else:
                            dropped += 1
                    continue
                yield src
                for g in results[:top]:
                    note = "" if g.finished else "   (no EOS within the length limit)"
                    count = f"x{g.count:<3d} " if beam is None else ""
                    text = g.text if g.words else "(empty)"
                    yield f"  {count}{g.logp:9.3f}  {text}{note}"
                if len(results) > top:
                    yield f"  ... {len(results) - top} more distinct"
            done = start + len(part)
            progress.update(done, done / len(sources))

    _echo_lines(out, lines())
    progress.close()
    if dropped and not quiet:
        say(f"left out {dropped:,} results that were empty, unfinished or held <unk>")


# --------------------------------------------------------------------------------- compare
@click.command()
@click.argument("table")
@click.argument("phrases", nargs=-1)
@model_option
@click.option(
    "--frequent",
    default=5,
    show_default=True,
    type=click.IntRange(min=0),
    help="Random frequent long sources compared (without PHRASES).",
)
@click.option(
    "--rare",
    default=5,
    show_default=True,
    type=click.IntRange(min=0),
    help="Random rare long sources compared (without PHRASES).",
)
@click.option(
    "--band",
    default=0.1,
    show_default=True,
    type=click.FloatRange(0, 1, min_open=True),
    help="Frequent/rare: the top/bottom share of long sources by the table's source count.",
)
@click.option(
    "--min-words",
    default=4,
    show_default=True,
    type=click.IntRange(min=1),
    help="A long source phrase has at least this many words.",
)
@click.option(
    "--min-targets",
    default=3,
    show_default=True,
    type=click.IntRange(min=1),
    help="Random sources have at least this many targets in TABLE.",
)
@click.option(
    "--summary-sources",
    default=1000,
    show_default=True,
    type=click.IntRange(min=0),
    help="Random long sources the length summary is measured on (0: none).",
)
@click.option(
    "--direct-column",
    default=2,
    show_default=True,
    type=click.IntRange(min=0),
    help="The score column holding p(e|f), from 0 (Moses: 2).",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "markdown"]),
    default="text",
    show_default=True,
    help="markdown: one table row per source, as in docs/analyses.md.",
)
@click.option("-o", "--output", "out", required=True, help="Output file (.gz: gzip; - stdout).")
@seed_option
@device_option
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
    min_targets: int,
    summary_sources: int,
    direct_column: int,
    fmt: str,
    out: str,
    seed: int,
    device: str,
    progress_every: float,
    quiet: bool,
) -> None:
    """The top-3 targets of source phrases by the table's p(e|f) and by the RNN (Table 2).

    PHRASES, or a seeded random choice of long frequent and rare source phrases; then the mean
    target length of each side's top choice over --summary-sources random long sources.

    \b
    Example:
      rescorer compare model/phrase-table.gz -m rnn-model/ --format markdown -o table2.md
    """
    from rescorer.analysis.compare import compare_table, format_markdown, format_text

    loaded = _load(model_dir, device)
    stages = _stages(quiet, progress_every)

    def score(pairs: list[tuple[str, str]]) -> Any:
        return _score_in_parts(loaded, pairs, stages)

    rows, summary = compare_table(
        table,
        score,
        phrases=phrases,
        frequent=frequent,
        rare=rare,
        band=band,
        min_words=min_words,
        min_targets=min_targets,
        summary_sources=summary_sources,
        seed=seed,
        direct_column=direct_column,
        stages=stages,
    )
    lines = format_markdown(rows) if fmt == "markdown" else format_text(rows)
    if summary is not None:
        lines += ["", *summary.lines()]
    _echo_lines(out, iter(lines))


# ------------------------------------------------------------------------------------ plot
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
    type=click.IntRange(min=2),
    help="Pairs drawn, a seeded uniform sample of TABLE's lines.",
)
@click.option(
    "--direct-column",
    default=2,
    show_default=True,
    type=click.IntRange(min=0),
    help="The score column holding p(e|f), from 0 (Moses: 2).",
)
@seed_option
@device_option
@progress_option
@quiet_option
@user_errors
def scatter(
    table: str,
    model_dir: str,
    out: str,
    pairs: int,
    direct_column: int,
    seed: int,
    device: str,
    progress_every: float,
    quiet: bool,
) -> None:
    """RNN ln p(e|f) against the table's, over a random sample of pairs (Fig. 3).

    \b
    Example:
      rescorer plot scatter model/phrase-table.gz -m rnn-model/ --pairs 5000 -o fig3.png
    """
    from rescorer.analysis.plots import plot_scatter, sample_pairs

    stages = _stages(quiet, progress_every)
    loaded = _load(model_dir, device)
    sampled = sample_pairs(table, pairs, seed, direct_column, stages)
    logp = _score_in_parts(loaded, list(zip(sampled.src, sampled.tgt, strict=True)), stages)
    caption = plot_scatter(out, sampled.table_p, logp, f"{table} vs {model_dir}")
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
    help="Whose embeddings: the decoder's (target), the encoder's (source), or one panel each.",
)
@click.option(
    "--points",
    default=3000,
    show_default=True,
    type=click.IntRange(min=5),
    help="Words drawn per panel: the most frequent of the shortlist.",
)
@click.option(
    "--labels",
    default=300,
    show_default=True,
    type=click.IntRange(min=0),
    help="Words named at most per panel: the most frequent whose label overlaps no other.",
)
@seed_option
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
    progress_every: float,
    quiet: bool,
) -> None:
    """2-D map (t-SNE) of the word embeddings, frequent words named (Fig. 4).

    \b
    Example:
      rescorer plot words -m rnn-model/ --side both --points 2000 --labels 200 -o fig4.png
    """
    from rescorer.analysis.plots import embedding_rows, plot_words

    loaded = _load(model_dir, "cpu")
    sides = ["source", "target"] if side == "both" else [side]
    panels = [
        (
            s,
            embedding_rows(loaded.model, s),
            loaded.src_vocab if s == "source" else loaded.tgt_vocab,
        )
        for s in sides
    ]
    stages = _stages(quiet, progress_every)
    named = plot_words(
        out, panels, points, labels, seed, f"word embeddings of {model_dir}", stages=stages
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
    type=click.IntRange(min=5),
    help="Source phrases drawn, a seeded uniform sample of TABLE's long ones.",
)
@click.option(
    "--min-words",
    default=4,
    show_default=True,
    type=click.IntRange(min=1),
    help="A long source phrase has at least this many words.",
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
    type=click.IntRange(min=2),
    help="Phrases in a zoomed panel: the centre's nearest in the map.",
)
@seed_option
@device_option
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
    progress_every: float,
    quiet: bool,
) -> None:
    """2-D map (t-SNE) of the summary vectors c of long source phrases (Fig. 5).

    \b
    Example:
      rescorer plot phrases model/phrase-table.gz -m rnn-model/ --phrases 3000 -o fig5.png
      rescorer plot phrases pt.gz -m rnn-model/ --zoom "the european union" -o fig5.png
    """
    import random

    from rescorer.analysis.plots import long_source_sample, plot_phrases, summary_vectors

    stages = _stages(quiet, progress_every)
    loaded = _load(model_dir, device)
    chosen = long_source_sample(table, size, min_words, seed, stages)
    if len(chosen) < 5:
        raise RescorerError(f"{table}: only {len(chosen)} source phrases of >= {min_words} words")
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
        f"phrase representations c of {model_dir}",
        min_words=min_words,
        stages=stages,
    )
    if not quiet:
        say(f"{out}: {len(chosen):,} phrases")
