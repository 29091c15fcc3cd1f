"""``rescorer score``: stream a phrase table through the model(s) and append the feature columns.

Stages (docs/contracts.md §2, §4, §8):

- the reader cuts the decompressed input into chunks at source-phrase boundaries
  (:mod:`rescorer.io.chunks`: the same cuts in a single run, a resumed run and a shard);
- workers parse and validate each chunk and turn it into id arrays
  (:func:`~rescorer.score.stages.parse_chunk`);
- the main process scores the chunk on the device (:class:`rescorer.score.Scorer`), one scorer
  per ``-m`` model in the order given (each chunk is still read, parsed and formatted once; an
  inverse model's pairs come grouped by target phrase and its scores go back to line order).
  It submits chunk k+1 before it collects chunk k's scores, so on a GPU the device works on
  chunk k while the host parses chunk k+1, builds its trees and formats chunk k-1 (the
  synchronisation points: rescorer/score/scorer.py);
- workers format the new columns into the lines and compress them, one gzip member per chunk
  (a multi-member gzip file, which zcat, Python and Moses read as one stream);
- the main process writes chunks in input order to ``OUT.partial`` and records its progress in
  ``OUT.partial.json`` every ``--checkpoint-every`` seconds, at the end and when interrupted
  (rescorer/score/output.py); on success the partial file is renamed to OUT. ``--resume``
  truncates the partial file to the last recorded chunk and goes on from there.

Memory is bounded by ``chunk_bytes`` times the number of chunks in flight (at most
``MAX_AHEAD_BYTES`` being parsed, two on the device, ``workers`` being formatted), never by the
table.

This module runs the stages; the parts live beside it: the options and worker policy in
:mod:`~rescorer.score.config`, what the workers run in :mod:`~rescorer.score.stages`, the durable
output (lock, partial file, resume) in :mod:`~rescorer.score.output`, its progress record and the
fingerprints in :mod:`~rescorer.score.record`, the files a run may write in
:mod:`~rescorer.score.clobber`, the shard manifest in :mod:`~rescorer.score.shards`, the
models' warnings and columns in :mod:`~rescorer.score.models`.
"""

from __future__ import annotations

import contextlib
import itertools
import multiprocessing
import os
import signal
import sys
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, replace
from typing import Any

import numpy as np

from rescorer.errors import InputError, RescorerError
from rescorer.io.chunks import Chunk, iter_chunks, shard_bounds, shard_note
from rescorer.io.inputs import InputMeter, display_name, gzip_text_size, open_binary
from rescorer.io.outputs import WriteError, gzip_member
from rescorer.io.progress import COMPILE_TYPICAL, Heartbeat, Progress
from rescorer.io.reordering import not_a_reordering_table, sniff_table_kind, table_kind
from rescorer.score.clobber import refuse_clobber, score_files
from rescorer.score.config import (
    MAX_AHEAD_BYTES,
    NOT_IN_RUN_KEY,
    ScoreConfig,
    ScoreStats,
    chunk_bytes_for,
    resolve_workers,
    want_compile,
)
from rescorer.score.models import (
    already_scored,
    collect_columns,
    coverage_check,
    non_finite_error,
    one_or_list,
)
from rescorer.score.output import Output, Resume
from rescorer.score.pairs import pairs_inside_shortlists
from rescorer.score.profile import Phases, nothing
from rescorer.score.record import input_fingerprint, model_fingerprint
from rescorer.score.shards import (
    chain_sha256,
    complete_manifest,
    finished_shard,
    shard_manifest,
)
from rescorer.score.stages import (
    Inline,
    ModelSides,
    ParsedChunk,
    first_num_scores,
    format_chunk,
    init_worker,
    num_scores_of,
    parse_chunk,
)


def score_table(
    table: str, model_dir: str | Sequence[str], out: str, config: ScoreConfig
) -> ScoreStats:
    """Append one log-probability column per model of ``model_dir`` (a folder or a list, in
    that order; each in its direction: p(target | source) or p(source | target)), then the word
    penalty if asked, to every line of ``table``; write ``out``.

    Raises InputError at the first malformed line (unless ``skip_bad_lines``), leaving no output.
    """
    from rescorer.cpus import choose_threads
    from rescorer.device import resolve_device, resolve_precision, set_threads
    from rescorer.model.checkpoint import load_model_dir
    from rescorer.score.scorer import Scorer

    threads = set_threads(choose_threads(config.threads))

    if out == "-" and config.resume:
        raise RescorerError("--resume needs an output file, not stdout")
    regular = table != "-" and os.path.isfile(table)  # stdin, a FIFO, <(...) can be read once
    refuse_clobber([("input table", table)], score_files(out, config.skip_bad_lines))
    if not regular and (config.resume or config.shard):
        raise RescorerError("--resume and --shard need a regular input file, not stdin or a pipe")
    not_a_reordering_table(table, sniff_table_kind(table))  # a file: before any work
    device = resolve_device(config.device)
    precision = resolve_precision(config.precision, device, "score")
    model_dirs = [model_dir] if isinstance(model_dir, str) else list(model_dir)
    if not model_dirs:
        raise RescorerError("score: no model given (-m)")
    loaded = [load_model_dir(folder, device=device) for folder in model_dirs]

    batch_tokens = config.batch_tokens or (4096 if device.type == "cpu" else 65536)
    compile_ = want_compile(config.compile, table)
    scorers = [Scorer(m.model, precision, batch_tokens, compile_) for m in loaded]
    sides = [ModelSides(m.src_vocab, m.tgt_vocab, m.direction) for m in loaded]
    workers = resolve_workers(config.workers, device)
    chunk_bytes = chunk_bytes_for(config.chunk_bytes, device)
    if (workers, chunk_bytes) != (config.workers, config.chunk_bytes):
        config = replace(config, workers=workers, chunk_bytes=chunk_bytes)
    phases = Phases(device) if config.profile else None
    if phases is not None:  # every model's encoder, decoder and readout time together
        for scorer in scorers:
            scorer.phase = phases
    stats = ScoreStats(device=str(device), precision=precision)
    start, first_line, end = 0, 1, None
    shard_range = None
    if config.shard is not None:
        shard_range = shard_bounds(table, chunk_bytes, config.shard)
        start, first_line, end = shard_range.start, shard_range.first_line, shard_range.end
    stats.next_offset = start
    run_key = {
        "table": os.path.abspath(table) if table != "-" else "-",
        "input": input_fingerprint(table) if regular else None,
        # One model: its folder and hash, as before multi-model runs; several: lists, in order.
        "model_dir": one_or_list([os.path.abspath(folder) for folder in model_dirs]),
        "model": one_or_list([model_fingerprint(folder) for folder in model_dirs]),
        "config": {k: v for k, v in asdict(config).items() if k not in NOT_IN_RUN_KEY},
    }
    manifest: dict[str, Any] | None = None
    if shard_range is not None and config.shard is not None and out != "-":
        manifest = shard_manifest(
            config,
            config.shard,
            shard_range,
            run_key,
            out,
            precision,
            device,
            batch_tokens,
            compile_,
        )
    output = Output(out, run_key, config.skip_bad_lines, config.checkpoint_every)
    output.lock()  # one run per OUT: a second one is refused, naming the first one's pid
    fresh = Resume(start, first_line)  # a shard starts at its own first chunk
    try:
        if config.resume and manifest is not None and finished_shard(output, manifest, stats):
            output.unlock()  # a re-run of a finished task (a requeue): nothing to redo
            return stats
        if not config.resume:
            output.refuse_to_discard(config.restart or config.force)
        resume = output.load_resume(fresh, table, config.force) if config.resume else fresh
    except BaseException:
        output.unlock()
        raise
    if resume.stats:
        stats.lines_in = resume.stats["lines_in"]
        stats.lines_out = resume.stats["lines_out"]
        stats.bad = resume.stats["bad"]
        stats.range_sha256 = resume.stats.get("range_sha256", "")
        stats.earlier_seconds = resume.stats.get("seconds", 0.0)
        stats.resumed_from_line = resume.first_line
        stats.next_offset = resume.offset
    name = display_name(table)
    pool: Any = Inline()
    progress = Progress(
        f"rescorer score {name}", "pairs", every=config.progress_every, enabled=not config.quiet
    )
    meter = InputMeter()
    # The decompressed size, where the gzip trailer tells it: the decompressing thread reads
    # megabytes ahead, so the compressed position says little on a table of a few MB.
    text_size = gzip_text_size(table) if regular else None

    def fraction() -> float | None:
        if shard_range is not None:  # the shard's own range of the decompressed input
            span = max(shard_range.end - shard_range.start, 1)
            return (stats.next_offset - shard_range.start) / span
        if text_size and stats.next_offset <= text_size:
            return stats.next_offset / text_size
        return meter.fraction()

    t0 = time.monotonic()
    ok = interrupted = False
    # the first chunk's compile reports nothing: a line every --progress-every seconds
    beat = Heartbeat(
        _say,
        "rescorer score: still compiling, with the first chunk",
        config.progress_every if compile_ and not config.quiet else 0,
    )

    def report() -> None:
        beat.stop()  # a chunk is written: compiled
        progress.update(stats.pairs_scored, fraction())

    try:  # from here on an error leaves no OUT.partial behind (unless interrupted)
        output.open(resume)
        num_scores = first_num_scores(table) if regular else None  # a pipe: its first chunk
        if workers > 0:
            # Started with SIGINT ignored, which a new interpreter inherits through exec and
            # keeps: a Ctrl-C while a worker still imports cannot interrupt it either.
            handler = signal.signal(signal.SIGINT, signal.SIG_IGN)
            try:
                pool = multiprocessing.get_context("spawn").Pool(
                    workers,
                    initializer=init_worker,
                    initargs=(sides, None, True),
                )
            finally:
                signal.signal(signal.SIGINT, handler)
        else:
            init_worker(sides)
        with open_binary(table, meter) as stream:
            chunks = iter_chunks(
                stream,
                chunk_bytes,
                start=resume.offset,
                first_line=resume.first_line,
                name=table,
            )
            if not regular:  # read once: the score count comes from the first chunk itself
                first = next(chunks, None)
                if first is not None:
                    not_a_reordering_table(name, table_kind(first.data.split(b"\n")))
                    num_scores = num_scores_of(first.data.split(b"\n"), first.first_line)
                    chunks = itertools.chain([first], chunks)
            if not config.quiet:  # the input is a table: the first line says how the run computes
                _say(f"rescorer score: {device}, {precision}, {threads.describe()}")
                if shard_range is not None and config.shard is not None:
                    uneven = shard_note(shard_range, chunk_bytes, config.shard)
                    if uneven:
                        _say(f"rescorer score: note: {uneven}")
                if compile_:
                    _say(
                        "rescorer score: compiling the model's steps and readout while the "
                        f"first chunk is scored ({COMPILE_TYPICAL}; --compile no skips it)"
                    )
            if end is not None:
                chunks = (c for c in chunks if c.offset < end)
            _run(
                chunks,
                pool,
                scorers,
                output,
                config,
                num_scores,
                name,
                stats,
                report,
                out,
                phases or nothing,
                [
                    coverage_check(m.provenance, f, config.ignore_coverage)
                    for m, f in zip(loaded, model_dirs, strict=True)
                ],
                model_dirs,
            )
        if shard_range is not None and stats.next_offset != shard_range.end:
            raise RescorerError(
                f"{name}: the input ended at byte {stats.next_offset}, but shard "
                f"{config.shard} should end at byte {shard_range.end}: did it change?"
            )
        if out.endswith(".gz") and output.sink is not None and output.sink.tell() == 0:
            # no line, no member: an empty gzip member keeps OUT a valid gzip file
            output.write(gzip_member(b"", config.compresslevel), [])
        ok = True
    except KeyboardInterrupt:
        interrupted = True  # keep OUT.partial and its record for --resume
        raise
    except WriteError as exc:
        if not exc.disk_full or out == "-":
            raise
        interrupted = True  # a full disk: what the record vouches for goes on after --resume
        raise RescorerError(
            f"{exc}; {out}.partial keeps what its record vouches for: free space, then run "
            "the same command with --resume to finish it"
        ) from exc
    finally:
        beat.stop()
        progress.close()
        (pool.close if ok else pool.terminate)()
        pool.join()
        if ok and manifest is not None:
            manifest = complete_manifest(manifest, stats, device)
        try:
            if interrupted:  # the record names the last chunk written whole
                with contextlib.suppress(WriteError):  # a disk still full: the last record stands
                    output.checkpoint()
        finally:
            output.close(ok, keep_partial=interrupted, manifest=manifest)
    stats.seconds = time.monotonic() - t0
    stats.phases = phases
    return stats


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _run(
    chunks: Iterator[Chunk],
    pool: Any,
    scorers: Sequence[Any],
    output: Output,
    config: ScoreConfig,
    num_scores: int | None,
    name: str,
    stats: ScoreStats,
    progress: Callable[[], None],
    out: str,
    phase: Callable[[str], contextlib.AbstractContextManager[None]] = nothing,
    coverage: Sequence[Callable[[int, int], bool]] = (),
    model_dirs: Sequence[str] = ("the model",),
) -> None:
    """Parse ahead in the pool, score in order (chunk k+1 submitted before chunk k's scores are
    collected), format in the pool, write in order, record progress by time. ``coverage[k]``
    hears of model k's pairs inside its shortlists, before they are scored, until it has
    warned (it may refuse the table: score/models.py)."""
    warn: list[Callable[[int, int], bool] | None] = list(coverage)
    inside = [0] * len(scorers)  # pairs inside each model's shortlists
    read = [0]  # pairs read (parsed) so far
    gz_level = config.compresslevel if out.endswith(".gz") else None
    workers, chunk_bytes = config.workers, config.chunk_bytes
    assert isinstance(workers, int) and chunk_bytes is not None  # resolved by score_table
    # Chunks being parsed at once: enough to keep the workers busy, at most MAX_AHEAD_BYTES.
    ahead = max(2, min(2 * workers, MAX_AHEAD_BYTES // chunk_bytes))
    parsing: deque[Any] = deque()
    scoring: deque[tuple[list[Any], ParsedChunk]] = deque()  # submitted, not yet collected
    formatting: deque[tuple[Any, ParsedChunk]] = deque()

    def submit_parse() -> None:
        while len(parsing) < ahead:
            with phase("read"):
                chunk = next(chunks, None)
            if chunk is None:
                return
            args = (chunk, num_scores, name, config.shard is not None)
            with phase("parse"):
                parsing.append(pool.apply_async(parse_chunk, args))

    def collect() -> None:
        """The oldest submitted chunk's scores (waiting for the device only here) go to the
        formatter."""
        pending, parsed = scoring.popleft()
        with phase("d2h"):
            logp = collect_columns(pending, parsed)  # (N,) or (N,M)
        if not np.isfinite(logp).all():  # one pass: no nan or inf ever reaches the output
            raise non_finite_error(logp, parsed, name, model_dirs, stats.precision)
        if not stats.pairs_scored:  # the first chunk: is the table score's own output?
            scored = already_scored(name, parsed.lines, logp)
            if scored:
                _say(f"rescorer score: {scored}")
        stats.pairs_scored += len(logp)
        args = (parsed.lines, parsed.cuts, logp, parsed.unk, config.column, config.word_penalty)
        with phase("format"):
            result = pool.apply_async(format_chunk, (*args, gz_level, parsed.last_unterminated))
        parsed.by_model, parsed.orders = [], []  # only what the writer needs stays in memory
        formatting.append((result, parsed))
        write_ready(limit=max(1, workers))

    def write_ready(limit: int) -> None:
        while len(formatting) > limit or (formatting and formatting[0][0].ready()):
            result, parsed = formatting.popleft()
            with phase("format"):
                data = result.get()
            with phase("write"):
                output.write(data, [raw for _, _, raw in parsed.bad])
            stats.lines_in += parsed.lines_in
            stats.lines_out += len(parsed.lines)
            stats.bad += len(parsed.bad)
            stats.next_offset = parsed.chunk_offset + parsed.chunk_len
            if parsed.chunk_sha256:  # shards only: their manifest vouches for the range
                stats.range_sha256 = chain_sha256(stats.range_sha256, parsed.chunk_sha256)
            for lineno, message, _ in parsed.bad[: max(0, 5 - len(stats.bad_examples))]:
                stats.bad_examples.append(f"{name}:{lineno}: {message}")
            with phase("write"):  # a record only every --checkpoint-every seconds
                output.advance(stats.next_offset, parsed.first_line + parsed.lines_in, stats)
            progress()

    submit_parse()
    while parsing:
        with phase("parse"):
            parsed: ParsedChunk = parsing.popleft().get()
        submit_parse()
        if parsed.bad and config.skip_bad_lines is None:
            lineno, message, _ = parsed.bad[0]
            raise InputError(name, lineno, message)
        read[0] += parsed.pairs.num_pairs  # the models' verdicts come before they score them
        for k, pairs in enumerate(parsed.by_model):
            inside[k] += pairs_inside_shortlists(pairs)
            callback = warn[k] if k < len(warn) else None
            if callback is not None and callback(inside[k], read[0]):
                warn[k] = None  # warned once
        stats.pairs_inside = inside[0]  # the first model's
        models = zip(scorers, parsed.by_model, strict=True)
        scoring.append(([scorer.submit(pairs) for scorer, pairs in models], parsed))
        while len(scoring) > (1 if config.overlap else 0):
            collect()
    while scoring:
        collect()
    write_ready(limit=0)
    with phase("write"):
        output.checkpoint()  # the end: everything written is on disk before OUT is renamed
