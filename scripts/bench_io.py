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
   workers as ``score --workers N`` runs them (parse in the pool, back to the main process,
   format in the pool); lines/s per run and per worker. The rate per
   worker, times the cores a GPU host can give, is what ``--workers`` can feed a device with.

    python scripts/bench_io.py [--table ../shared/data/en-fr/phrase-table.gz] [--repeat 3]
"""

from __future__ import annotations

import argparse
import datetime
import multiprocessing
import os
import subprocess
import tempfile
import time
import zlib
from collections import deque
from typing import Any

import numpy as np
from benchlib import cpu_name, git_commit

from rescorer.io.chunks import Chunk, iter_chunks
from rescorer.io.inputs import open_binary
from rescorer.io.table import copy_table, read_table
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
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--table", default=DEFAULT_TABLE)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--model", help="Take the shortlists of this model directory.")
    parser.add_argument("--max-workers", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    src_vocab, tgt_vocab = vocabs(args.table, args.model)
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
    commit = git_commit()
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


def vocabs(table: str, model_dir: str | None) -> tuple[Vocab, Vocab]:
    """The model's shortlists, or 15,000-word ones built from the table."""
    if model_dir is not None:
        return Vocab.load(f"{model_dir}/vocab.src.json"), Vocab.load(f"{model_dir}/vocab.tgt.json")
    return build_vocabs(((e.src, e.tgt) for e in read_table(table)), 15000, 15000)


def _parse(args: tuple[Chunk, int]) -> ParsedChunk:
    return parse_chunk(*args, "bench", False)


def _format_args(parsed: ParsedChunk) -> tuple[Any, ...]:
    """format_chunk's arguments as ``score`` passes them (a constant for the model's scores)."""
    logp = np.full(len(parsed.lines), -3.25)
    return (parsed.lines, parsed.cuts, logp, parsed.unk, "prob", False, 1, False)


def _stage_worker(args: tuple[Chunk, int]) -> bytes:
    return format_chunk(*_format_args(_parse(args)))


def score_io(table: str, out: str, src_vocab: Vocab, tgt_vocab: Vocab) -> None:
    """``score``'s I/O path in one process with a constant in place of the model."""
    init_worker(src_vocab, tgt_vocab)
    with open_binary(table) as stream, open(out, "wb") as sink:
        for chunk in iter_chunks(stream, 1 << 20):
            sink.write(_stage_worker((chunk, 4)))


def stages(table: str, src_vocab: Vocab, tgt_vocab: Vocab, max_workers: int) -> None:
    """Part 2 of the module docstring."""
    with open_binary(table) as stream:
        chunks = [(chunk, 4) for chunk in iter_chunks(stream, 1 << 20)]
    init_worker(src_vocab, tgt_vocab)
    rows = []
    lines = sum(chunk.data.count(b"\n") for chunk, _ in chunks)
    t = time.perf_counter()
    for _ in map(_stage_worker, chunks):
        pass
    rows.append(("main process", 1, lines / (time.perf_counter() - t)))
    for workers in range(1, max_workers + 1):
        ctx = multiprocessing.get_context("spawn")
        with ctx.Pool(workers, initializer=init_worker, initargs=(src_vocab, tgt_vocab)) as pool:
            pool.map(_stage_worker, chunks[:workers])  # start-up and imports, not timed
            t = time.perf_counter()
            # As score's _run: parse in the pool, results to the main process, format in the
            # pool, bytes back (every chunk crosses the process boundary twice each way).
            formatting: deque[Any] = deque()
            for parsed in pool.imap(_parse, chunks):
                formatting.append(pool.apply_async(format_chunk, _format_args(parsed)))
                while len(formatting) > workers:
                    formatting.popleft().get()
            for result in formatting:
                result.get()
            rows.append((f"--workers {workers}", workers, lines / (time.perf_counter() - t)))
    print()
    print(f"score's I/O stages without the model ({lines:,} lines, 1 MiB chunks):")
    print("| stages run in | lines/s | lines/s per process |")
    print("|---|---:|---:|")
    for name, n, rate in rows:
        print(f"| {name} | {rate:,.0f} | {rate / n:,.0f} |")


if __name__ == "__main__":
    main()
