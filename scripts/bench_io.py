#!/usr/bin/env python3
"""Phrase-table I/O speed: rescorer's read + parse + write beside ``gzip -dc | gzip -1``.

1. On the same gzip table in the same run, each ``--repeat`` times (alternating), the best
   time of each reported with lines/s and the ratio to the gzip pipeline (the floor: it only
   decompresses and recompresses): ``gzip -dc | gzip -1``; ``score``'s I/O path in one
   process (read and cut chunks, ``parse_chunk``, ``format_chunk`` with a constant score and
   the word penalty, level-1 gzip members, write), the model left out; and ``copy_table``, the
   line-by-line reader and writer the other commands use. Also checks that the copy round
   trip is byte-identical.
2. ``score``'s own I/O stages, without the model: ``parse_chunk`` (validate, encode ids) and
   ``format_chunk`` (format the new column, compress the gzip member at level 1) over the
   table's 1 MiB chunks, in the main process and in pools of 1..``--max-workers`` spawn
   workers as ``score --workers N`` runs them: through score's chunk loop
   (:func:`rescorer.job.stream.stream_chunks`: parse in the pool, the results to the main
   process, format in the pool, write in order; the chunk's bytes and its output in shared
   memory where the code has it, through the pool's pipes before). Lines/s per run and per
   worker. The rate per worker, times the cores a GPU host can give, is what ``--workers``
   can feed a device with.
3. The main process's own ceiling (``--noop``): ``score``'s chunk loop
   (:func:`rescorer.job.stream.stream_chunks`: read and decompress, cut at source boundaries,
   parse ahead in the pool, keep the order, write OUT.partial with its records) with a no-op
   stage in ``--max-workers`` warm workers: what the main process alone can pass, parsing,
   scoring and formatting left out (each chunk still goes to a worker and back twice, as
   score's do: in shared memory where the code has it, through the pool's pipes before).

    python scripts/bench_io.py [--table ../shared/data/en-fr/phrase-table.gz] [--repeat 3]
    python scripts/bench_io.py --noop --max-workers 2 [--repeat 3]
    python scripts/bench_io.py --stages-only --max-workers 2 (part 2: per worker, scaling)

The script also runs the code before issue 57 (PYTHONPATH=a checkout of 7557308), so that a
sitting compares both with the same script.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import multiprocessing
import os
import subprocess
import tempfile
import time
import zlib
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import numpy as np
from benchlib import cpu_name, git_commit

from rescorer.cli.ranges import Arg, RangeHelp, per_cpu
from rescorer.io.chunks import Chunk, iter_chunks
from rescorer.io.inputs import open_binary
from rescorer.io.table import copy_table, read_table
from rescorer.job.output import Output, Resume
from rescorer.job.stats import JobStats

try:
    from rescorer.job.stream import stream_chunks
except ImportError:  # the code before issue 57 (7557308): the same loop, in job/run.py
    from rescorer.job.run import _stream as stream_chunks  # type: ignore[attr-defined,no-redef]
from rescorer.score.stages import ParsedChunk, format_chunk, init_worker, parse_chunk
from rescorer.vocab import Vocab, build_vocabs

DEFAULT_TABLE = os.path.join(
    os.path.dirname(__file__), "..", "..", "shared", "data", "en-fr", "phrase-table.gz"
)


def crc_of_gzip(path: str) -> tuple[int, int]:
    """CRC32 and length of the decompressed content."""
    out = subprocess.run(["gzip", "-dc", path], capture_output=True, check=True).stdout
    return zlib.crc32(out), len(out)


def main() -> None:
    parser = argparse.ArgumentParser(formatter_class=RangeHelp, description=__doc__.splitlines()[0])
    parser.add_argument("--table", default=DEFAULT_TABLE)
    parser.add_argument("--repeat", type=Arg(1, 1000), default=3)
    parser.add_argument("--model", help="Take the shortlists of this model directory.")
    parser.add_argument("--max-workers", type=Arg(1, per_cpu()[0]), default=os.cpu_count() or 1)
    parser.add_argument("--noop", action="store_true", help="Part 3 only: the main process.")
    parser.add_argument("--stages-only", action="store_true", help="Part 2 only.")
    parser.add_argument(
        "--lines", type=Arg(1, 10**8), help="Only the chunks of the first LINES lines."
    )
    args = parser.parse_args()
    if args.noop:
        noop_ceiling(args.table, args.max_workers, args.repeat)
        return
    src_vocab, tgt_vocab = vocabs(args.table, args.model)
    if args.stages_only:
        stages(args.table, src_vocab, tgt_vocab, args.max_workers, args.lines)
        return
    with tempfile.TemporaryDirectory() as tmp:
        ours, theirs = os.path.join(tmp, "ours.gz"), os.path.join(tmp, "gzip.gz")
        scored = os.path.join(tmp, "scored.gz")
        rescorer_times, gzip_times, score_times = [], [], []
        lines = 0
        for _ in range(args.repeat):
            t = time.perf_counter()
            score_io(args.table, scored, src_vocab, tgt_vocab)
            score_times.append(time.perf_counter() - t)
            t = time.perf_counter()
            lines = copy_table(args.table, ours).lines
            rescorer_times.append(time.perf_counter() - t)
            t = time.perf_counter()
            with open(theirs, "wb") as sink:
                dec = subprocess.Popen(["gzip", "-dc", args.table], stdout=subprocess.PIPE)
                subprocess.run(["gzip", "-1"], stdin=dec.stdout, stdout=sink, check=True)
                dec.wait()
            gzip_times.append(time.perf_counter() - t)
        identical = crc_of_gzip(ours) == crc_of_gzip(args.table)
    best_r, best_g, best_s = min(rescorer_times), min(gzip_times), min(score_times)
    commit = code_commit()
    print(f"table: {args.table} ({lines:,} lines); {args.repeat} runs each, best shown")
    print(f"date {datetime.date.today()}, commit {commit}, {cpu_name()}, {os.cpu_count()} cores")
    print("| pipeline | seconds | lines/s | relative |")
    print("|---|---|---|---|")
    print(f"| gzip -dc \\| gzip -1 | {best_g:.2f} | {lines / best_g:,.0f} | 1.00 |")
    print(
        f"| score's I/O path, one process (gzip 1) | {best_s:.2f} | {lines / best_s:,.0f} | "
        f"{best_g / best_s:.2f} |"
    )
    print(
        f"| copy_table, line by line (gzip 1) | {best_r:.2f} | {lines / best_r:,.0f} | "
        f"{best_g / best_r:.2f} |"
    )
    print(f"round trip byte-identical after decompression: {identical}")
    stages(args.table, src_vocab, tgt_vocab, args.max_workers)


def code_commit() -> str:
    """The short hash of the checkout whose rescorer is measured (PYTHONPATH's), which may
    not be this script's."""
    import rescorer

    folder = os.path.dirname(os.path.dirname(os.path.abspath(rescorer.__file__)))
    proc = subprocess.run(
        ["git", "-C", folder, "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    )
    return proc.stdout.strip() or git_commit()


def vocabs(table: str, model_dir: str | None) -> tuple[Vocab, Vocab]:
    """The model's shortlists, or 15,000-word ones built from the table."""
    if model_dir is not None:
        return Vocab.load(f"{model_dir}/vocab.src.json"), Vocab.load(f"{model_dir}/vocab.tgt.json")
    return build_vocabs(((e.src, e.tgt) for e in read_table(table)), 15000, 15000)


def _parse(args: tuple[Chunk, int]) -> ParsedChunk:
    return parse_chunk(*args, "bench", False)


def _format_args(parsed: ParsedChunk) -> tuple[Any, ...]:
    """format_chunk's arguments as ``score`` passes them (made-up scores for the model's:
    distinct values, as a model's are, so that formatting costs what it costs)."""
    if not hasattr(parsed, "text"):  # the code before issue 57 (7557308): lists of lines
        logp = -3.25 - np.arange(len(parsed.lines)) * 1e-5
        return (parsed.lines, parsed.cuts, logp, parsed.unk, "prob", False, 1, False)
    logp = -3.25 - np.arange(parsed.num_lines) * 1e-5
    return (parsed.text, parsed.cuts, logp, parsed.unk, "prob", False, 1)


def _stage_worker(args: tuple[Chunk, int]) -> bytes:
    return format_chunk(*_format_args(_parse(args)))


def score_io(table: str, out: str, src_vocab: Vocab, tgt_vocab: Vocab) -> None:
    """``score``'s I/O path in one process with a constant in place of the model."""
    init_worker(src_vocab, tgt_vocab)
    with open_binary(table) as stream, open(out, "wb") as sink:
        for chunk in iter_chunks(stream, 1 << 20):
            sink.write(_stage_worker((chunk, 4)))


def stages(
    table: str, src_vocab: Vocab, tgt_vocab: Vocab, max_workers: int, max_lines: int | None = None
) -> None:
    """Part 2 of the module docstring."""
    with open_binary(table) as stream:
        chunks = [(chunk, 4) for chunk in iter_chunks(stream, 1 << 20)]
    if max_lines is not None:
        chunks = [(c, n) for c, n in chunks if c.first_line <= max_lines]
    init_worker(src_vocab, tgt_vocab)
    with contextlib.suppress(ImportError):  # as a worker runs them: freed memory kept
        from rescorer.io.shared import keep_freed_memory

        keep_freed_memory()
    rows = []
    lines = sum(chunk.data.count(b"\n") for chunk, _ in chunks)
    t = time.perf_counter()
    for _ in map(_stage_worker, chunks):
        pass
    rows.append(("main process", 1, lines / (time.perf_counter() - t), 0.0))
    for workers in range(1, max_workers + 1):
        start = (src_vocab, tgt_vocab, True)  # in the pool, as score starts its workers
        with start_pool(workers, init_worker, start) as pool:
            warm(pool, _stage_worker, chunks[:workers])  # start-up and imports, not timed
            # As score --workers N runs them, through the same chunk loop: parse in the pool,
            # the results to the main process, format in the pool, write in order.
            seconds, cpu = run_loop(table, pool, StagesWork(), workers, max_lines)
            rows.append((f"--workers {workers}", workers, lines / seconds, lines / cpu))
    print()
    print(f"score's I/O stages without the model ({lines:,} lines, 1 MiB chunks), rescorer of "
          f"commit {code_commit()}, {cpu_name()}, {os.cpu_count()} cores:")  # fmt: skip
    print("| stages run in | lines/s | lines/s per process | lines per main-process CPU second |")
    print("|---|---:|---:|---:|")
    for name, n, rate, main in rows:
        print(f"| {name} | {rate:,.0f} | {rate / n:,.0f} | {f'{main:,.0f}' if main else '–'} |")
    print("(the last column: the lines the main process passes per second of its own CPU time,")
    print("its threads included; what the main process alone could pass with all the workers it")
    print("needs, with score's own stages)")


@dataclass
class _Passed:
    """A chunk through the no-op stage: what the job reads of a parsed chunk, and its bytes."""

    chunk_offset: int
    chunk_len: int
    first_line: int
    lines_in: int
    text: bytes
    bad: list[tuple[int, str, bytes]] = field(default_factory=list)
    chunk_sha256: str = ""


def _noop_init(in_pool: bool = False) -> None:
    pass


def _noop_parse(chunk: Chunk, num_scores: int | None, name: str, digest: bool) -> _Passed:
    data = chunk.content() if hasattr(chunk, "content") else chunk.data
    text = getattr(chunk, "shared", None) or data  # from shared memory: its slot, as score's
    return _Passed(chunk.offset, len(data), chunk.first_line, data.count(b"\n"), text)


def _noop_format(text: Any) -> bytes:
    return text if isinstance(text, bytes) else text.tobytes()  # from its slot


class NoopWork:
    """The job's work with no work in it: the chunk goes to a worker and back, then to a worker
    and back again (as a parsed chunk and its formatting do), and is written."""

    unit = "lines"
    shared_chunks = True
    init_worker = staticmethod(_noop_init)
    init_args: tuple[Any, ...] = ()
    parse: Any = staticmethod(_noop_parse)

    def submit(self, parsed: _Passed) -> None:
        return None

    def collect(self, pending: None, parsed: _Passed, gz_level: int | None) -> tuple[Any, ...]:
        return _noop_format, (parsed.text,), parsed.lines_in

    def progress(self) -> int:
        return 0


class StagesWork(NoopWork):
    """score's own stages, made-up scores in place of the model's (:func:`_format_args`)."""

    parse = staticmethod(parse_chunk)

    def collect(self, pending: None, parsed: Any, gz_level: int | None) -> tuple[Any, ...]:
        return format_chunk, _format_args(parsed), parsed.lines_in


def start_pool(workers: int, initializer: Any, initargs: tuple[Any, ...]) -> Any:
    """Worker processes as score starts them: rescorer.job.pool's, a multiprocessing Pool in
    the code before issue 65 (its chunk loop calls apply_async)."""
    try:
        from rescorer.job.pool import Workers
    except ImportError:
        return multiprocessing.get_context("spawn").Pool(workers, initializer, initargs)
    return Workers(workers, initializer, initargs)


def warm(pool: Any, func: Any, items: list[Any]) -> None:
    """``func`` on each of ``items`` in ``pool``: the workers started and their imports done."""
    if hasattr(pool, "submit"):
        for future in [pool.submit(func, item) for item in items]:
            future.result()
    else:
        pool.map(func, items)


def table_lines(table: str) -> int:
    """The lines of ``table``, decompressed."""
    with open_binary(table) as stream:
        return sum(data.count(b"\n") for data in iter(lambda: stream.read(1 << 22), b""))


def run_loop(
    table: str, pool: Any, work: Any, workers: int, max_lines: int | None
) -> tuple[float, float]:
    """Seconds of score's chunk loop over ``table`` (its first ``max_lines``) through ``pool``
    with ``work``, writing a temporary file, and the main process's CPU seconds in it."""
    config = SimpleNamespace(
        workers=workers,
        chunk_bytes=1 << 20,
        shard=None,
        skip_bad_lines=None,
        overlap=True,
        quiet=False,
    )
    with tempfile.TemporaryDirectory() as tmp:
        output = Output(os.path.join(tmp, "out"), {}, None, 10.0, "bench")
        output.lock()
        output.open(Resume())
        t, cpu = time.perf_counter(), time.process_time()
        with open_binary(table) as stream:
            chunks: Any = iter_chunks(stream, 1 << 20, name=table)
            if max_lines is not None:
                chunks = (c for c in chunks if c.first_line <= max_lines)
            stream_chunks(chunks, pool, work, output, config, 4, None, "t", JobStats(),
                          lambda: None)  # fmt: skip
        seconds, cpu = time.perf_counter() - t, time.process_time() - cpu
        output.close(True, keep_partial=False)
    return seconds, cpu


def noop_ceiling(table: str, workers: int, repeat: int) -> None:
    """Part 3 of the module docstring: lines/s of score's chunk loop with no-op stages."""
    times, lines = [], table_lines(table)
    with start_pool(workers, _noop_init, ()) as pool:
        warm(pool, _noop_format, [b""] * workers)  # started and warm: not timed
        for _ in range(repeat):
            times.append(run_loop(table, pool, NoopWork(), workers, None))
    best, cpu = min(times)
    print(f"table: {table} ({lines:,} lines); {repeat} runs, best shown")
    print(f"date {datetime.date.today()}, rescorer of commit {code_commit()}, {cpu_name()}")
    print("| main process, no-op stages | workers | seconds | lines/s | main-process CPU s |")
    print("|---|---:|---:|---:|---:|")
    print(
        f"| read, cut, keep order, write | {workers} | {best:.2f} | {lines / best:,.0f} "
        f"| {cpu:.2f} |"
    )


if __name__ == "__main__":
    main()
