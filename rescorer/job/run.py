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
   to OUT; interrupted, on a full disk or when a worker dies (:mod:`~rescorer.job.pool`),
   ``OUT.partial`` and its record stay for ``--resume``; after any other error nothing is left.

Memory is bounded by ``chunk_bytes`` times the chunks in flight (at most ``MAX_AHEAD_BYTES``
being parsed, two on the device, ``workers`` being formatted), never by the table. No torch
here.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures.process import BrokenProcessPool
from typing import Any, BinaryIO

from rescorer.errors import RescorerError
from rescorer.io.chunks import Chunk, ShardRange, iter_chunks, shard_bounds, shard_note
from rescorer.io.inputs import InputMeter, display_name, gzip_text_size, open_binary
from rescorer.io.outputs import WriteError, gzip_member
from rescorer.io.progress import Heartbeat, Progress
from rescorer.io.reordering import not_a_reordering_table, sniff_table_kind, table_kind
from rescorer.io.shm import remove_dead
from rescorer.job import interrupts
from rescorer.job.clobber import job_inputs, refuse_clobber, score_files
from rescorer.job.output import Output, Resume
from rescorer.job.pool import Inline, Pool, Workers, ready, start_pool
from rescorer.job.record import run_key as record_run_key
from rescorer.job.shards import complete_manifest, finished_shard, shard_manifest
from rescorer.job.stats import JobStats
from rescorer.job.stream import first_num_scores, num_scores_of, stream_chunks
from rescorer.job.work import ChunkWork, Phase, nothing

__all__ = ["ChunkWork", "Phase", "StreamedJob", "first_num_scores", "nothing"]


def _unmarked(name: str) -> None:
    """No stretch is timed."""


def _count_of(chunk: Chunk) -> int | None:
    """The score count of the chunk's first well-formed line (None: it has none)."""
    return num_scores_of(chunk.data.split(b"\n"), chunk.first_line)


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

    def __enter__(self) -> StreamedJob:
        return self

    def __exit__(self, kind: type[BaseException] | None, *rest: object) -> None:
        """A job that fails before or while it runs lets its locks go (and removes them)."""
        if kind is not None:
            self.output.unlock()

    def claim(self, config: Any) -> None:
        """The output's checks, before any model loads (a command calls it before it imports
        torch, which takes a minute on a busy machine): without --resume, an interrupted run's
        partial that --resume could continue is refused unless --restart or --force (``run``
        checks again). The lock on OUT.partial was taken when the job was made."""
        try:
            if not config.resume and not (config.restart or config.force):
                self.output.refuse_to_discard(False)
        except BaseException:
            self.output.unlock()
            raise

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
        mark: Callable[[str], None] = _unmarked,
    ) -> JobStats:
        """Run the job (module docstring), ``work`` on every chunk. ``config``: the job's
        config with ``workers`` and ``chunk_bytes`` resolved to numbers (the device decides
        them); ``manifest_options``: every option that changes the output's bytes, as a
        shard's manifest states them; ``opening``: lines said when the input opens (how the
        run computes); ``compiling``: said every --progress-every seconds until the first chunk
        is written, while a first compile reports nothing; ``mark``: told when each stretch of
        the run ends (``score --profile``: rescorer/score/profile.py's STRETCHES)."""
        assert isinstance(config.workers, int) and config.chunk_bytes is not None
        shard_range = None
        if config.shard is not None:
            shard_range = shard_bounds(self.table, config.chunk_bytes, config.shard)
        stats.next_offset = shard_range.start if shard_range is not None else 0
        run_key = record_run_key(self.table, self.regular, config, model_dirs)
        manifest: dict[str, Any] | None = None
        if shard_range is not None and config.shard is not None and not self.output.direct:
            manifest = shard_manifest(manifest_options, config.shard, shard_range, run_key)
            if self.command != "score":  # what merge checks a part's text against
                manifest = {"command": self.command, **manifest}
        output = self.output  # locked since the job began
        output.set_run(run_key)
        resume = self._resume(output, config, stats, manifest, shard_range)
        if resume is None:
            return stats  # a re-run of a finished shard: nothing to redo
        run = _Run(self, work, config, stats, output, *resume, shard_range, phase, mark)
        run.stream(opening, compiling, manifest, device)
        return stats

    def _resume(
        self,
        output: Output,
        config: Any,
        stats: JobStats,
        manifest: dict[str, Any] | None,
        shard_range: ShardRange | None,
    ) -> tuple[Resume, bool] | None:
        """Where this run starts, and whether that is its own start (no record resumed);
        None: a finished shard (unlocked). The stats of the runs it resumes are taken over."""
        fresh = Resume(0, 1)  # a shard starts at its own first chunk
        if shard_range is not None:
            fresh = Resume(shard_range.start, shard_range.first_line)
        try:
            if (
                config.resume
                and manifest is not None
                and finished_shard(output.out, output.record, manifest, stats)
            ):
                output.unlock()  # a re-run of a finished task (a requeue): nothing to redo
                return None
            if not config.resume:  # an interrupted run's partial is discarded only when asked
                output.refuse_to_discard(config.restart or config.force)
            resume = output.load_resume(fresh, self.table, config.force) if config.resume else fresh
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
        return resume, resume is fresh


class _Run:
    """The part of one run after the lock: open, stream every chunk, close."""

    def __init__(
        self,
        job: StreamedJob,
        work: ChunkWork,
        config: Any,
        stats: JobStats,
        output: Output,
        resume: Resume,
        fresh: bool,
        shard_range: ShardRange | None,
        phase: Phase,
        mark: Callable[[str], None],
    ) -> None:
        self.job, self.work, self.config, self.stats = job, work, config, stats
        self.output, self.resume, self.fresh = output, resume, fresh
        self.shard_range, self.phase, self.mark = shard_range, phase, mark
        self.written = False  # a chunk has been written
        self.no_pool = ""  # why there are no workers although asked for: said after the opening
        self.name = display_name(job.table)
        self.meter = InputMeter()
        # The decompressed size, where the gzip trailer tells it: the decompressing thread reads
        # megabytes ahead, so the compressed position says little on a table of a few MB.
        self.text_size = gzip_text_size(job.table) if job.regular else None

    def fraction(self) -> float | None:
        """The share of the input (of the shard's range) the output covers."""
        stats, shard_range = self.stats, self.shard_range
        if shard_range is not None:  # the shard's own range of the decompressed input
            span = max(shard_range.end - shard_range.start, 1)
            return (stats.next_offset - shard_range.start) / span
        if self.text_size and stats.next_offset <= self.text_size:
            return stats.next_offset / self.text_size
        return self.meter.fraction()

    def stream(
        self,
        opening: Sequence[str],
        compiling: str | None,
        manifest: dict[str, Any] | None,
        device: Any,
    ) -> None:
        """Every chunk through ``work``, then OUT.partial renamed to OUT (module docstring)."""
        job, config, stats, output = self.job, self.config, self.stats, self.output
        pool: Pool = Inline()
        progress = Progress(
            f"rescorer {job.command} {self.name}",
            self.work.unit,
            every=config.progress_every,
            enabled=not config.quiet,
        )
        t0 = time.monotonic()
        ok = interrupted = False
        every = config.progress_every if compiling and not config.quiet else 0
        beat = Heartbeat(_say, compiling or "", every)

        def report() -> None:
            beat.stop()  # a chunk is written: compiled
            progress.update(self.work.progress(), self.fraction())
            if not self.written:
                self.written = True
                self.mark("first chunk")

        try:  # from here on an error leaves no OUT.partial behind (unless interrupted)
            output.open(self.resume)
            remove_dead()  # what runs killed with their resource tracker left in /dev/shm
            work = self.work
            pool, self.no_pool = start_pool(config.workers, work.init_worker, work.init_args)
            if self.mark is not _unmarked:  # timed: until a worker has started (in parallel)
                interrupts.result(pool.submit(ready))
            self.mark("worker start")
            self._chunks_through(pool, opening, report)
            ok = True
        except KeyboardInterrupt:
            interrupted = True  # keep OUT.partial and its record for --resume
            raise
        except WriteError as exc:
            if not exc.disk_full or output.direct:
                raise
            # a full disk: what the record vouches for goes on after --resume
            error, interrupted = self._stopped(str(exc), "free space, then ")
            raise error from exc
        except BrokenProcessPool as exc:  # a worker died (the OOM killer): its chunks are lost
            assert isinstance(pool, Workers)
            death = pool.death(exc)
            if output.direct:
                raise RescorerError(f"{death}; output to stdout cannot be resumed") from exc
            error, interrupted = self._stopped(death, "")
            raise error from exc
        finally:
            beat.stop()
            progress.close()
            (pool.close if ok else pool.terminate)()
            if ok and manifest is not None:
                manifest = complete_manifest(manifest, stats, device)
            try:
                if interrupted:  # the record names the last chunk written whole
                    with contextlib.suppress(WriteError):  # a disk still full: last record stands
                        output.checkpoint()
            finally:
                output.close(ok, keep_partial=interrupted, manifest=manifest)
                self.mark("final rename")
        stats.seconds = time.monotonic() - t0

    def _chunks_through(
        self, pool: Pool, opening: Sequence[str], report: Callable[[], None]
    ) -> None:
        """Read the input's chunks and stream them through ``pool`` into the output."""
        job, config, output, name = self.job, self.config, self.output, self.name
        with open_binary(job.table, self.meter) as stream:
            legs = self._legs(stream)
            first = next(legs)  # a pipe's first chunk is read: not a reordering table
            if not config.quiet:  # a table, not a reordering one: say how the run computes
                self._say_opening(opening)
            gz_level = config.compresslevel if job.out.endswith(".gz") else None
            for chunks, count, last in itertools.chain([first], legs):
                run = (chunks, pool, self.work, output, config, count, gz_level, name, self.stats)
                stream_chunks(*run, report, self.phase, self._mark_end if last else None)
        shard_range = self.shard_range
        if shard_range is not None and self.stats.next_offset != shard_range.end:
            raise RescorerError(
                f"{name}: the input ended at byte {self.stats.next_offset}, but shard "
                f"{config.shard} should end at byte {shard_range.end}: did it change?"
            )
        if job.out.endswith(".gz") and output.sink is not None and output.sink.tell() == 0:
            # no line, no member: an empty gzip member keeps OUT a valid gzip file
            output.write(gzip_member(b"", config.compresslevel), [])

    def _mark_end(self, name: str) -> None:
        """The chunk loop's marks: before the first chunk is written, its time is the first
        chunk's (a one-chunk input has no steady state)."""
        if self.written or name != "steady state":
            self.mark(name)

    def _legs(self, stream: BinaryIO) -> Iterator[tuple[Iterator[Chunk], int | None, bool]]:
        """The run's chunks in legs streamed one after the other: (chunks, the score count
        their lines must have, last leg?). A file's are one leg, with its first well-formed
        line's count. A pipe, read once, takes the count of its first chunk with a well-formed
        line; the chunks before it, all bad lines, go first without one (issue 65.3)."""
        config, resume = self.config, self.resume
        chunks = iter_chunks(
            stream,
            config.chunk_bytes,
            start=resume.offset,
            first_line=resume.first_line,
            name=self.job.table,
        )
        if self.shard_range is not None:
            end = self.shard_range.end
            chunks = (c for c in chunks if c.offset < end)
        if self.job.regular:
            yield chunks, first_num_scores(self.job.table), True
            return
        ahead = list(itertools.islice(chunks, 1))  # the pipe's first chunk, then the one found
        if ahead:
            not_a_reordering_table(self.name, table_kind(ahead[0].data.split(b"\n")))

        def before() -> Iterator[Chunk]:  # the chunks of bad lines alone, as they are read
            while ahead and _count_of(ahead[0]) is None:
                yield ahead.pop()
                ahead.extend(itertools.islice(chunks, 1))

        if ahead and _count_of(ahead[0]) is None:
            yield before(), None, False
        yield itertools.chain(ahead, chunks), _count_of(ahead[0]) if ahead else None, True

    def _say_opening(self, opening: Sequence[str]) -> None:
        for line in opening:
            _say(line)
        if self.shard_range is not None and self.config.shard is not None:
            uneven = shard_note(self.shard_range, self.config.chunk_bytes, self.config.shard)
            if uneven:
                _say(f"rescorer {self.job.command}: note: {uneven}")
        if self.no_pool:
            _say(f"rescorer {self.job.command}: note: {self.no_pool}")

    def _stopped(self, cause: str, first: str) -> tuple[RescorerError, bool]:
        """The error a run stopped by ``cause`` (a full disk, a dead worker) ends with, and
        whether OUT.partial is kept (where a record vouches for it); ``first``: what to do
        before the command is run again."""
        output, out = self.output, self.job.out
        with contextlib.suppress(WriteError):  # a disk still full: the last record stands
            output.checkpoint()
        if output.recorded is None and self.fresh:  # no record: nothing would resume
            return RescorerError(
                f"{cause}; no progress record had been written yet (one is written every "
                f"--checkpoint-every seconds), so nothing is kept to resume: {first}run "
                "the same command again"
            ), False
        return RescorerError(
            f"{cause}; {out}.partial keeps what its record vouches for: {first}run "
            "the same command with --resume to finish it"
        ), True


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)
