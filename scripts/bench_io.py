#!/usr/bin/env python3
"""Phrase-table I/O speed: rescorer's read + parse + write beside ``gzip -dc | gzip -1``.

Both run on the same gzip table in the same process run, each ``--repeat`` times; the best time
of each is reported with lines/s and their ratio (the gzip pipeline is the floor: it only
decompresses and recompresses). Also checks that the round trip is byte-identical.

    python scripts/bench_io.py [--table ../shared/data/en-fr/phrase-table.gz] [--repeat 3]
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import subprocess
import tempfile
import time
import zlib

from rescorer.io.table import copy_table

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
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    print(f"table: {args.table} ({lines:,} lines); {args.repeat} runs each, best shown")
    cpu = platform.processor() or platform.machine()
    print(f"date {datetime.date.today()}, commit {commit}, {cpu}, {os.cpu_count()} cores")
    print("| pipeline | seconds | lines/s | relative |")
    print("|---|---|---|---|")
    print(f"| gzip -dc \\| gzip -1 | {best_g:.2f} | {lines / best_g:,.0f} | 1.00 |")
    print(
        f"| rescorer read+parse+write (gzip 1) | {best_r:.2f} | {lines / best_r:,.0f} | "
        f"{best_g / best_r:.2f} |"
    )
    print(f"round trip byte-identical after decompression: {identical}")


if __name__ == "__main__":
    main()
