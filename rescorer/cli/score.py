"""``rescorer score``: the feature column(s) for every line of a phrase table."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import click

from rescorer.cli.common import (
    F,
    chunk_bytes_option,
    compile_option,
    device_option,
    interrupt_status,
    progress_option,
    score_precision_option,
    threads_option,
    user_errors,
)
from rescorer.cli.ranges import CountOrAuto, Float, Int, Shard, per_cpu
from rescorer.durations import MAX_SECONDS
from rescorer.score.config import CAPTURE_CHOICES, ScoreConfig

SCORE = ScoreConfig()  # each default is written once, there
MAX_BATCH_TOKENS = 1 << 24  # padded tokens per batch: 64x the largest a GPU takes by default
WORKERS, WORKERS_WHY = per_cpu()


def workers_option(default: int | str, what: str) -> Callable[[F], F]:
    """``--workers N|auto`` of score and extend (``what`` the workers do), at most PER_CPU per
    CPU this process may run on (``--workers 500`` failed to start its processes)."""
    return click.option(
        "--workers",
        default=str(default),
        type=CountOrAuto(0, WORKERS),
        show_default=True,
        metavar="N|auto",
        help=f"{what} worker processes (auto: on a GPU 4, the count measured best, or fewer: "
        "one per core but one, one per chunk of the input; none on the CPU); at most "
        f"{WORKERS_WHY}.",
    )


@click.command()
@click.argument("table")
@click.option(
    "-m",
    "--model",
    "model_dirs",
    required=True,
    multiple=True,
    help="Model folder from rescorer train; repeat for one column per model, in this order.",
)
@click.option("-o", "--output", "out", required=True, help="Output table (.gz: gzip; - stdout).")
@click.option(
    "--column",
    type=click.Choice(["prob", "logp"]),
    default=SCORE.column,
    show_default=True,
    help="prob = exp(log p) (Moses takes ln of every column); logp = raw log p for other tools.",
)
@click.option(
    "--word-penalty",
    is_flag=True,
    help="Also append exp(#target words not in shortlist), last (the first forward model's "
    "target shortlist).",
)
@device_option
@score_precision_option
@threads_option
@click.option(
    "--batch-tokens",
    type=Int(1, MAX_BATCH_TOKENS),
    help="Padded tokens per batch [default: 4096 on CPU; on a GPU by its memory, 65,536 to "
    "262,144 (an eighth of it for a readout block's logits)].",
)
@workers_option(SCORE.workers, "Parse/format")
@compile_option("for inputs of 4 MiB or more")
@click.option(
    "--capture",
    type=click.Choice(CAPTURE_CHOICES),
    default=SCORE.capture,
    show_default=True,
    help="Run each level of the prefix trees and each readout block at a few bucketed row "
    "counts, each replayed as a CUDA graph (on); auto: off on every device until the GPU tests "
    "have passed on a GPU (on a CPU, on runs the bucketed shapes without graphs; same scores).",
)
@chunk_bytes_option
@click.option(
    "--checkpoint-every",
    default=SCORE.checkpoint_every,
    type=Float(0, MAX_SECONDS),
    show_default=True,
    metavar="SECONDS",
    help="Record progress for --resume (fsyncing OUT.partial) this often; 0: after every "
    "chunk. A killed run redoes at most about this much.",
)
@click.option("--shard", type=Shard(), metavar="K/N", help="Score the K-th of N shards.")
@click.option("--resume", is_flag=True, help="Continue an interrupted run from OUT.partial.")
@click.option(
    "--restart",
    is_flag=True,
    help="Start over, discarding an interrupted run's OUT.partial (refused without this or "
    "--resume).",
)
@click.option(
    "--force",
    is_flag=True,
    help="With --resume: replace a complete OUT whose manifest names another model; without: "
    "as --restart.",
)
@click.option(
    "--compress-level",
    default=SCORE.compresslevel,
    type=click.IntRange(0, 9),
    show_default=True,
    help="gzip (zlib) level of a .gz OUT.",
)
@click.option("--skip-bad-lines", metavar="FILE", help="Write malformed lines to FILE; go on.")
@click.option(
    "--ignore-coverage",
    is_flag=True,
    help="Score a table even when far fewer of its first pairs fit the model's shortlists "
    "than its training table's did (refused otherwise: a model for another language pair?).",
)
@click.option(
    "--check-first",
    is_flag=True,
    help="Read the whole table once first (rescorer check); stop before scoring if it is bad.",
)
@progress_option
@click.option(
    "--profile",
    is_flag=True,
    help="Print where the time went: read, parse, trees, h2d, encoder, decoder, readout, d2h, "
    "format, write (a GPU run synchronises per phase, so it runs slower); then the whole wall "
    "time from the process's start: imports, model load, worker start, first chunk, steady "
    "state, drain, final rename.",
)
@click.option("-q", "--quiet", is_flag=True, help="No progress bar or summary.")
@user_errors
def score(
    table: str, model_dirs: tuple[str, ...], out: str, shard: tuple[int, int] | None, **opts: Any
) -> None:
    """Append p(target|source), the RNN's score, to the scores of every line of TABLE.

    One column per -m model, in the order given: a forward model's p(target|source), an
    inverse model's (train --direction inverse) p(source|target); --word-penalty comes last,
    counted with the first forward model's target shortlist (with inverse models only, the
    first one's source shortlist). A column holds p = exp(log p), as Moses takes ln of every
    score (--column logp: log p itself, for other tools).

    TABLE is a Moses phrase table, plain or gzip (detected by content), - for stdin. Every byte
    outside the score field, the line count and the order stay as they are. Then raise
    num-features in moses.ini (rescorer moses-ini) and re-tune.

    \b
    Example:
      rescorer score model/phrase-table.gz -m rnn-model/ -o model/phrase-table.rnn.gz
      rescorer score pt.gz -m rnn-model/ -o pt.3of16.gz --shard 3/16 --resume
      rescorer score pt.gz -m rnn-model/ -m rnn-inverse/ --word-penalty -o pt.rnn2.gz
    """
    from rescorer.score.pipeline import score_table

    _check_options(table, out, shard, opts)
    config = ScoreConfig(shard=shard, compresslevel=opts.pop("compress_level"), **opts)
    if table == "-" and sys.stdin.isatty():  # not waiting without a word
        click.echo(
            "rescorer score: reading the phrase table from standard input (type it, or end "
            "it with Ctrl-D; give a file name instead of - to score a file)",
            err=True,
        )
    try:
        stats = score_table(table, list(model_dirs), out, config)
    except KeyboardInterrupt as exc:  # SIGINT, or SIGTERM (common.Terminated)
        if out == "-":
            click.echo("rescorer score: interrupted; output to stdout cannot be resumed", err=True)
        else:
            click.echo(
                f"rescorer score: interrupted; {out}.partial is kept: run the same command with "
                "--resume to continue",
                err=True,
            )
        sys.exit(interrupt_status(exc))
    _report(stats, config, table, out, shard)


def _check_options(
    table: str, out: str, shard: tuple[int, int] | None, opts: dict[str, Any]
) -> None:
    """The usage errors among the options, and --check-first's pass (popped from ``opts``)."""
    if table == "-" and (opts["resume"] or shard):
        raise click.UsageError("--resume and --shard need a regular input file, not stdin (-)")
    if out == "-" and opts["resume"]:
        raise click.UsageError("--resume needs an output file, not stdout (-o -)")
    if opts["resume"] and opts["restart"]:
        raise click.UsageError("--resume continues OUT.partial, --restart discards it: give one")
    if opts.pop("check_first"):
        if table == "-":
            raise click.UsageError("--check-first needs a file: stdin can be read only once")
        from rescorer.io.check import first_error

        error = first_error(table)
        if error is not None and opts["skip_bad_lines"] is None:
            raise error


def _report(
    stats: Any, config: ScoreConfig, table: str, out: str, shard: tuple[int, int] | None
) -> None:
    """The run's summary lines (stderr): what was scored, the profile, the skipped lines."""
    if stats.lines_in == 0 and not stats.already_done:
        click.echo(f"rescorer score: warning: {table}: empty input; {out} has no lines", err=True)
    if stats.already_done:
        if not config.quiet:
            click.echo(
                f"rescorer score: {out}: shard {shard[0] if shard else '?'}/"
                f"{shard[1] if shard else '?'} is "
                f"already complete ({stats.lines_out:,} lines, as its manifest says); nothing to "
                "redo",
                err=True,
            )
        return
    if not config.quiet:
        rate = stats.pairs_scored / max(stats.seconds, 1e-9)
        resumed = stats.resumed_from_line  # the counts of pairs and seconds are this run's
        click.echo(
            "rescorer score: "
            + (f"resumed at line {resumed:,}, this run " if resumed > 1 else "")
            + f"scored {stats.pairs_scored:,} pairs in {stats.seconds:.1f} s "
            f"({rate:,.0f} pairs/s, "
            f"{stats.device}, {stats.precision}); {stats.lines_out:,} of {stats.lines_in:,} "
            f"lines written to {out}",
            err=True,
        )
    if stats.phases is not None:
        for line in stats.phases.report(stats.seconds):
            click.echo(f"rescorer score: {line}", err=True)
    if stats.clock is not None:  # last: the summary is a stretch of its own
        for line in stats.clock.report():
            click.echo(f"rescorer score: {line}", err=True)
    if stats.bad:
        click.echo(
            f"rescorer score: skipped {stats.bad:,} malformed line(s), written to "
            f"{config.skip_bad_lines}; first: "
            f"{stats.bad_examples[0]}",
            err=True,
        )


@click.command()
@click.argument("parts", nargs=-1, metavar="PART...")
@click.option("-o", "--output", "out", help="The merged table (.gz for gzip parts; - stdout).")
@click.option(
    "--manifest-glob",
    metavar="PATTERN",
    help="Take the parts whose manifests match PATTERN (quote it), not PARTS.",
)
@click.option("-q", "--quiet", is_flag=True, help="No summary.")
@user_errors
def merge(parts: tuple[str, ...], out: str | None, manifest_glob: str | None, quiet: bool) -> None:
    """Check the outputs of 'rescorer score --shard K/N' and concatenate them into OUT (-o).

    The older form 'rescorer merge OUT PART...' (OUT first, no -o) still works.

    Every part needs its manifest (PART.manifest.json, written when the shard finished). Refuses
    a missing, duplicate or mismatched shard (another model, input, options or N) and a part
    whose bytes no longer match its manifest, naming the shard; otherwise writes OUT atomically,
    gzip members as they are (no recompression): the same bytes as a single run.

    \b
    Example:
      rescorer merge pt.part*.gz -o pt.rnn.gz
      rescorer merge --manifest-glob 'parts/pt.*.gz.manifest.json' -o pt.rnn.gz
    """
    from rescorer.errors import RescorerError
    from rescorer.job.merge import merge as merge_parts
    from rescorer.job.merge import parts_from_glob

    if out is None:  # the form before -o: OUT first
        if not parts:
            raise click.UsageError("give the output: -o OUT")
        out, parts = parts[0], parts[1:]

    if bool(parts) == bool(manifest_glob):
        raise RescorerError("merge: give the PART files or --manifest-glob, not both or neither")
    paths = list(parts) if parts else parts_from_glob(str(manifest_glob))
    from rescorer.job.clobber import refuse_clobber
    from rescorer.job.shards import SUFFIX

    inputs = [(what, p + end) for p in paths for what, end in (("part", ""), ("manifest", SUFFIX))]
    refuse_clobber(inputs, [("OUT", out)])
    stats = merge_parts(out, paths)
    if not quiet:
        rate = stats.bytes / max(stats.seconds, 1e-9) / 1e9
        click.echo(
            f"rescorer merge: merged {stats.shards:,} shards into {out}: {stats.lines()}, "
            f"{stats.bytes:,} bytes in {stats.seconds:.1f} s "
            f"({rate:.2f} GB/s); scored on {', '.join(stats.devices)}",
            err=True,
        )


def coverage_line(model_dir: str, inside: int, pairs: int) -> tuple[str, bool]:
    """``check -m``'s verdict on the table against the model's own (the rule score applies to
    its first pairs: rescorer/verdict.py), and whether score refuses the table."""
    import os

    from rescorer.constants import PROVENANCE_FILE
    from rescorer.io.jsonfiles import read_json_object
    from rescorer.verdict import COVERAGE_MIN_PAIRS, coverage_verdict, training_coverage

    provenance = read_json_object(os.path.join(model_dir, PROVENANCE_FILE), what="provenance")
    verdict = coverage_verdict(provenance, inside, pairs)
    if training_coverage(provenance) is None:
        return "coverage verdict: none (the model's provenance records no training coverage)", False
    if verdict is None:
        return (
            f"coverage verdict: none ({pairs:,} pairs, fewer than the {COVERAGE_MIN_PAIRS:,} "
            "score judges by)"
        ), False
    text = f"coverage verdict: {verdict.describe(model_dir, f'its {pairs:,} pairs')}"
    if verdict.foreign:
        return text + " rescorer score refuses it (--ignore-coverage to go on)", True
    return text + (" rescorer score warns about it" if verdict.lower else ""), False


@click.command()
@click.argument("table")
@click.option(
    "-m",
    "--model",
    "model_dir",
    help="Also report the coverage of its shortlists, and the verdict score gives on it.",
)
@user_errors
def check(table: str, model_dir: str | None) -> None:
    """Validate all of TABLE as score reads it and print its statistics.

    Checks every line (fields, scores, the first line's score count, UTF-8), the gzip stream to
    its end, and the source order that shards rely on; prints its kind (a phrase table or a
    lexicalised reordering table), lines, distinct sources, targets per source, phrase lengths,
    and with -m the shortlists' coverage. Exit 1 if a line is bad, or if -m's model is one
    score refuses for the table (a model of another language pair or table), as score exits.

    \b
    Example:
      rescorer check model/phrase-table.gz -m rnn-model/
    """
    import os

    from rescorer.constants import SRC_VOCAB_FILE, TGT_VOCAB_FILE
    from rescorer.errors import RescorerError
    from rescorer.io.check import check_table
    from rescorer.vocab import Vocab

    vocabs = (None, None)
    if model_dir is not None:
        vocabs = tuple(  # type: ignore[assignment]
            Vocab.load(os.path.join(model_dir, name)) for name in (SRC_VOCAB_FILE, TGT_VOCAB_FILE)
        )
    found = check_table(table, *vocabs)
    for line in found.summary(with_coverage=model_dir is not None):
        click.echo(line)
    foreign = False
    if model_dir is not None:
        verdict, foreign = coverage_line(model_dir, found.pairs_covered, found.lines - found.bad)
        click.echo(verdict)
    if not found.ok:
        lineno, message = found.errors[0]
        raise RescorerError(
            f"{found.path}: {found.bad:,} malformed line(s); the first: {found.path}:{lineno}: "
            f"{message}"
        )
    if foreign:
        raise RescorerError(
            f"{model_dir}: a model for another language pair or table: rescorer score refuses "
            f"{found.path} with it (the coverage verdict above; --ignore-coverage to go on)"
        )
