#!/usr/bin/env python3
"""The model alone, eager against captured (issue 57, item 3): ``Scorer`` with ``--capture
off`` (each tree level and readout block at its own row count, eagerly) and ``--capture on``
(bucketed row counts replayed as CUDA graphs, rescorer/score/graphs.py) on the same pre-parsed
chunks, in turn, for each precision.

Reports per (precision, capture): pairs/s (median of ``--repeats`` timed passes over all the
chunks, after one untimed pass that compiles and captures every shape), the model's FLOP/s
(bench_score.py's ``model_macs``: the work the pairs need, padding not counted) and its share of
the matrix-product peak of the precision used, measured in the same run (bf16 products for
bf16, TF32 for tf32, IEEE fp32 for fp32, ``--gemm-size`` cubed), the graphs captured, and the
largest difference of the captured scores from the eager ones (nats). Prints a Markdown block.

    python scripts/bench_graphs.py [--lines 300000] [--precision bf16 tf32] [--device auto]
"""

from __future__ import annotations

import argparse
import datetime
import os
import tempfile
import time

import numpy as np
import torch
from bench_score import DEFAULT_TABLE
from benchlib import cpu_name, gemm_peak, git_commit, model_macs, paper_model_dir, sync, write_slice

from rescorer.cli.ranges import Arg, RangeHelp
from rescorer.device import autocast, resolve_device
from rescorer.io.table import read_table
from rescorer.model.checkpoint import load_model_dir
from rescorer.score.config import batch_tokens_for
from rescorer.score.graphs import bucket_plan
from rescorer.score.pairs import GroupedPairs, encode_pairs
from rescorer.score.plan import plan_chunk
from rescorer.score.scorer import Scorer
from rescorer.score.trees import Work

GPU_CHUNK_LINES = 140_000  # about a GPU chunk of 16 MiB of the en-fr table (score/config.py)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(formatter_class=RangeHelp, description=__doc__.splitlines()[0])
    parser.add_argument("--table", default=DEFAULT_TABLE)
    parser.add_argument("--model", help="A model folder (default: paper sizes, random).")
    parser.add_argument("--lines", type=Arg(1, 10**8), default=300_000)
    parser.add_argument(
        "--chunk-lines", type=Arg(1, 10**8), default=None, help="default: by device"
    )
    parser.add_argument("--device", default="auto")
    parser.add_argument("--precision", nargs="+", default=["bf16", "tf32"])
    parser.add_argument("--capture", nargs="+", default=["off", "on"], help="off first: the base")
    parser.add_argument(
        "--batch-tokens", type=Arg(1, 1 << 24), default=None, help="default: as score's"
    )
    parser.add_argument("--compile", choices=["yes", "no"], default="no")
    parser.add_argument("--repeats", type=Arg(1, 1000), default=3)
    parser.add_argument("--gemm-size", type=Arg(1, 1 << 16), default=8192)
    return parser.parse_args()


def model_folder(args: argparse.Namespace, tmp: str) -> str:
    """``--model``, or the paper's sizes with random weights and the table's shortlists."""
    if args.model:
        return str(args.model)
    return paper_model_dir(args.table, os.path.join(tmp, "model"), "bench_graphs.py")


def peak_of(device: torch.device, precision: str, n: int) -> float:
    """FLOP/s of the products of ``precision`` (bf16, TF32 or IEEE fp32) at n x n x n."""
    with autocast(device, precision):  # sets TF32 for tf32 only
        dtype = torch.bfloat16 if precision == "bf16" else torch.float32
        return gemm_peak(device, dtype, n)


def timed_pass(scorer: Scorer, chunks: list[GroupedPairs]) -> tuple[np.ndarray, float]:
    """Every chunk through the scorer, submitted in turn as score does (two in flight)."""
    scorer.work = Work()
    sync(scorer.device)
    start = time.perf_counter()
    pending, scores = [], []
    for chunk in chunks:
        pending.append(scorer.submit(chunk))
        if len(pending) == 2:
            scores.append(pending.pop(0).result())
    scores += [p.result() for p in pending]
    sync(scorer.device)
    return np.concatenate(scores), time.perf_counter() - start


def padding(chunks: list[GroupedPairs], tgt_rows: int, readout_rows: int) -> str:
    """Rows run per real row with bucketing (graphs.py's bucket_plan), over all the chunks:
    the encoder's and the decoder's steps, the readout's rows and its picks."""
    run = dict.fromkeys(("encoder", "decoder", "readout", "picks"), 0)
    real = dict(run)
    for chunk in chunks:
        plan = plan_chunk(chunk, tgt_rows, readout_rows)
        padded = bucket_plan(plan, readout_rows).arrays
        for enc in plan.encoder:
            run["encoder"] += len(padded[enc.tokens])
            real["encoder"] += enc.n
        for dec in plan.decoder:
            if dec.parents is not None:  # depth 0 runs no step (s0)
                run["decoder"] += len(padded[dec.tokens])
                real["decoder"] += dec.n
            real["readout"] += dec.n
            for rows, local, _, pair in dec.blocks:
                run["readout"] += len(padded[rows])
                run["picks"] += len(padded[local])
                real["picks"] += len(plan.arrays[pair])
    return ", ".join(f"{k} {run[k] / max(real[k], 1):.2f}" for k in run)


def main() -> None:
    args = parse_args()
    device = resolve_device(args.device)
    tmp = tempfile.mkdtemp(prefix="bench_graphs.")
    commit = git_commit()
    loaded = load_model_dir(model_folder(args, tmp), device=device)
    cfg = loaded.model.config
    table = os.path.join(tmp, "table.gz")
    n_lines = write_slice(args.table, args.lines, table, cycle=True)
    pairs = [(e.src, e.tgt) for e in read_table(table)]
    step = args.chunk_lines or (GPU_CHUNK_LINES if device.type == "cuda" else 2000)
    chunks = [
        encode_pairs(loaded.src_vocab, loaded.tgt_vocab, pairs[i : i + step])
        for i in range(0, len(pairs), step)
    ]
    sources = sum(len(c.src_off) - 1 for c in chunks)
    memory = (
        torch.cuda.get_device_properties(device).total_memory if device.type == "cuda" else None
    )
    batch_tokens = batch_tokens_for(args.batch_tokens, device, memory, cfg.tgt_rows)
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_name()
    print(f"### The model alone, eager against captured ({datetime.date.today()}, {commit})\n")
    print(
        f"{where}, torch {torch.__version__}; scripts/bench_graphs.py: {len(pairs):,} pairs "
        f"({n_lines:,} lines of {os.path.basename(args.table)}) in {len(chunks)} chunks of "
        f"{step:,} lines, hidden {cfg.hidden_size}, rank {cfg.embed_size}, maxout "
        f"{cfg.maxout_units}, {cfg.tgt_rows:,} target rows; --batch-tokens {batch_tokens:,}, "
        f"--compile {args.compile}; the median of {args.repeats} passes after one untimed.\n"
    )
    print("| precision | --capture | pairs/s | x eager | GFLOP/s | % of the peak | peak GFLOP/s "
          "| graphs | max abs diff vs eager |")  # fmt: skip
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for precision in args.precision:
        peak = peak_of(device, precision, args.gemm_size)
        scorers = {
            c: Scorer(loaded.model, precision, batch_tokens, args.compile == "yes", capture=c)
            for c in args.capture
        }
        seconds: dict[str, list[float]] = {c: [] for c in args.capture}
        scores: dict[str, np.ndarray] = {}
        for capture, scorer in scorers.items():  # compiles and captures every shape
            scores[capture] = timed_pass(scorer, chunks)[0]
        for _ in range(args.repeats):  # in turn: the machine's speed drifts
            for capture, scorer in scorers.items():
                seconds[capture].append(timed_pass(scorer, chunks)[1])
        base = args.capture[0]
        for capture, scorer in scorers.items():
            secs = float(np.median(seconds[capture]))
            work = scorer.work
            macs = model_macs(
                cfg, work.encoder_steps, sources, work.decoder_positions, sources, tree=True
            )
            flops = 2 * macs / secs
            rate = len(pairs) / secs
            ratio = float(np.median(seconds[base])) / secs
            graphs = len(scorer.steps.graphs) if scorer.steps is not None else 0
            diff = float(np.max(np.abs(scores[capture] - scores[base])))
            print(
                f"| {precision} | {capture} | {rate:,.0f} | {ratio:.2f} | {flops / 1e9:,.0f} | "
                f"{100 * flops / peak:.1f} | {peak / 1e9:,.0f} | {graphs} | {diff:.2e} |"
            )
    print(
        "\nBucket padding (rows run per real row, --capture on): "
        f"{padding(chunks, cfg.tgt_rows, scorers[args.capture[-1]].readout_rows)}."
    )
    print(
        "\nThe peak: the best of n x n x n products of the precision used, --gemm-size "
        f"{args.gemm_size}, measured before each precision's rows; GFLOP/s count the pairs' "
        "own multiply-adds (bench_score.py's model_macs), not the bucket padding."
    )


if __name__ == "__main__":
    main()
