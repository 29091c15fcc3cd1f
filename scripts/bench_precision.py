#!/usr/bin/env python3
"""Can the score column trust bf16, or TF32? Their error against fp32, the speed of fp32 and bf16,
and how much a pair's score moves with the table's chunking and sharding, on one machine, in
one run.

1. Error: ``--pairs`` real pairs spread over the table (every k-th line), scored by the same
   scorer in fp32 and under bf16 autocast; quantiles of |bf16 - fp32| in nats. Beside them
   TF32 as an H100 or A100 would run fp32 products with TF32 allowed, emulated on any device
   (:class:`TF32Products`): every matrix product's two operands rounded to TF32's 10-bit
   mantissa (round to nearest, ties to even; and, as a bound for hardware that truncates,
   truncated), the product accumulated in fp32, everything else fp32.
2. Speed: pairs/s of each precision on those pairs (model alone, no compile, best of
   ``--repeats``), with the machine's bf16 and fp32 GEMM peaks measured in the same run.
3. Chunking: a contiguous ``--chunk-lines`` slice scored end to end by ``score_table`` with
   ``--chunk-bytes`` 16 KiB and 1 MiB and as 3 merged shards, per precision; the largest
   change of one pair's score between these runs.

The rule the default follows (docs/score.md, "Precision"): ``auto`` takes bf16 only where
its 99th-percentile error is within 0.02 nats *and* it is faster; otherwise fp32. The same
bound decides whether fp32 scoring on CUDA may let its products run in TF32.

    python scripts/bench_precision.py --model runs/h256 [--pairs 20000]
"""

from __future__ import annotations

import argparse
import datetime
import os
import tempfile
import time
from typing import Any, ClassVar

import numpy as np
import torch
from bench_score import DEFAULT_TABLE
from benchlib import cpu_name, gemm_peak, git_commit, write_slice
from torch.utils._python_dispatch import TorchDispatchMode

from rescorer.cli.ranges import Arg, RangeHelp
from rescorer.device import autocast, has_tf32, resolve_device
from rescorer.io.table import read_table
from rescorer.job.merge import merge
from rescorer.model.checkpoint import load_model_dir
from rescorer.score.config import ScoreConfig
from rescorer.score.pairs import encode_pairs
from rescorer.score.pipeline import score_table
from rescorer.score.scorer import Scorer

BOUND = 0.02  # nats, at the 99th percentile
TF32_DROPPED_BITS = 13  # fp32 keeps 23 mantissa bits, TF32 10


def round_tf32(x: torch.Tensor, rounding: str = "nearest") -> torch.Tensor:
    """fp32 ``x`` rounded to TF32 (sign, 8-bit exponent, 10-bit mantissa), stored as fp32:
    ``nearest`` rounds to the nearest, ties to even; ``truncate`` drops the 13 low bits.
    Infinities and NaNs are kept; a carry into the exponent is the right result."""
    bits = x.contiguous().view(torch.int32)
    if rounding == "nearest":
        lsb = (bits >> TF32_DROPPED_BITS) & 1  # the last kept bit: ties go to even
        bits = bits + ((1 << (TF32_DROPPED_BITS - 1)) - 1 + lsb)
    elif rounding != "truncate":
        raise ValueError(f"rounding {rounding!r}: expected nearest or truncate")
    rounded = (bits & ~((1 << TF32_DROPPED_BITS) - 1)).view(torch.float32)
    return torch.where(torch.isfinite(x), rounded, x)


class TF32Products(TorchDispatchMode):
    """Inside it every fp32 matrix product (mm, addmm, bmm, baddbmm, mv, addmv, dot, linear:
    what ``allow_tf32`` hands to TF32 tensor cores) takes its two operands rounded to TF32 and
    accumulates in fp32, as the hardware does; an addmm's bias is added in fp32, as cuBLAS's
    epilogue adds it. ``products`` counts the products rounded."""

    OPERANDS: ClassVar[dict[Any, tuple[int, int]]] = {
        torch.ops.aten.mm.default: (0, 1),
        torch.ops.aten.addmm.default: (1, 2),
        torch.ops.aten.bmm.default: (0, 1),
        torch.ops.aten.baddbmm.default: (1, 2),
        torch.ops.aten.mv.default: (0, 1),
        torch.ops.aten.addmv.default: (1, 2),
        torch.ops.aten.dot.default: (0, 1),
        torch.ops.aten.linear.default: (0, 1),
    }

    def __init__(self, rounding: str = "nearest") -> None:
        super().__init__()
        self.rounding = rounding
        self.products = 0

    def __torch_dispatch__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None
    ) -> Any:
        operands = self.OPERANDS.get(func)
        if operands is not None:
            args = tuple(
                round_tf32(a, self.rounding)
                if i in operands and isinstance(a, torch.Tensor) and a.dtype == torch.float32
                else a
                for i, a in enumerate(args)
            )
            self.products += 1
        return func(*args, **(kwargs or {}))


def tf32_rounding(device: torch.device) -> str:
    """How this GPU's TF32 matrix products round fp32 operands, found by multiplying values
    just below, at and just above a TF32 half-ulp by an identity matrix (64 x 64, so the
    product takes the tensor-core path): "nearest, ties away from zero", "nearest, ties to
    even", "truncation" or "fp32 (no TF32)". 1024 + k/4: TF32's ulp at 1024 is 1."""
    values = torch.tensor([1024.25, 1024.5, 1024.75, 1025.5], device=device)
    b = values.repeat(64, 16)  # (64,64)
    eye = torch.eye(64, device=device)
    with autocast(device, "tf32"):
        got = (eye @ b)[0, :4].tolist()
    torch.backends.cuda.matmul.allow_tf32 = False
    if got == values.tolist():
        return "fp32 (no TF32)"
    if got == [1024.0, 1024.0, 1024.0, 1025.0]:
        return "truncation"
    if got == [1024.0, 1025.0, 1025.0, 1026.0]:
        return "nearest, ties away from zero"
    if got == [1024.0, 1024.0, 1025.0, 1026.0]:
        return "nearest, ties to even"
    return f"unknown: {values.tolist()} became {got}"


def spread_pairs(table: str, n: int, total_lines: int) -> list[tuple[str, str]]:
    step = max(1, total_lines // n)
    return [(e.src, e.tgt) for i, e in enumerate(read_table(table)) if i % step == 0][:n]


def column(path: str) -> np.ndarray:
    """The appended logp column of a scored table."""
    return np.array([e.scores[-1] for e in read_table(path)], dtype=np.float64)


def main() -> None:
    parser = argparse.ArgumentParser(formatter_class=RangeHelp, description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--table", default=DEFAULT_TABLE)
    parser.add_argument("--pairs", type=Arg(1, 10**8), default=20_000)
    parser.add_argument("--chunk-lines", type=Arg(1, 10**8), default=20_000)
    parser.add_argument("--repeats", type=Arg(1, 1000), default=3)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--gemm-size", type=Arg(1, 1 << 16), default=2048)
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
    measured = ("fp32", "bf16", "tf32") if has_tf32(device) else ("fp32", "bf16")
    for _ in range(args.repeats):  # alternating, so drift hits all alike
        for precision in measured:
            scorer = Scorer(loaded.model, precision)
            scorer.score(warm)
            t = time.perf_counter()
            scores[precision] = scorer.score(grouped)
            speed = len(pairs) / (time.perf_counter() - t)
            rate[precision] = max(rate.get(precision, 0.0), speed)
    # |x - fp32| per pair: bf16 (and TF32 on a GPU that has it) measured; TF32 emulated with
    # the fp32 scorer, every product's operands rounded.
    errors = {"bf16": np.abs(scores["bf16"] - scores["fp32"])}
    if "tf32" in scores:
        errors["TF32 (this GPU)"] = np.abs(scores["tf32"] - scores["fp32"])
    for rounding, name in (("nearest", "TF32 emulated, nearest even"), ("truncate", "truncated")):
        mode = TF32Products(rounding)
        with mode:
            emulated = Scorer(loaded.model, "fp32").score(grouped)
        assert mode.products > 0, "no matrix product went through the TF32 emulation"
        errors[name] = np.abs(emulated - scores["fp32"])
    quantiles = {
        k: {p: float(np.quantile(e, p / 100)) for p in (50, 90, 99)} for k, e in errors.items()
    }
    q = quantiles["bf16"]

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
    print("| nats | " + " | ".join(errors) + " |\n|---|" + "---:|" * len(errors))
    for p in (50, 90, 99):
        cells = " | ".join(f"{quantiles[k][p]:.4f}" for k in errors)
        print(f"| abs(x - fp32), {p}th percentile | {cells} |")
    print("| abs(x - fp32), max | " + " | ".join(f"{e.max():.4f}" for e in errors.values()) + " |")
    for bound in (0.01, BOUND):
        cells = " | ".join(f"{np.mean(e > bound):.1%}" for e in errors.values())
        print(f"| pairs off by more than {bound} | {cells} |")
    print(
        "\nTF32 emulated: every fp32 matrix product's operands rounded to a 10-bit mantissa "
        "(to nearest, ties to even; or truncated), fp32 accumulation, everything else fp32."
        + (f" This GPU's TF32 rounding: {tf32_rounding(device)}." if device.type == "cuda" else "")
        + "\n"
    )
    print(
        f"Speed, model alone, best of {args.repeats}: fp32 {rate['fp32']:,.0f} pairs/s, bf16 "
        f"{rate['bf16']:,.0f} pairs/s (bf16/fp32 = {rate['bf16'] / rate['fp32']:.2f})"
        + (
            f", TF32 {rate['tf32']:,.0f} pairs/s (TF32/fp32 = {rate['tf32'] / rate['fp32']:.2f})"
            if "tf32" in rate
            else ""
        )
        + ".\n"
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
    tf32 = "TF32 (this GPU)" if "TF32 (this GPU)" in quantiles else "TF32 emulated, nearest even"
    print(
        f"TF32 on CUDA, `auto`'s choice where the GPU has it, only if p99 <= {BOUND} nats "
        f"({tf32}: {quantiles[tf32][99]:.4f}): "
        + ("within the bound." if quantiles[tf32][99] <= BOUND else "OUTSIDE the bound.")
    )


if __name__ == "__main__":
    main()
