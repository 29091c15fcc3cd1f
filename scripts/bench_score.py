#!/usr/bin/env python3
"""Scoring speed: rescorer's pipeline against the straightforward implementation, same run.

Reports, for one table and one model on one device:

- the device's matrix-multiply peak, measured here (bf16 and fp32 GEMMs of ``--gemm-size``);
- the straightforward implementation: batches of 64 pairs in file order, fp32, every pair
  encoding its own source (``rescorer.score.score_pairs_straightforward``), on the first
  ``--baseline-lines`` pairs;
- the fast path, model alone (pre-parsed chunks through ``Scorer.score``) on the same pairs;
- the whole pipeline end to end (``score_table``: gzip table in, gzip table out) on
  ``--lines`` lines;
- model FLOP/s: the multiply-adds of the model's matrix products for those pairs, as the code
  runs them (``model_macs``: the encoder steps run, the per-source decoder terms, the readout
  at every decoder position, the recurrence at every position but a target's first, whose
  state is s0; no padding) per second, against the peaks.

Defaults: the real en-fr table (repeated if ``--lines`` exceeds it) and the paper's model sizes
with random weights. Prints a Markdown block for BENCHMARKS.md.

    python scripts/bench_score.py [--lines 100000] [--baseline-lines 5000] [--device auto]
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import os
import sys
import tempfile
import time
from dataclasses import replace
from typing import Any

import numpy as np
import torch
from benchlib import (
    cpu_name,
    gemm_peak,
    git_commit,
    model_macs,
    paper_model_dir,
    sync,
    write_slice,
)

from rescorer.cli.ranges import MAX_CHUNK_BYTES, Arg, RangeHelp, per_cpu
from rescorer.device import resolve_device, resolve_precision
from rescorer.io.chunks import iter_chunks
from rescorer.io.inputs import open_binary
from rescorer.io.table import read_table
from rescorer.model.checkpoint import load_model_dir
from rescorer.score.config import ScoreConfig, chunk_bytes_for
from rescorer.score.pairs import token_batches
from rescorer.score.pipeline import score_table
from rescorer.score.scorer import Scorer, score_pairs_straightforward
from rescorer.score.stages import init_worker, parse_chunk
from rescorer.score.trees import Work

DEFAULT_TABLE = os.path.join(
    os.path.dirname(__file__), "..", "..", "shared", "data", "en-fr", "phrase-table.gz"
)


def padded_contexts(parsed: list[Any], batch_tokens: int) -> int:
    """Source rows of ``decoder_context`` in the padded decoder: ``Scorer.logprobs`` computes
    the terms of each source once per batch its targets fall in (its batching, repeated)."""
    rows = 0
    for chunk in parsed:
        pairs = chunk.pairs
        tgt_lens = np.diff(pairs.tgt_off)  # (N,)
        order = np.lexsort((pairs.pair_src, tgt_lens))
        for batch in token_batches(tgt_lens, order, batch_tokens):
            rows += len(np.unique(pairs.pair_src[batch]))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(formatter_class=RangeHelp, description=__doc__.splitlines()[0])
    parser.add_argument("--table", default=DEFAULT_TABLE)
    parser.add_argument("--model", help="A model directory (default: paper sizes, random).")
    parser.add_argument("--lines", type=Arg(1, 10**8), default=100_000)
    parser.add_argument("--baseline-lines", type=Arg(1, 10**8), default=5_000)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--precision", default="auto")
    parser.add_argument("--batch-tokens", type=Arg(1, 1 << 24), default=None)
    parser.add_argument("--workers", type=Arg(0, per_cpu()[0]), default=0)
    parser.add_argument(
        "--chunk-bytes", type=Arg(1, MAX_CHUNK_BYTES), default=None, help="default: by device"
    )
    parser.add_argument("--gemm-size", type=Arg(1, 1 << 16), default=2048)
    parser.add_argument("--compile", choices=["yes", "no"], default="yes")
    parser.add_argument(
        "--repeats", type=Arg(1, 1000), default=2, help="model alone / end to end pairs"
    )
    parser.add_argument(
        "--compare-pipeline",
        action="store_true",
        help="only compare end-to-end runs: overlap on/off, records by time/per chunk",
    )
    args = parser.parse_args()

    device = resolve_device(args.device)
    precision = resolve_precision(args.precision, device)
    args.chunk_bytes = chunk_bytes_for(args.chunk_bytes, device)
    tmp = tempfile.mkdtemp(prefix="bench_score.")
    table = os.path.join(tmp, "table.gz")
    n_lines = write_slice(args.table, args.lines, table, cycle=True)
    model_dir = args.model
    if model_dir is None:  # the paper's sizes, random N(0, 0.01)/orthogonal weights
        model_dir = paper_model_dir(args.table, os.path.join(tmp, "model"), "bench_score.py")
    if args.compare_pipeline:
        compare_pipeline(args, table, model_dir, device, precision)
        return
    loaded = load_model_dir(model_dir, device=device)
    cfg = loaded.model.config

    peaks = {
        p: gemm_peak(device, d, args.gemm_size)
        for p, d in (("bf16", torch.bfloat16), ("fp32", torch.float32))
    }

    # The baseline's pairs, parsed once (parsing is not what the model-alone figures time).
    entries = itertools.islice(read_table(table), args.baseline_lines)
    base_pairs = [(e.src, e.tgt) for e in entries]
    t = time.perf_counter()
    base_logp = score_pairs_straightforward(
        loaded.model, loaded.src_vocab, loaded.tgt_vocab, base_pairs
    )
    sync(device)
    base_s = time.perf_counter() - t

    init_worker(loaded.src_vocab, loaded.tgt_vocab)
    base_table = os.path.join(tmp, "base.gz")
    write_slice(table, len(base_pairs), base_table)
    with open_binary(base_table) as stream:
        chunks = [parse_chunk(c, None, "bench") for c in iter_chunks(stream, args.chunk_bytes)]
    if args.batch_tokens is None:
        args.batch_tokens = 4096 if device.type == "cpu" else 65536

    scorers: dict[tuple[bool, bool], Scorer] = {}

    def model_alone(
        share: bool, parsed: list[Any], targets: bool = True
    ) -> tuple[np.ndarray, float, Work]:
        """One timed pass of the model alone over ``parsed``; each variant's scorer is made
        (and warmed up: compilation, allocator, autocast caches) once."""
        scorer = scorers.get((share, targets))
        if scorer is None:
            compiled = args.compile == "yes"
            scorer = Scorer(loaded.model, precision, args.batch_tokens, compiled, share, targets)
            scorer.score(parsed[0].pairs)
            scorers[share, targets] = scorer
        scorer.work = Work()
        sync(device)
        t = time.perf_counter()
        logp = np.concatenate([scorer.score(c.pairs) for c in parsed])
        sync(device)
        return logp, time.perf_counter() - t, scorer.work

    # The three variants in turn, --repeats times (the machine's speed drifts): medians.
    variants = {"unshared": (False, False), "sources": (True, False), "both": (True, True)}
    times: dict[str, list[float]] = {name: [] for name in variants}
    results: dict[str, tuple[np.ndarray, Work]] = {}
    for _ in range(args.repeats):
        for name, (share, targets) in variants.items():
            logp_v, secs, work_v = model_alone(share, chunks, targets)
            times[name].append(secs)
            results[name] = (logp_v, work_v)
    unshared_s, sources_s, fast_s = (float(np.median(times[k])) for k in variants)
    (unshared_logp, unshared), (sources_logp, sources), (fast_logp, work) = results.values()
    # The model alone on the very lines the end-to-end run scores, for the end-to-end ratio.
    with open_binary(table) as stream:
        all_chunks = [parse_chunk(c, None, "bench") for c in iter_chunks(stream, args.chunk_bytes)]
    all_sources = sum(len(c.pairs.src_off) - 1 for c in all_chunks)
    src_lens = np.concatenate([np.diff(c.pairs.src_off) for c in chunks])
    tgt_lens = np.concatenate([np.diff(c.pairs.tgt_off) for c in chunks])
    pair_src_lens = np.concatenate([np.diff(c.pairs.src_off)[c.pairs.pair_src] for c in chunks])
    # Decoder starts: one per source in the tree decoder (each source's s0 is its depth-0
    # node), one per pair in the padded decoder (model_macs), which computes the per-source
    # terms once per batch (padded_contexts).
    n_src, n_pairs = len(src_lens), len(tgt_lens)
    n_ctx = padded_contexts(chunks, args.batch_tokens)
    macs = model_macs(cfg, work.encoder_steps, n_src, work.decoder_positions, n_src, tree=True)
    macs_unshared = model_macs(
        cfg, unshared.encoder_steps, n_ctx, unshared.decoder_positions, n_pairs, tree=False
    )
    macs_per_pair = model_macs(
        cfg, int(pair_src_lens.sum()), n_pairs, int(tgt_lens.sum()), n_pairs, tree=False
    )
    max_diff = float(np.max(np.abs(fast_logp - base_logp)))
    max_diff_shared = float(np.max(np.abs(fast_logp - unshared_logp)))
    max_diff_targets = float(np.max(np.abs(fast_logp - sources_logp)))
    macs_sources = model_macs(
        cfg, sources.encoder_steps, n_ctx, sources.decoder_positions, n_pairs, tree=False
    )
    sources_rate = len(base_pairs) / sources_s

    out = os.path.join(tmp, "out.gz")
    config = ScoreConfig(
        device=str(device),
        precision=precision,
        batch_tokens=args.batch_tokens,
        workers=args.workers,
        chunk_bytes=args.chunk_bytes,
        compile=args.compile,  # as the model-alone runs
        quiet=True,
        profile=device.type == "cpu",  # on a GPU its synchronisations would stop the overlap
    )
    # Model alone and end to end in turn, --repeats times: the machine's speed drifts, so the
    # ratio is taken pair by pair. End to end counts everything score_table does (loading the
    # model and compiling included); the model alone starts warm.
    pairs_timed: list[tuple[float, float]] = []
    for _ in range(args.repeats):
        all_logp, all_s, all_work = model_alone(True, all_chunks)
        t = time.perf_counter()
        stats = score_table(table, model_dir, out, config)
        e2e_s = time.perf_counter() - t
        pairs_timed.append((all_s, e2e_s))
    if device.type == "cuda":  # where the time went: one more run, profiled
        stats = score_table(table, model_dir, out, replace(config, profile=True))
    spread = {k: f"{min(v):.2f}-{max(v):.2f} s" for k, v in times.items()}
    del all_chunks
    all_s = float(np.median([a for a, _ in pairs_timed]))
    e2e_s = float(np.median([e for _, e in pairs_timed]))
    e2e_ratios = sorted(a / e for a, e in pairs_timed)  # end-to-end rate / model-alone rate
    all_macs = model_macs(
        cfg, all_work.encoder_steps, all_sources, all_work.decoder_positions, all_sources, tree=True
    )

    n_base = len(base_pairs)
    used = "bf16" if precision == "bf16" else "fp32"  # the peak of the precision the run used
    faster = max(peaks, key=lambda k: peaks[k])

    def of_peak(flop_s: float) -> str:
        """``flop_s`` against the peak of the precision used (and the faster one's, if other)."""
        text = f"{100 * flop_s / peaks[used]:.0f}% of the {used} peak"
        if faster != used:
            text += f" ({100 * flop_s / peaks[faster]:.0f}% of the faster {faster} peak)"
        return text

    base_rate, fast_rate, e2e_rate = n_base / base_s, n_base / fast_s, stats.pairs_scored / e2e_s
    unshared_rate = n_base / unshared_s
    flops = 2 * macs / fast_s
    dev_name = torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_name()
    print(
        f"### {datetime.date.today()}, commit {git_commit()}, {dev_name} ({device}), "
        f"{os.cpu_count()} CPU cores, torch {torch.__version__}, {torch.get_num_threads()} threads"
    )
    print(
        f"model: {cfg.hidden_size} hidden, {cfg.embed_size} rank, {cfg.maxout_units} maxout, "
        f"{cfg.src_vocab_size}/{cfg.tgt_vocab_size} shortlists"
        f"{' (random weights)' if args.model is None else ' (' + model_dir + ')'}; "
        f"precision {precision}, batch {args.batch_tokens} tokens, {args.workers} workers"
    )
    print(
        f"table: {args.table}, first {n_lines:,} lines; on the first {n_base:,}: "
        f"{src_lens.mean():.2f} tokens per distinct source and {tgt_lens.mean():.2f} per "
        f"target (with EOS), {len(tgt_lens) / len(src_lens):.2f} targets per source"
    )
    print()
    print("| measurement | pairs | seconds | pairs/s | vs straightforward |")
    print("|---|---|---|---|---|")
    print(
        f"| straightforward (64 pairs/batch, file order, fp32, no reuse) | {n_base:,} | "
        f"{base_s:.2f} | {base_rate:,.0f} | 1.0x |"
    )
    print(
        f"| fast path without prefix sharing, model alone ({precision}) | {n_base:,} | "
        f"{unshared_s:.2f} | {unshared_rate:,.0f} | {unshared_rate / base_rate:.1f}x |"
    )
    print(
        f"| fast path, source prefixes shared, padded decoder, model alone ({precision}) | "
        f"{n_base:,} | {sources_s:.2f} | {sources_rate:,.0f} | {sources_rate / base_rate:.1f}x |"
    )
    print(
        f"| fast path, source and target prefixes shared, model alone ({precision}) | "
        f"{n_base:,} | {fast_s:.2f} | {fast_rate:,.0f} | {fast_rate / base_rate:.1f}x |"
    )
    all_rate = len(all_logp) / all_s
    print(
        f"| fast path, model alone ({precision}), all {len(all_logp):,} lines | "
        f"{len(all_logp):,} | {all_s:.2f} | {all_rate:,.0f} | {all_rate / base_rate:.1f}x |"
    )
    print(
        f"| end to end, gzip to gzip ({precision}), the same lines | {stats.pairs_scored:,} | "
        f"{e2e_s:.2f} | {e2e_rate:,.0f} | {e2e_rate / base_rate:.1f}x |"
    )
    print()
    print(
        f"model alone on the first {n_base:,} pairs: median of {args.repeats} runs in turn "
        f"per variant (ranges: no sharing {spread['unshared']}, source prefixes "
        f"{spread['sources']}, both {spread['both']})"
    )
    print()
    print(
        f"end to end against the model alone on the same {len(all_logp):,} lines, pair by "
        f"pair over {args.repeats} alternating runs (medians above): "
        + ", ".join(f"{r:.0%}" for r in e2e_ratios)
        + "; the model alone there ran at "
        f"{2 * all_macs / all_s / 1e9:,.1f} GFLOP/s of work done = "
        f"{of_peak(2 * all_macs / all_s)}"
    )
    print()
    print(
        f"encoder steps: {work.encoder_steps:,} with shared prefixes, {unshared.encoder_steps:,} "
        f"one per distinct source token ({unshared.encoder_steps / work.encoder_steps:.2f}x), "
        f"{int(pair_src_lens.sum()):,} one pass per pair; decoder positions "
        f"{work.decoder_positions:,} with shared target prefixes, {sources.decoder_positions:,} "
        f"one per target token ({sources.decoder_positions / work.decoder_positions:.2f}x). "
        f"Model multiply-adds: {macs / 1e9:.2f} G done, {macs_sources / 1e9:.2f} G with "
        f"source prefixes only, {macs_unshared / 1e9:.2f} G without prefix sharing, "
        f"{macs_per_pair / 1e9:.2f} G for one pass per pair; per pair: "
        f"{macs / n_base / 1e6:.1f} M done."
    )
    for name, m, secs in (
        ("padded decoder (source prefixes only)", macs_sources, sources_s),
        ("shared target prefixes", macs, fast_s),
    ):
        print(f"{name}: work done {2 * m / secs / 1e9:,.1f} GFLOP/s = {of_peak(2 * m / secs)}")
    print(
        f"fast path as the per-pair model's work: {2 * macs_per_pair / fast_s / 1e9:,.1f} "
        f"GFLOP/s = {of_peak(2 * macs_per_pair / fast_s)}"
    )
    print(
        f"model work done: {macs / n_base / 1e6:.1f} M multiply-adds per pair; fast path "
        f"{flops / 1e9:,.1f} GFLOP/s = {of_peak(flops)}; measured GEMM peaks: bf16 "
        f"{peaks['bf16'] / 1e9:,.0f} GFLOP/s ({100 * flops / peaks['bf16']:.0f}%), fp32 "
        f"{peaks['fp32'] / 1e9:,.0f} ({100 * flops / peaks['fp32']:.0f}%)"
    )
    print(f"max |log p fast - log p straightforward| on those pairs: {max_diff:.2e}")
    if stats.phases is not None:
        print("\nwhere the end-to-end time went (score --profile):\n")
        print("```")
        print("\n".join(stats.phases.report(stats.seconds)))
        print("```")
    print(f"max |log p shared - log p unshared prefixes|: {max_diff_shared:.2e}")
    print(f"max |log p shared targets - padded decoder|: {max_diff_targets:.2e}")
    sys.stdout.flush()


def compare_pipeline(
    args: argparse.Namespace, table: str, model_dir: str, device: torch.device, precision: str
) -> None:
    """End to end (score_table, gzip to gzip) with the defaults against the same run without
    overlap (each chunk's scores waited for before the next is prepared) and against records
    per chunk (--checkpoint-every 0), in turn, --repeats times after one warm-up run; each
    ratio is taken within a repeat (the machine's speed drifts)."""
    base = ScoreConfig(
        device=str(device), precision=precision, batch_tokens=args.batch_tokens,
        workers=args.workers, chunk_bytes=args.chunk_bytes, compile=args.compile, quiet=True,
    )  # fmt: skip
    variants = {
        "defaults (overlap, a record every 10 s)": base,
        "no overlap": replace(base, overlap=False),
        "a record per chunk": replace(base, checkpoint_every=0.0),
    }
    out = os.path.join(os.path.dirname(table), "compare.gz")
    score_table(table, model_dir, out, base)  # warm-up: compilation caches, page cache
    seconds: dict[str, list[float]] = {name: [] for name in variants}
    pairs = 0
    outputs: dict[str, bytes] = {}
    for _ in range(args.repeats):
        for name, config in variants.items():
            t = time.perf_counter()
            pairs = score_table(table, model_dir, out, config).pairs_scored
            seconds[name].append(time.perf_counter() - t)
            with open(out, "rb") as f:
                outputs[name] = f.read()
    same = len(set(outputs.values())) == 1
    dev_name = torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_name()
    print(
        f"### End to end: overlap and progress records ({datetime.date.today()}, commit "
        f"{git_commit()}, {dev_name}, {torch.get_num_threads()} threads)\n"
    )
    print(
        f"{pairs:,} pairs ({args.lines:,} lines of {args.table}), precision {precision}, "
        f"--chunk-bytes {args.chunk_bytes}, --workers {args.workers}, --compile {args.compile}; "
        f"{args.repeats} repeats in turn after a warm-up run; outputs identical: {same}.\n"
    )
    first = next(iter(variants))
    print("| variant | median s | pairs/s | its time / the defaults' time, per repeat |")
    print("|---|---:|---:|---|")
    for name in variants:
        med = float(np.median(seconds[name]))
        paired = zip(seconds[name], seconds[first], strict=True)
        ratios = ", ".join(f"{a / b:.3f}" for a, b in paired)  # above 1: slower than defaults
        print(f"| {name} | {med:.2f} | {pairs / med:,.0f} | {ratios} |")


if __name__ == "__main__":
    main()
