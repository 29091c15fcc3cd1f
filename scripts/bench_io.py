#!/usr/bin/env python3
"""Phrase-table I/O speed: rescorer's read + parse + write beside ``gzip -dc | gzip -1``.

1. Both run on the same gzip table in the same process run, each ``--repeat`` times; the best
   time of each is reported with lines/s and their ratio (the gzip pipeline is the floor: it
   only decompresses and recompresses). Also checks that the round trip is byte-identical.
2. ``score``'s own I/O stages, without the model: ``parse_chunk`` (validate, encode ids) and
   ``format_chunk`` (format the new column, compress the gzip member at level 1) over the
   table's 1 MiB chunks, in the main process and in pools of 1..``--max-workers`` spawn
   workers as ``score --workers N`` runs them; lines/s per run and per worker. The rate per
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
from typing import Any

import numpy as np
from benchlib import cpu_name, git_commit

from rescorer.io.chunks import iter_chunks
from rescorer.io.files import open_binary
from rescorer.io.table import copy_table, read_table
from rescorer.score.pipeline import format_chunk, init_worker, parse_chunk
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
    with tempfile.TemporaryDirectory() as tmp:
        ours, theirs = os.path.join(tmp, "ours.gz"), os.path.join(tmp, "gzip.gz")
        rescorer_times, gzip_times = [], []
        lines = 0
        for _ in range(args.repeat):
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
    best_r, best_g = min(rescorer_times), min(gzip_times)
    commit = git_commit()
    print(f"table: {args.table} ({lines:,} lines); {args.repeat} runs each, best shown")
    print(f"date {datetime.date.today()}, commit {commit}, {cpu_name()}, {os.cpu_count()} cores")
    print("| pipeline | seconds | lines/s | relative |")
    print("|---|---|---|---|")
    print(f"| gzip -dc \\| gzip -1 | {best_g:.2f} | {lines / best_g:,.0f} | 1.00 |")
    print(
        f"| rescorer read+parse+write (gzip 1) | {best_r:.2f} | {lines / best_r:,.0f} | "
        f"{best_g / best_r:.2f} |"
    )
    print(f"round trip byte-identical after decompression: {identical}")
    stages(args.table, args.model, args.max_workers)


def _stage_worker(args: tuple[Any, ...]) -> int:
    chunk, num_scores = args
    parsed = parse_chunk(chunk, num_scores, "bench", False)
    logp = np.full(len(parsed.lines), -3.25)
    format_chunk(parsed.lines, parsed.cuts, logp, parsed.unk, "prob", False, 1, False)
    return parsed.lines_in


def stages(table: str, model_dir: str | None, max_workers: int) -> None:
    """Part 2 of the module docstring."""
    if model_dir is not None:
        src_vocab, tgt_vocab = (
            Vocab.load(f"{model_dir}/vocab.src.json"),
            Vocab.load(f"{model_dir}/vocab.tgt.json"),
        )
    else:
        pairs = ((e.src, e.tgt) for e in read_table(table))
        src_vocab, tgt_vocab = build_vocabs(pairs, 15000, 15000)
    with open_binary(table) as stream:
        chunks = [(chunk, 4) for chunk in iter_chunks(stream, 1 << 20)]
    init_worker(src_vocab, tgt_vocab)
    rows = []
    t = time.perf_counter()
    lines = sum(map(_stage_worker, chunks))
    rows.append(("main process", 1, lines / (time.perf_counter() - t)))
    for workers in range(1, max_workers + 1):
        ctx = multiprocessing.get_context("spawn")
        with ctx.Pool(workers, initializer=init_worker, initargs=(src_vocab, tgt_vocab)) as pool:
            pool.map(_stage_worker, chunks[:workers])  # start-up and imports, not timed
            t = time.perf_counter()
            lines = sum(pool.imap(_stage_worker, chunks))
            rows.append((f"--workers {workers}", workers, lines / (time.perf_counter() - t)))
    print()
    print(f"score's I/O stages without the model ({lines:,} lines, 1 MiB chunks):")
    print("| stages run in | lines/s | lines/s per process |")
    print("|---|---:|---:|")
    for name, n, rate in rows:
        print(f"| {name} | {rate:,.0f} | {rate / n:,.0f} |")


if __name__ == "__main__":
    main()
