#!/usr/bin/env python3
"""Can the score column trust bf16? Its error against fp32, the speed of each, and how much a
pair's score moves with the table's chunking and sharding, on one machine, in one run.

1. Error: ``--pairs`` real pairs spread over the table (every k-th line), scored by the same
   scorer in fp32 and under bf16 autocast; quantiles of |bf16 - fp32| in nats.
2. Speed: pairs/s of each precision on those pairs (model alone, no compile, best of
   ``--repeats``), with the machine's bf16 and fp32 GEMM peaks measured in the same run.
3. Chunking: a contiguous ``--chunk-lines`` slice scored end to end by ``score_table`` with
   ``--chunk-bytes`` 16 KiB and 1 MiB and as 3 merged shards, per precision; the largest
   change of one pair's score between these runs.

The rule the default follows (README, "What score promises"): ``auto`` takes bf16 only where
its 99th-percentile error is within 0.02 nats *and* it is faster; otherwise fp32.

    python scripts/bench_precision.py --model runs/h256 [--pairs 20000]
"""

from __future__ import annotations

import argparse
import datetime
import os
import tempfile
import time

import numpy as np
import torch
from bench_score import DEFAULT_TABLE, gemm_peak
from benchlib import cpu_name, git_commit, write_slice

from rescorer.device import resolve_device
from rescorer.io.table import read_table
from rescorer.model.checkpoint import load_model_dir
from rescorer.score.config import ScoreConfig
from rescorer.score.pairs import encode_pairs
from rescorer.score.pipeline import score_table
from rescorer.score.scorer import Scorer
from rescorer.score.shards import merge

BOUND = 0.02  # nats, at the 99th percentile


def spread_pairs(table: str, n: int, total_lines: int) -> list[tuple[str, str]]:
    step = max(1, total_lines // n)
    return [(e.src, e.tgt) for i, e in enumerate(read_table(table)) if i % step == 0][:n]


def column(path: str) -> np.ndarray:
    """The appended logp column of a scored table."""
    return np.array([e.scores[-1] for e in read_table(path)], dtype=np.float64)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--table", default=DEFAULT_TABLE)
    parser.add_argument("--pairs", type=int, default=20_000)
    parser.add_argument("--chunk-lines", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--gemm-size", type=int, default=2048)
    args = parser.parse_args()

    device = resolve_device(args.device)
    commit = git_commit()
    loaded = load_model_dir(args.model, device=device)
    tmp = tempfile.mkdtemp(prefix="bench_precision.")
    total = sum(1 for _ in read_table(args.table))
    pairs = spread_pairs(args.table, args.pairs, total)
    grouped = encode_pairs(loaded.src_vocab, loaded.tgt_vocab, pairs)

    peaks = {
        "bf16": gemm_peak(device, torch.bfloat16, args.gemm_size),
        "fp32": gemm_peak(device, torch.float32, args.gemm_size),
    }
    scores: dict[str, np.ndarray] = {}
    rate: dict[str, float] = {}
    warm = encode_pairs(loaded.src_vocab, loaded.tgt_vocab, pairs[:500])
    for _ in range(args.repeats):  # alternating, so drift hits both alike
        for precision in ("fp32", "bf16"):
            scorer = Scorer(loaded.model, precision)
            scorer.score(warm)
            t = time.perf_counter()
            scores[precision] = scorer.score(grouped)
            speed = len(pairs) / (time.perf_counter() - t)
            rate[precision] = max(rate.get(precision, 0.0), speed)
    err = np.abs(scores["bf16"] - scores["fp32"])
    q = {p: float(np.quantile(err, p / 100)) for p in (50, 90, 99)}

    # 3. Chunking and shards, end to end.
    chunk_table = os.path.join(tmp, "slice.gz")
    n_lines = write_slice(args.table, args.chunk_lines, chunk_table)
    moves: dict[str, float] = {}
    for precision in ("fp32", "bf16"):
        runs = []
        for chunk_bytes in (16 << 10, 1 << 20):
            out = os.path.join(tmp, f"{precision}.{chunk_bytes}.txt")
            config = ScoreConfig(
                device=str(device), precision=precision, chunk_bytes=chunk_bytes, column="logp",
                compile="no", quiet=True,
            )  # fmt: skip
            score_table(chunk_table, args.model, out, config)
            runs.append(column(out))
        parts = []
        for k in (1, 2, 3):
            part = os.path.join(tmp, f"{precision}.shard{k}.txt")
            config = ScoreConfig(
                device=str(device), precision=precision, column="logp", compile="no",
                quiet=True, shard=(k, 3),
            )  # fmt: skip
            score_table(chunk_table, args.model, part, config)
            parts.append(part)
        merged = os.path.join(tmp, f"{precision}.merged.txt")
        merge(merged, parts)
        runs.append(column(merged))
        stacked = np.stack(runs)
        moves[precision] = float((stacked.max(axis=0) - stacked.min(axis=0)).max())

    bf16_ok = q[99] <= BOUND and rate["bf16"] > rate["fp32"]
    cfg = loaded.model.config
    print(f"### Precision of the score column ({datetime.date.today()}, commit {commit})\n")
    print(
        f"Device: {cpu_name() if device.type == 'cpu' else torch.cuda.get_device_name(device)}"
        f", {torch.get_num_threads()} threads, torch {torch.__version__}. Model: {args.model} "
        f"(hidden {cfg.hidden_size}). GEMM peaks ({args.gemm_size}^3): bf16 "
        f"{peaks['bf16'] / 1e9:,.0f} GFLOP/s, fp32 {peaks['fp32'] / 1e9:,.0f} GFLOP/s.\n"
    )
    where = os.path.normpath(args.table)
    print(f"{len(pairs):,} pairs, every {max(1, total // args.pairs)}th line of {where}:\n")
    print("| | nats |\n|---|---:|")
    for p in (50, 90, 99):
        print(f"| abs(bf16 - fp32), {p}th percentile | {q[p]:.4f} |")
    print(f"| abs(bf16 - fp32), max | {err.max():.4f} |")
    print(f"| pairs off by more than 0.01 | {np.mean(err > 0.01):.1%} |")
    print(f"| pairs off by more than {BOUND} | {np.mean(err > BOUND):.1%} |\n")
    print(
        f"Speed, model alone, best of {args.repeats}: fp32 {rate['fp32']:,.0f} pairs/s, bf16 "
        f"{rate['bf16']:,.0f} pairs/s (bf16/fp32 = {rate['bf16'] / rate['fp32']:.2f}).\n"
    )
    print(
        f"Chunking: the first {n_lines:,} lines scored with --chunk-bytes 16384 and 1048576 "
        "and as 3 merged shards; the largest change of one pair's score between the three: "
        f"fp32 {moves['fp32']:.2g} nats, bf16 {moves['bf16']:.2g} nats.\n"
    )
    print(
        f"Rule (bf16 only if p99 <= {BOUND} nats and faster): "
        + ("bf16 earns the default here." if bf16_ok else "fp32 stays the default here.")
    )


if __name__ == "__main__":
    main()
