"""``rescorer sample``: the paper's Table 3 (docs/analyses.md), and what it shares with
``compare`` (cli/compare.py) and ``plot`` (cli/plot.py).

They run in fp32 (their figures are about the model, not about speed) on ``--device``, on the
side of the table the model reads (its direction, :mod:`rescorer.analysis.sides`).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING

import click

from rescorer.cli.common import (
    command_name,
    device_option,
    progress_option,
    quiet_option,
    say,
    threads_option,
    use_threads,
    user_errors,
)
from rescorer.cli.ranges import MAX_COLUMN, MAX_SEED, Float, Int

if TYPE_CHECKING:
    import numpy as np

    from rescorer.analysis.generate import Generated
    from rescorer.analysis.sides import Sides
    from rescorer.io.progress import Stages
    from rescorer.model.checkpoint import LoadedModel

seed_option = click.option(
    "--seed", default=1, type=Int(0, MAX_SEED), show_default=True, help="Random choices."
)
column_option = click.option(
    "--table-column",
    "--direct-column",
    "column",
    type=Int(0, MAX_COLUMN),
    metavar="N",
    help="The table's score column compared with the RNN, from 0 (default: Moses' p(e|f), 2,"
    " for a forward model; its p(f|e), 0, for an inverse one).",
)


def load_for_analysis(
    model_dir: str, device: str, threads: int | None = None, quiet: bool = False
) -> tuple[LoadedModel, Sides, Callable[[], None]]:
    """The model, the table's sides as it sees them (its direction), and ``announce()``: the
    command's first line, the device and the threads (``--threads``), said once (unless
    ``quiet``) when the command starts computing, after its inputs are read (a refused run
    stays one line)."""
    from rescorer.analysis.sides import Sides
    from rescorer.device import resolve_device
    from rescorer.model.checkpoint import load_model_dir

    chosen = use_threads(threads)
    resolved = resolve_device(device)
    loaded = load_model_dir(model_dir, resolved)
    said = [quiet]

    def announce() -> None:
        if not said[0]:
            said[0] = True
            say(f"{resolved}, {chosen}")

    return loaded, Sides(loaded.direction), announce


def model_name(model_dir: str) -> str:
    """The model as a figure's title names it: its folder's name, not the path it was given
    by (``../runs/x/rnn-model/`` -> ``rnn-model``)."""
    import os

    return os.path.basename(os.path.normpath(os.path.abspath(model_dir)))


def unlearned_note(loaded: LoadedModel) -> str | None:
    """What a figure of a model that has not clearly learned says across it (None: learned,
    or trained without validation)."""
    from rescorer.verdict import training_verdict

    verdict = training_verdict(loaded.provenance)
    if verdict is None or verdict.learned:
        return None
    what = verdict.text.split(":")[0].split(" (")[0]  # NOT LEARNED, barely learned
    return (
        f"model {what}: validation perplexity {verdict.valid_ppl:,.1f}\n"
        f"against a unigram model's {verdict.unigram_ppl:,.1f}"
    )


def tell_direction(sides: Sides, quiet: bool) -> None:
    """One line on stderr for an inverse model (a forward one is what the outputs assume)."""
    if sides.inverse and not quiet:
        say(sides.describe())


def _phrases(phrases: Sequence[str], input_path: str | None, side: str = "source") -> list[str]:
    from rescorer.io.inputs import open_text

    found = [p.strip() for p in phrases]
    if input_path is not None:
        with open_text(input_path) as lines:
            found += [line.strip() for line in lines if line.strip()]
    if not found:
        raise click.UsageError(f"give {side} phrases, or --input FILE")
    return found


def echo_lines(out: str, lines: Iterator[str]) -> None:
    from rescorer.io.outputs import open_output

    if out == "-":
        for line in lines:
            sys.stdout.write(line + "\n")
        sys.stdout.flush()
        return
    with open_output(out) as stream:
        for line in lines:
            stream.write(line + "\n")


def analysis_stages(quiet: bool, progress_every: float) -> Stages:
    from rescorer.io.progress import Stages

    return Stages(command_name(), every=progress_every, enabled=not quiet)


def score_in_parts(
    loaded: LoadedModel, pairs: list[tuple[str, str]], stages: Stages, part: int = 4096
) -> np.ndarray:
    """The RNN's ln p of each pair (in the model's order: the phrase it reads first), in parts
    of ``part`` pairs so that progress is told."""
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
@click.option(
    "--input",
    "input_path",
    metavar="FILE",
    help="Phrases, one per line (source phrases; target ones for an inverse model).",
)
@click.option(
    "-n",
    "--samples",
    default=50,
    show_default=True,
    type=Int(1, 100_000),
    help="Samples per given phrase.",
)
@click.option(
    "--alpha",
    default=1.0,
    show_default=True,
    type=Float(0, 100, low_open=True),
    help="Inverse temperature: words drawn from softmax(alpha * logits).",
)
@click.option(
    "--beam",
    type=Int(1, 1000),
    metavar="K",
    help="Beam search (GroundHog's), not sampling.",
)
@click.option("--normalize", is_flag=True, help="Beam: rank by log p per word (EOS counted).")
@click.option("--ignore-unk", is_flag=True, help="Beam: never generate the UNK word.")
@click.option(
    "--top",
    default=5,
    show_default=True,
    type=Int(1, 100_000),
    help="Results shown per given phrase (text format).",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "moses"]),
    default="text",
    show_default=True,
    help="moses: 'src ||| tgt ||| p' lines of every distinct finished result without <unk>"
    " (p: the model's, p(tgt|src) or, inverse, p(src|tgt)).",
)
@click.option("-o", "--output", "out", required=True, help="Output file (.gz: gzip; - stdout).")
@click.option(
    "--batch",
    default=64,
    show_default=True,
    type=Int(1, 1 << 16),
    help="Given phrases per batch.",
)
@seed_option
@device_option
@threads_option
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
    threads: int | None,
    progress_every: float,
    quiet: bool,
) -> None:
    """Generate target phrases for source PHRASES (the paper's Table 3).

    Ancestral sampling: --samples draws per phrase of at most 3 x its words, cut at EOS; the
    distinct results with their counts and log p, best first. --beam K: GroundHog's beam search.
    Seeded: a phrase's samples do not depend on the other phrases or on --batch. An inverse
    model (train --direction inverse) is given target phrases and generates source phrases.

    \b
    Example:
      rescorer sample rnn-model/ "for the first time" "the past few days ." -o -
      rescorer sample rnn-model/ --input sources.txt --beam 5 -o beam.txt
    """
    from rescorer.analysis.generate import beam_search, sample_phrases

    if beam is None and (normalize or ignore_unk):
        raise click.UsageError("--normalize and --ignore-unk go with --beam")
    loaded, sides, announce = load_for_analysis(model_dir, device, threads, quiet)
    sources = _phrases(phrases, input_path, sides.given)
    announce()
    tell_direction(sides, quiet)
    dropped = 0
    progress = analysis_stages(quiet, progress_every)(
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
                shown, left_out = _result_lines(src, results, fmt, top, beam, sides.inverse)
                dropped += left_out
                yield from shown
            done = start + len(part)
            progress.update(done, done / len(sources))

    echo_lines(out, lines())
    progress.close()
    if dropped and not quiet:
        say(f"left out {dropped:,} results that were empty, unfinished or held <unk>")


def _result_lines(
    src: str,
    results: Sequence[Generated],
    fmt: str,
    top: int,
    beam: int | None,
    inverse: bool,
) -> tuple[list[str], int]:
    """The lines ``sample`` writes for one given phrase, and how many results they leave out:
    moses, every finished result with words and no <unk> as a table line; text, the phrase
    and its ``top`` results (counts when sampled)."""
    from rescorer.io.table import format_prob

    if fmt == "moses":
        shown, dropped = [], 0
        for g in results:
            if g.finished and g.words and not g.has_unk:
                pair = (g.text, src) if inverse else (src, g.text)
                shown.append(f"{pair[0]} ||| {pair[1]} ||| {format_prob(g.logp)}")
            else:
                dropped += 1
        return shown, dropped
    shown = [src]
    for g in results[:top]:
        note = "" if g.finished else "   (no EOS within the length limit)"
        count = f"x{g.count:<3d} " if beam is None else ""
        text = g.text if g.words else "(empty)"
        shown.append(f"  {count}{g.logp:9.3f}  {text}{note}")
    if len(results) > top:
        shown.append(f"  ... {len(results) - top} more distinct")
    return shown, 0
