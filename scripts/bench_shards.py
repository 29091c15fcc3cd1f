#!/usr/bin/env python3
"""Sharded scoring and ``rescorer merge``, measured in one run on this machine.

1. Scaling: the first ``--lines`` lines of a real table scored by one process (all cores) and
   by ``--shards`` processes at once (``--shard K/N``, cores split between them), as the tasks
   of a Slurm array on one node would run; wall seconds, pairs/s, and the merged output checked
   against the single run byte for byte. Each configuration ``--repeat`` times, best shown.
2. Merge throughput: ``rescorer merge`` (manifests read, every part's sha256 checked while it is
   copied) on parts of ``--merge-mib`` MiB each, against ``cat`` of the same parts. The parts
   are real gzip bytes (the table repeated) with manifests written by rescorer's own writer, so
   the merge does exactly the work it does on scored shards.
3. The arithmetic for a table of 10^9 lines from the pairs/s measured in 1.

    python scripts/bench_shards.py [--lines 40000] [--shards 2] [--model DIR]
"""

from __future__ import annotations

import argparse
import datetime
import os
import shutil
import subprocess
import sys
import tempfile
import time

from benchlib import cpu_name, git_commit, write_slice

from rescorer.cli.ranges import MAX_SHARDS, Arg, RangeHelp
from rescorer.job.shards import write_manifest

DEFAULT_TABLE = os.path.join(
    os.path.dirname(__file__), "..", "..", "shared", "data", "en-fr", "phrase-table.gz"
)
HERE = os.path.dirname(os.path.abspath(__file__))


def score_cmd(table: str, model: str, out: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "rescorer", "score", table, "-m", model, "-o", out, "-q", *extra]


def timed(procs: list[list[str]], threads: int) -> float:
    """Wall seconds for running the commands at once, each with ``threads`` OpenMP threads."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    t = time.perf_counter()
    running = [subprocess.Popen(cmd, env=env) for cmd in procs]
    for proc in running:
        if proc.wait() != 0:
            raise SystemExit(f"{' '.join(proc.args)}: exit {proc.returncode}")  # type: ignore[arg-type]
    return time.perf_counter() - t


def fake_parts(source: str, folder: str, n: int, mib: int) -> list[str]:
    """n parts of about ``mib`` MiB of real gzip bytes, with manifests as score writes them."""
    with open(source, "rb") as f:
        data = f.read()
    reps = max(1, (mib << 20) // len(data))
    paths, start, line = [], 0, 1
    for k in range(1, n + 1):
        path = os.path.join(folder, f"part.{k}-of-{n}.gz")
        with open(path, "wb") as f:
            for _ in range(reps):
                f.write(data)
        fields = {
            "shard": {"k": k, "n": n},
            "input": {"bytes": 0},
            "range": {"start": start, "end": start + 1, "first_line": line, "input_bytes": n},
            "model": {"sha256": "bench"},
            "options": {"gzip": True},
            "lines": {"in": 1, "out": 1, "bad": 0},
        }
        write_manifest(path, fields)
        paths.append(path)
        start, line = start + 1, line + 1
    return paths


def main() -> None:
    parser = argparse.ArgumentParser(formatter_class=RangeHelp, description=__doc__.splitlines()[0])
    parser.add_argument("--table", default=DEFAULT_TABLE)
    parser.add_argument("--model", help="A model directory (default: random, --hidden-size).")
    parser.add_argument("--hidden-size", type=Arg(1, 1 << 14), default=256)
    parser.add_argument("--lines", type=Arg(1, 10**8), default=40_000)
    parser.add_argument("--shards", type=Arg(1, MAX_SHARDS), default=2)
    parser.add_argument("--repeat", type=Arg(1, 1000), default=2)
    parser.add_argument("--merge-parts", type=Arg(1, 10_000), default=4)
    parser.add_argument("--merge-mib", type=Arg(1, 1 << 20), default=256)
    args = parser.parse_args()
    commit = git_commit()  # the code measured: read before the runs
    cores = os.cpu_count() or 1
    tmp = tempfile.mkdtemp(prefix="bench_shards.")
    try:
        model = args.model
        if model is None:
            model = os.path.join(tmp, "model")
            subprocess.run(
                [sys.executable, os.path.join(HERE, "bench_memory.py"), "--table", args.table,
                 "--make-model", model, "--hidden-size", str(args.hidden_size)],
                check=True,
            )  # fmt: skip
        table = os.path.join(tmp, "table.gz")
        lines = write_slice(args.table, args.lines, table)
        n = args.shards
        whole, parts = os.path.join(tmp, "whole.gz"), list[str]()
        single_s, sharded_s = [], []
        for _ in range(args.repeat):
            for path in [whole, *parts]:
                if os.path.exists(path):
                    os.remove(path)
            single_s.append(timed([score_cmd(table, model, whole)], cores))
            parts = [os.path.join(tmp, f"pt.{k}-of-{n}.gz") for k in range(1, n + 1)]
            cmds = [
                score_cmd(table, model, p, "--shard", f"{k}/{n}") for k, p in enumerate(parts, 1)
            ]
            sharded_s.append(timed(cmds, max(1, cores // n)))
        merged = os.path.join(tmp, "merged.gz")
        subprocess.run(
            [sys.executable, "-m", "rescorer", "merge", merged, *parts, "-q"], check=True
        )
        with open(merged, "rb") as a, open(whole, "rb") as b:
            identical = a.read() == b.read()
        bytes_per_line = os.path.getsize(whole) / lines
        pairs = lines  # one pair per line

        # Merge throughput on big parts, against cat.
        big = fake_parts(args.table, tmp, args.merge_parts, args.merge_mib)
        total = sum(os.path.getsize(p) for p in big)
        merge_s, cat_s = [], []
        for _ in range(args.repeat):
            out = os.path.join(tmp, "big-merged.gz")
            t = time.perf_counter()
            subprocess.run([sys.executable, "-m", "rescorer", "merge", out, *big, "-q"], check=True)
            merge_s.append(time.perf_counter() - t)
            os.remove(out)
            t = time.perf_counter()
            with open(out, "wb") as sink:
                subprocess.run(["cat", *big], stdout=sink, check=True)
                os.fsync(sink.fileno())
            cat_s.append(time.perf_counter() - t)
            os.remove(out)
    finally:
        shutil.rmtree(tmp)

    one, many = min(single_s), min(sharded_s)
    rate1, rate_n = pairs / one, pairs / many
    print(f"### Sharded scoring and merge ({datetime.date.today()}, commit {commit})\n")
    print(f"- machine: {cpu_name()}, {cores} cores; no GPU")
    print(f"- model: {args.model or f'random, hidden {args.hidden_size}'}; default precision")
    print(
        f"- table: first {lines:,} lines of {os.path.basename(args.table)}; best of {args.repeat}\n"
    )
    print("| run | wall s | pairs/s | vs 1 process |")
    print("|---|---:|---:|---:|")
    print(f"| 1 process, {cores} threads | {one:.1f} | {rate1:,.0f} | 1.00 |")
    print(
        f"| {n} shards at once, {max(1, cores // n)} thread(s) each | {many:.1f} | {rate_n:,.0f} "
        f"| {one / many:.2f} |"
    )
    print(f"\nmerged {n} shards == single run, byte for byte: **{identical}**\n")
    size = f"{args.merge_parts} x {total / args.merge_parts / 2**20:.0f} MiB"
    print(f"| merge of {size} | wall s | GB/s |")
    print("|---|---:|---:|")
    merge_gbs = total / min(merge_s) / 1e9
    print(f"| rescorer merge (sha256 checked) | {min(merge_s):.2f} | {merge_gbs:.2f} |")
    print(f"| cat (+ fsync) | {min(cat_s):.2f} | {total / min(cat_s) / 1e9:.2f} |")
    best = max(rate1, rate_n)
    hours = 1e9 / best / 3600
    out_gb = 1e9 * bytes_per_line / 1e9
    print(
        f"\n10^9 lines at {best:,.0f} pairs/s per node of this kind: {hours:,.0f} node-hours, "
        f"{hours:,.0f}/N hours on N such nodes; the merge then reads and writes about "
        f"{out_gb:.0f} GB ({bytes_per_line:.1f} bytes a scored line here): "
        f"{out_gb / merge_gbs / 60:.1f} min at the merge rate above."
    )


if __name__ == "__main__":
    main()
