"""A streamed job over a Moses phrase table, what ``rescorer score`` and ``rescorer extend``
both are. A command states what it does with one chunk (a :class:`ChunkWork`) and runs it:

    job = StreamedJob("score", table, out, config)  # the checks made before any model loads
    stats = job.run(work, config, stats, model_dirs, manifest_options, device)

``run`` then does, in this order:

1. (when the job is made) lock ``OUT.partial`` and the --skip-bad-lines file (one run per
   output); a re-run of a finished shard stops here;
2. start at the progress record's offset (``--resume``) or at the shard's first chunk;
3. read the decompressed table in chunks cut at source-phrase boundaries
   (:mod:`rescorer.io.chunks`: the same cuts in a single run, a resumed run and a shard);
4. per chunk, in input order: ``work.parse`` in a worker process, ``work.submit`` (the device
   starts), ``work.collect`` (waits for the device, returns the formatting call), that call in
   a worker, its bytes appended to ``OUT.partial``; a progress record every
   ``checkpoint_every`` seconds (:mod:`~rescorer.job.output`). With ``overlap``, chunk k+1 is
   submitted before chunk k is collected, so the device works while the host parses and formats;
5. at the end the shard's manifest (:mod:`~rescorer.job.shards`) and ``OUT.partial`` renamed
   to OUT; interrupted or on a full disk, ``OUT.partial`` and its record stay for ``--resume``;
   after any other error nothing is left.

Memory is bounded by ``chunk_bytes`` times the chunks in flight (at most ``MAX_AHEAD_BYTES``
being parsed, two on the device, ``workers`` being formatted), never by the table. No torch
here.
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
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict
from typing import Any, Protocol

from rescorer.errors import InputError, RescorerError
from rescorer.io.chunks import Chunk, iter_chunks, shard_bounds, shard_note
from rescorer.io.inputs import InputMeter, display_name, gzip_text_size, iter_raw_lines, open_binary
from rescorer.io.outputs import WriteError, gzip_member
from rescorer.io.progress import Heartbeat, Progress
from rescorer.io.reordering import not_a_reordering_table, sniff_table_kind, table_kind
from rescorer.io.table import parse_raw_line
from rescorer.job.clobber import job_inputs, refuse_clobber, score_files
from rescorer.job.output import Output, Resume, finished_shard
from rescorer.job.record import input_fingerprint, model_fingerprint
from rescorer.job.shards import chain_sha256, complete_manifest, shard_manifest
from rescorer.job.stats import MAX_AHEAD_BYTES, NOT_IN_RUN_KEY, JobStats

Phase = Callable[[str], contextlib.AbstractContextManager[None]]


def nothing(name: str) -> contextlib.AbstractContextManager[None]:
    """A phase that is not timed."""
    return contextlib.nullcontext()


class Parsed(Protocol):
    """What the job reads of a parsed chunk (``work.parse``'s result); the rest is the work's."""

    chunk_offset: int
    chunk_len: int
    first_line: int
    lines_in: int
    bad: list[tuple[int, str, bytes]]  # (line number, message, raw line)
    chunk_sha256: str


class ChunkWork(Protocol):
    """What a command does with each chunk: the one part of a streamed job it writes."""

    @property
    def unit(self) -> str:
        """What the progress line counts ("pairs", "sources")."""

    @property
    def init_worker(self) -> Callable[..., None]:
        """A worker's start, called as ``init_worker(*init_args, in_pool)`` (module-level)."""

    @property
    def init_args(self) -> tuple[Any, ...]: ...

    @property
    def parse(self) -> Callable[[Chunk, int | None, str, bool], Any]:
        """``(chunk, num_scores, name, digest) -> Parsed``, run in a worker (module-level)."""

    def submit(self, parsed: Any) -> Any:
        """Start the device's work on a parsed chunk; return what ``collect`` waits for."""

    def collect(
        self, pending: Any, parsed: Any, gz_level: int | None
    ) -> tuple[Callable[..., bytes], tuple[Any, ...], int]:
        """Wait for the device; the call that formats the chunk's output bytes (in a worker),
        its arguments, and the number of lines it writes."""

    def progress(self) -> int:
        """The count the progress line shows."""


class JobConfig(Protocol):
    """The options every streamed job has (ScoreConfig's and ExtendConfig's fields)."""

    chunk_bytes: int | None
    workers: int | str
    shard: tuple[int, int] | None
    resume: bool
    compresslevel: int
    skip_bad_lines: str | None
    quiet: bool
    progress_every: float
    force: bool
    restart: bool
    checkpoint_every: float
    overlap: bool


class StreamedJob:
    """One run of a command over ``table`` into ``out``; the checks here come before any
    model is loaded: an output that is an input, a pipe with --resume or --shard, a lexicalised
    reordering table."""

    def __init__(
        self, command: str, table: str, out: str, config: Any, model_dirs: Sequence[str] = ()
    ) -> None:
        if out == "-" and config.resume:
            raise RescorerError("--resume needs an output file, not stdout")
        self.command, self.table, self.out = command, table, out
        self.regular = table != "-" and os.path.isfile(table)  # a pipe can be read once
        writes = score_files(out, config.skip_bad_lines)
        refuse_clobber(job_inputs(table, config, model_dirs), writes)
        if not self.regular and (config.resume or config.shard):
            raise RescorerError(
                "--resume and --shard need a regular input file, not stdin or a pipe"
            )
        not_a_reordering_table(table, sniff_table_kind(table))  # a file: before any work
        # one run per OUT and per --skip-bad-lines file, from before any model loads to the end
        self.output = Output(out, {}, config.skip_bad_lines, config.checkpoint_every, command)
        self.output.lock()

    def run(
        self,
        work: ChunkWork,
        config: Any,
        stats: JobStats,
        model_dirs: Sequence[str],
        manifest_options: dict[str, Any],
        device: Any,
        phase: Phase = nothing,
        opening: Sequence[str] = (),
        compiling: str | None = None,
    ) -> JobStats:
        """Run the job (module docstring), ``work`` on every chunk. ``config``: the job's
        config with ``workers`` and ``chunk_bytes`` resolved to numbers (the device decides
        them); ``manifest_options``: every option that changes the output's bytes, as a
        shard's manifest states them; ``opening``: lines said when the input opens (how the
        run computes); ``compiling``: said every --progress-every seconds until the first chunk
        is written, while a first compile reports nothing."""
        table, out = self.table, self.out
        assert isinstance(config.workers, int) and config.chunk_bytes is not None
        start, first_line, end = 0, 1, None
        shard_range = None
        if config.shard is not None:
            shard_range = shard_bounds(table, config.chunk_bytes, config.shard)
            start, first_line, end = shard_range.start, shard_range.first_line, shard_range.end
        stats.next_offset = start
        run_key = {
            "table": os.path.abspath(table) if table != "-" else "-",
            "input": input_fingerprint(table) if self.regular else None,
            # One model: its folder and hash; several: lists, in order.
            "model_dir": _one_or_list([os.path.abspath(folder) for folder in model_dirs]),
            "model": _one_or_list([model_fingerprint(folder) for folder in model_dirs]),
            "config": {k: v for k, v in asdict(config).items() if k not in NOT_IN_RUN_KEY},
        }
        manifest: dict[str, Any] | None = None
        if shard_range is not None and config.shard is not None and not self.output.direct:
            manifest = shard_manifest(manifest_options, config.shard, shard_range, run_key)
            if self.command != "score":  # what merge checks a part's text against
                manifest = {"command": self.command, **manifest}
        output = self.output  # locked since the job began
        output.set_run(run_key)
        fresh = Resume(start, first_line)  # a shard starts at its own first chunk
        try:
            if config.resume and manifest is not None and finished_shard(output, manifest, stats):
                output.unlock()  # a re-run of a finished task (a requeue): nothing to redo
                return stats
            if not config.resume:  # an interrupted run's partial is discarded only when asked
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
            f"rescorer {self.command} {name}",
            work.unit,
            every=config.progress_every,
            enabled=not config.quiet,
        )
        meter = InputMeter()
        # The decompressed size, where the gzip trailer tells it: the decompressing thread reads
        # megabytes ahead, so the compressed position says little on a table of a few MB.
        text_size = gzip_text_size(table) if self.regular else None

        def fraction() -> float | None:
            if shard_range is not None:  # the shard's own range of the decompressed input
                span = max(shard_range.end - shard_range.start, 1)
                return (stats.next_offset - shard_range.start) / span
            if text_size and stats.next_offset <= text_size:
                return stats.next_offset / text_size
            return meter.fraction()

        t0 = time.monotonic()
        ok = interrupted = False
        every = config.progress_every if compiling and not config.quiet else 0
        beat = Heartbeat(_say, compiling or "", every)

        def report() -> None:
            beat.stop()  # a chunk is written: compiled
            progress.update(work.progress(), fraction())

        try:  # from here on an error leaves no OUT.partial behind (unless interrupted)
            output.open(resume)
            num_scores = first_num_scores(table) if self.regular else None  # a pipe: chunk 1
            if config.workers > 0:
                # Started with SIGINT ignored, which a new interpreter inherits through exec and
                # keeps: a Ctrl-C while a worker still imports cannot interrupt it either.
                handler = signal.signal(signal.SIGINT, signal.SIG_IGN)
                try:
                    pool = multiprocessing.get_context("spawn").Pool(
                        config.workers,
                        initializer=work.init_worker,
                        initargs=(*work.init_args, True),
                    )
                finally:
                    signal.signal(signal.SIGINT, handler)
            else:
                work.init_worker(*work.init_args)
            with open_binary(table, meter) as stream:
                chunks = iter_chunks(
                    stream,
                    config.chunk_bytes,
                    start=resume.offset,
                    first_line=resume.first_line,
                    name=table,
                )
                if not self.regular:  # read once: the score count comes from the first chunk
                    first = next(chunks, None)
                    if first is not None:
                        not_a_reordering_table(name, table_kind(first.data.split(b"\n")))
                        num_scores = num_scores_of(first.data.split(b"\n"), first.first_line)
                        chunks = itertools.chain([first], chunks)
                if not config.quiet:  # a table, not a reordering one: say how the run computes
                    for line in opening:
                        _say(line)
                    if shard_range is not None and config.shard is not None:
                        uneven = shard_note(shard_range, config.chunk_bytes, config.shard)
                        if uneven:
                            _say(f"rescorer {self.command}: note: {uneven}")
                if end is not None:
                    chunks = (c for c in chunks if c.offset < end)
                gz_level = config.compresslevel if out.endswith(".gz") else None
                _stream(
                    chunks,
                    pool,
                    work,
                    output,
                    config,
                    num_scores,
                    gz_level,
                    name,
                    stats,
                    report,
                    phase,
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
            if not exc.disk_full or output.direct:
                raise
            with contextlib.suppress(WriteError):  # a disk still full: the last record stands
                output.checkpoint()
            if output.recorded is None and resume is fresh:  # no record: nothing would resume
                raise RescorerError(
                    f"{exc}; no progress record had been written yet (one is written every "
                    "--checkpoint-every seconds), so nothing is kept to resume: free space, then "
                    "run the same command again"
                ) from exc
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
                    with contextlib.suppress(WriteError):  # a disk still full: last record stands
                        output.checkpoint()
            finally:
                output.close(ok, keep_partial=interrupted, manifest=manifest)
        stats.seconds = time.monotonic() - t0
        return stats


def _one_or_list(values: list[Any]) -> Any:
    return values[0] if len(values) == 1 else values


def _stream(
    chunks: Iterator[Chunk],
    pool: Any,
    work: ChunkWork,
    output: Output,
    config: JobConfig,
    num_scores: int | None,
    gz_level: int | None,
    name: str,
    stats: JobStats,
    progress: Callable[[], None],
    phase: Phase = nothing,
) -> None:
    """Parse ahead in the pool, submit to the device in order (chunk k+1 before chunk k is
    collected, with ``config.overlap``), format in the pool, write in order, record progress
    by time."""
    workers, chunk_bytes = config.workers, config.chunk_bytes
    assert isinstance(workers, int) and chunk_bytes is not None
    # Chunks being parsed at once: enough to keep the workers busy, at most MAX_AHEAD_BYTES.
    ahead = max(2, min(2 * workers, MAX_AHEAD_BYTES // chunk_bytes))
    parsing: deque[Any] = deque()
    working: deque[tuple[Any, Parsed]] = deque()  # submitted, not yet collected
    formatting: deque[tuple[Any, Parsed, int]] = deque()
    digest = config.shard is not None  # a shard's manifest vouches for its range's bytes

    def submit_parse() -> None:
        while len(parsing) < ahead:
            with phase("read"):
                chunk = next(chunks, None)
            if chunk is None:
                return
            with phase("parse"):
                args = (chunk, num_scores, name, digest)
                parsing.append(pool.apply_async(work.parse, args))

    def collect() -> None:
        """The oldest submitted chunk's results (waiting for the device only here) go to
        the formatter."""
        pending, parsed = working.popleft()
        func, args, lines_out = work.collect(pending, parsed, gz_level)
        with phase("format"):
            result = pool.apply_async(func, args)
        formatting.append((result, parsed, lines_out))
        write_ready(limit=max(1, workers))

    def write_ready(limit: int) -> None:
        while len(formatting) > limit or (formatting and formatting[0][0].ready()):
            result, parsed, lines_out = formatting.popleft()
            with phase("format"):
                data = result.get()
            with phase("write"):
                output.write(data, [raw for _, _, raw in parsed.bad])
            stats.lines_in += parsed.lines_in
            stats.lines_out += lines_out
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
            parsed: Parsed = parsing.popleft().get()
        submit_parse()
        if parsed.bad and config.skip_bad_lines is None:
            lineno, message, _ = parsed.bad[0]
            raise InputError(name, lineno, message)
        working.append((work.submit(parsed), parsed))
        while len(working) > (1 if config.overlap else 0):
            collect()
    while working:
        collect()
    write_ready(limit=0)
    with phase("write"):
        output.checkpoint()  # the end: everything written is on disk before OUT is renamed


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


class Inline:
    """The subset of a multiprocessing Pool used here, run in the calling process."""

    def apply_async(self, func: Callable[..., Any], args: tuple[Any, ...]) -> _Done:
        return _Done(func(*args))

    def close(self) -> None:
        pass

    def terminate(self) -> None:
        pass

    def join(self) -> None:
        pass


class _Done:
    def __init__(self, value: Any) -> None:
        self.value = value

    def get(self) -> Any:
        return self.value

    def ready(self) -> bool:
        return True


def first_num_scores(path: str) -> int | None:
    """The score count of the input's first well-formed line (what every line must match)."""
    with open_binary(path) as stream:
        return num_scores_of(iter_raw_lines(stream, path), 1)


def num_scores_of(raw_lines: Iterable[bytes], first_line: int) -> int | None:
    """The score count of the first well-formed line among ``raw_lines``."""
    for lineno, raw in enumerate(raw_lines, start=first_line):
        entry = parse_raw_line(raw, lineno, None) if raw.strip(b"\n") else ""
        if not isinstance(entry, str):
            return len(entry.scores)
    return None
