"""Training throughput (pairs/s) on real phrase pairs, per precision and batch size.

Reads the table once, keeps every K-th line (a spread of real pairs, about --pairs of them),
builds the shortlists from those, then times --updates Adadelta updates after --warmup untimed
ones, for each --precision and each --batch-size: the same ``train_step`` as ``rescorer train``
(forward, backward, clip, optimiser). The device's bf16 and fp32 GEMM peaks are measured in the
same run, and so is the memory's bandwidth (a STREAM triad): each row is set beside its floor, the
time its matrix products take at the peak plus the time the optimiser's memory traffic takes at
that bandwidth (issue 66). Prints one Markdown block for BENCHMARKS.md (and with --json a JSON
record per row). ``--profile`` and ``--op-profile`` then run the timed batches again, phase by
phase and (``--op-profile``) operation by operation under torch's profiler.

    python scripts/bench_train.py                        # paper config, bf16 and fp32, CPU
    python scripts/bench_train.py --hidden-size 256 --batch-size 64 256 1024 --device cuda
    python scripts/bench_train.py --device cuda --variant train --compile no \
        --capture off on compile --precision bf16 tf32 --batch-size 64 256 1024   # issue 56
    python scripts/bench_train.py --hidden-size 256 --precision fp32 --op-profile  # issue 66
    python scripts/bench_train.py --hidden-size 1000 256 --batch-size 64 256 --precision fp32 \
        --compare f7f99f4 --op-profile 25          # a sitting: each row before and after

``--capture on|compile`` times ``train --capture``'s update (rescorer/train/capture.py): the
batches bucketed by length as train buckets them, every shape captured during the warm-up
(which runs until each shape has been seen), the losses read back once at the end. Its rows
count pairs and FLOPs without padding, as the eager rows do.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import os
import subprocess
import sys
import time
from datetime import datetime, timezone
from typing import Any

import numpy as np
import torch
from benchlib import HERE, cpu_name, git_commit, model_macs, stream_triad, sync
from opprofile import profile_updates
from trainfloor import measured_peak, print_floor

from rescorer.batching import (
    PairArrays,
    PairArraysBuilder,
    bucket_of,
    bucketed_batches,
    epoch_batches,
    length_bounds,
)
from rescorer.device import resolve_device
from rescorer.io.table import read_table, split_tokens
from rescorer.model.encdec import (
    EncoderDecoder,
    Kernels,
    ModelConfig,
    compile_kernels,
    count_parameters,
    init_weights_,
)
from rescorer.phases import nothing
from rescorer.train import setup as train_setup
from rescorer.train.capture import StaticUpdate, capture_mode
from rescorer.train.loop import train_step
from rescorer.train.optim import ClippedAdadelta
from rescorer.vocab import build_vocabs

DEFAULT_TABLE = "../shared/data/en-fr/phrase-table.gz"


def time_captured(
    update: StaticUpdate,
    pairs: PairArrays,
    lengths: np.ndarray,
    bounds: np.ndarray,
    warmup: int,
    updates: int,
) -> tuple[float, int, int, int]:
    """(seconds, pairs, target tokens, source tokens) of ``updates`` fixed-shape updates on
    bucketed batches, after a warm-up that captures every shape (at least ``warmup`` updates)."""
    batches = bucketed_batches(lengths, update.batch_size, seed=1, epoch=0, bounds=bounds)
    shape = [int(bounds[bucket_of(lengths[b].max(), bounds)]) for b in batches]
    i = 0
    while i < warmup or len(update.shapes) < len(set(shape)):
        update(pairs, batches[i % len(batches)], shape[i % len(batches)])
        i += 1
    update.take()  # waits for the warm-up
    n_pairs = n_tokens = n_src = 0
    src_lens, tgt_lens = pairs.src_lens, pairs.tgt_lens  # (n,)
    start = time.perf_counter()
    for k in range(i, i + updates):
        index = batches[k % len(batches)]
        update(pairs, index, shape[k % len(batches)])
        n_pairs += len(index)
        n_tokens += int(tgt_lens[index].sum())
        n_src += int(src_lens[index].sum())
    update.take()  # the one read back: waits for the device
    return time.perf_counter() - start, n_pairs, n_tokens, n_src


class Updates:
    """``Updates(...)(first, last)``: training updates on batches ``first`` .. ``last - 1``
    (modulo the epoch's), returning (pairs, target tokens, source tokens), the device waited
    for; ``phase`` a phase timer (``--profile``)."""

    def __init__(
        self,
        model: EncoderDecoder,
        optim: torch.optim.Optimizer | ClippedAdadelta,
        precision: str,
        kernels: Kernels | None,
        pairs: PairArrays,
        batches: list[np.ndarray],
        device: torch.device,
    ) -> None:
        self.model, self.optim, self.precision, self.kernels = model, optim, precision, kernels
        self.pairs, self.batches, self.device = pairs, batches, device

    def __call__(self, first: int, last: int, phase: Any = nothing) -> tuple[int, int, int]:
        n_pairs = n_tokens = n_src = 0
        for i in range(first, last):
            with phase("data"):
                batch = self.pairs.batch(self.batches[i % len(self.batches)], self.device)
            train_step(
                self.model, self.optim, batch, self.precision, 1.0, kernels=self.kernels,
                phase=phase,
            )  # fmt: skip
            n_pairs += batch.num_pairs
            n_tokens += int(batch.tgt_lens.sum())
            n_src += int(batch.src_lens.sum())
        sync(self.device)
        return n_pairs, n_tokens, n_src


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    # Imported here: --compare's child takes the options parsed (--args-json) and may run a
    # package from before rescorer/cli/ranges.py; the modules it measures are all older.
    from rescorer.cli.ranges import Arg, RangeHelp

    parser = argparse.ArgumentParser(formatter_class=RangeHelp, description=__doc__.split("\n")[0])
    parser.add_argument("--table", default=DEFAULT_TABLE)
    parser.add_argument("--pairs", type=Arg(1, 10**8), default=20000, help="real pairs to sample")
    parser.add_argument("--hidden-size", type=Arg(1, 1 << 14), nargs="+", default=[1000])
    parser.add_argument("--batch-size", type=Arg(1, 1 << 16), nargs="+", default=[64])
    parser.add_argument("--updates", type=Arg(1, 10_000_000), default=30)
    parser.add_argument("--warmup", type=Arg(0, 1_000_000), default=5)
    parser.add_argument("--precision", nargs="+", default=["bf16", "fp32"])
    parser.add_argument(
        "--compile", nargs="+", choices=["no", "yes"], default=["no", "yes"],
        help="eager updates, and updates through the compiled steps and readout",
    )  # fmt: skip
    parser.add_argument(
        "--variant", nargs="+", choices=["straightforward", "train"],
        default=["straightforward", "train"],
        help="the straightforward update (autograd through every step, padding included;"
        " torch's clip then Adadelta), and rescorer train's (rescorer/model/recurrence.py,"
        " rescorer/train/optim.py): the same update (tests/train/test_step.py)",
    )  # fmt: skip
    parser.add_argument(
        "--capture", nargs="+", choices=["off", "on", "compile"], default=["off"],
        help="train --capture: off (today's update), on (CUDA graphs; on a CPU the fixed-shape"
        " update without one), compile (torch.compile mode reduce-overhead); not with"
        " --variant straightforward",
    )  # fmt: skip
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--gemm-size", type=Arg(1, 1 << 16), default=2048)
    parser.add_argument(
        "--profile", action="store_true",
        help="then run the timed batches again phase by phase (train --profile's table)",
    )  # fmt: skip
    parser.add_argument(
        "--op-profile", type=Arg(0, 10_000), nargs="?", const=30, default=0, metavar="ROWS",
        help="then run the timed batches again under torch's profiler: the phases, and the"
        " ROWS (30) costliest operations per phase, in ms an update",
    )  # fmt: skip
    parser.add_argument(
        "--compare", metavar="COMMIT",
        help="first time every row with the package as it was at COMMIT (git archive into"
        " --work, first on PYTHONPATH; this script as it is), then with this checkout's: one"
        " sitting, each row beside its baseline",
    )  # fmt: skip
    parser.add_argument("--work", default="runs/bench-train", help="where --compare unpacks")
    args = parser.parse_args(argv)
    args.rows_out = args.code = None  # --compare's child: where its rows go, its label
    return args


def child_args(argv: list[str]) -> argparse.Namespace | None:
    """--compare's child (``--args-json FILE``): the options its parent parsed, else None."""
    if argv[:1] != ["--args-json"]:
        return None
    with open(argv[1], encoding="utf-8") as f:
        return argparse.Namespace(**json.load(f))


def read_pairs(table: str, wanted: int) -> tuple[PairArrays, int]:
    """Every K-th line of ``table`` (about ``wanted`` pairs), encoded with 15,000-word
    shortlists of those lines; and K."""
    lines = sum(1 for _ in read_table(table))
    step = max(lines // wanted, 1)
    entries = [(e.src, e.tgt) for e in read_table(table) if e.lineno % step == 0]
    src_vocab, tgt_vocab = build_vocabs(entries, 15000, 15000)
    builder = PairArraysBuilder()
    for src, tgt in entries:
        builder.add(
            src_vocab.encode_eos(split_tokens(src)), tgt_vocab.encode_eos(split_tokens(tgt))
        )
    return builder.build(), step


def measure_peaks(
    device: torch.device, precisions: list[str], size: int
) -> tuple[dict[str, float], dict[str, int]]:
    """The GEMM peaks (FLOP/s) by precision, and the size each was measured at."""
    measured = {
        "bf16": measured_peak(device, torch.bfloat16, size),
        "fp32": measured_peak(device, torch.float32, size),
    }
    if "tf32" in precisions:  # fp32 operands through TF32 tensor cores (a GPU's)
        tf32 = device.type == "cuda"
        torch.backends.cuda.matmul.allow_tf32 = tf32
        measured["tf32"] = measured_peak(device, torch.float32, size) if tf32 else measured["fp32"]
        torch.backends.cuda.matmul.allow_tf32 = False
    return {p: r for p, (r, _) in measured.items()}, {p: n for p, (_, n) in measured.items()}


def measure_rows(
    args: argparse.Namespace,
    hidden_size: int,
    pairs: PairArrays,
    device: torch.device,
    code: str,
) -> list[dict[str, Any]]:
    """One record per batch size, precision, compile setting, update and capture mode."""
    config = ModelConfig(hidden_size=hidden_size)
    lengths = np.maximum(pairs.src_lens, pairs.tgt_lens)
    bounds = length_bounds(lengths)
    rows = []
    for batch_size in args.batch_size:
        batches = epoch_batches(lengths, batch_size, seed=1, epoch=0)
        for precision, compiled, variant, capture in itertools.product(
            args.precision, args.compile, args.variant, args.capture
        ):
            if capture != "off" and variant == "straightforward":
                continue  # the capture replaces train's update only
            torch.manual_seed(0)
            model = EncoderDecoder(config)
            init_weights_(model, torch.Generator().manual_seed(0))
            model.to(device).train()
            kernels = compile_kernels(model) if compiled == "yes" else None
            torch_optim = torch.optim.Adadelta(model.parameters(), lr=1.0, rho=0.95, eps=1e-6)
            optim: torch.optim.Optimizer | ClippedAdadelta = torch_optim
            if variant == "straightforward":  # autograd through the steps; clip, then step
                model.per_step_training = True
            else:  # whole-sequence recurrences; clip and Adadelta in one pass
                optim = ClippedAdadelta(torch_optim, compiled=compiled == "yes")
            run = Updates(model, optim, precision, kernels, pairs, batches, device)
            cpu_seconds = float("nan")  # this process's CPU time (eager rows)
            if capture != "off":
                mode = capture_mode(capture, device)
                seconds, n_pairs, n_tokens, n_src = time_captured(
                    StaticUpdate(model, torch_optim, 1.0, precision, batch_size, mode, kernels),
                    pairs, lengths, bounds, args.warmup, args.updates,
                )  # fmt: skip
            else:
                run(0, args.warmup)
                start, cpu_start = time.perf_counter(), time.process_time()
                n_pairs, n_tokens, n_src = run(args.warmup, args.warmup + args.updates)
                seconds = time.perf_counter() - start
                cpu_seconds = time.process_time() - cpu_start
            if (args.profile or args.op_profile) and capture == "off":
                # The timed batches again: the same work, so the walls compare; what differs
                # is what the first pass paid once (a shape's first product builds oneDNN's
                # kernel for it in bf16, the allocator's first blocks).
                timed = args.warmup, args.warmup + args.updates
                title = (
                    f"\n{code}: hidden {hidden_size}, batch {batch_size}, {precision}, compiled"
                    f" {compiled}, {variant} update: the {args.updates} timed updates again"
                    f" (timed: {1000 * seconds / args.updates:.1f} ms an update)"
                )
                phases, wall, table = profile_updates(
                    functools.partial(run, *timed), args.updates, device, args.op_profile
                )
                how = "under torch's profiler" if args.op_profile else "phase by phase"
                title += f", {how}: {1000 * wall / args.updates:.1f} ms an update"
                print(title, file=sys.stderr)
                print("\n".join(phases.report(wall)), file=sys.stderr)
                if table:
                    print("\n" + "\n".join(table), file=sys.stderr)
            # The forward pass's multiply-adds as it runs them (no padding): the padded decoder,
            # one source row and one decoder start (s0, no step) per pair (bench_score's
            # model_macs). x3 for forward + backward, x2 FLOP per multiply-add.
            macs = model_macs(config, n_src, n_pairs, n_tokens, n_pairs, tree=False)
            record = {
                "benchmark": "train",
                "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                "commit": code,
                "device": str(device),
                "cpu": cpu_name(),
                "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
                "threads": torch.get_num_threads(),
                "precision": precision,
                "compiled": compiled,
                "variant": variant,
                "capture": capture,
                "hidden_size": hidden_size,
                "parameters": count_parameters(model),
                "batch_size": batch_size,
                "updates": args.updates,
                "pairs_per_s": n_pairs / seconds,
                "ms_per_update": 1000 * seconds / args.updates,
                # on a busy machine with one thread, near what the update takes idle
                "cpu_ms_per_update": 1000 * cpu_seconds / args.updates,
                "flops": 6 * macs / seconds,
                "flops_per_update": 6 * macs / args.updates,
            }
            rows.append(record)
            if args.json:
                print(json.dumps(record), file=sys.stderr)
    return rows


def baseline_rows(args: argparse.Namespace) -> list[dict[str, Any]]:
    """--compare: this script run with the package as it was at the commit; its rows."""
    commit = subprocess.run(
        ["git", "-C", HERE, "rev-parse", "--short", args.compare],
        check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    folder = os.path.join(os.path.abspath(args.work), commit)
    os.makedirs(folder, exist_ok=True)
    top = subprocess.run(
        ["git", "-C", HERE, "rev-parse", "--show-toplevel"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    archive = subprocess.run(
        ["git", "-C", top, "archive", commit, "rescorer"], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", folder], input=archive, check=True)
    out = os.path.join(folder, "rows.json")
    options = os.path.join(folder, "args.json")
    with open(options, "w", encoding="utf-8") as f:  # the same options, without --compare
        json.dump({**vars(args), "compare": None, "rows_out": out, "code": commit}, f)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [folder, env.get("PYTHONPATH")]))
    print(f"--compare: {commit} first (PYTHONPATH={folder})", file=sys.stderr, flush=True)
    subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--args-json", options],
        check=True, env=env, stdout=subprocess.DEVNULL,
    )  # fmt: skip
    with open(out, encoding="utf-8") as f:
        rows: list[dict[str, Any]] = json.load(f)
    for row in rows:
        row["baseline"] = True
    return rows


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    args = child_args(argv) or parse_args(argv)
    before = baseline_rows(args) if args.compare else []
    # What rescorer train sets for the whole process before its first update (a package from
    # before it had process_settings set nothing: the bench times each commit as it trains).
    settings = getattr(train_setup, "process_settings", None)
    if settings is not None:
        settings()
    pairs, step = read_pairs(args.table, args.pairs)
    device = resolve_device(args.device)
    code = args.code or git_commit()
    peaks, sizes = measure_peaks(device, args.precision, args.gemm_size)
    bandwidth = stream_triad(device)  # bytes/s
    rows = []
    for hidden_size in args.hidden_size:
        rows += measure_rows(args, hidden_size, pairs, device, code)
    if args.rows_out:
        with open(args.rows_out, "w", encoding="utf-8") as f:
            json.dump(rows, f)
        return
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_name()
    for hidden_size in args.hidden_size:
        mine = [r for r in rows if r["hidden_size"] == hidden_size]
        theirs = [r for r in before if r["hidden_size"] == hidden_size]
        print(f"### Training throughput ({mine[0]['date'][:10]}, commit {code})\n")
        print(
            f"{where}, {torch.get_num_threads()} threads, torch {torch.__version__}. Model: hidden"
            f" {hidden_size} ({mine[0]['parameters']:,} parameters). {len(pairs):,} real pairs"
            f" (every {step}th line of {args.table}; mean source"
            f" {pairs.src_lens.mean() - 1:.2f}, target {pairs.tgt_lens.mean() - 1:.2f} words +"
            f" EOS). GEMM peaks: bf16 {peaks['bf16'] / 1e9:,.0f} ({sizes['bf16']}^3), fp32"
            f" {peaks['fp32'] / 1e9:,.0f} ({sizes['fp32']}^3) GFLOP/s; memory"
            f" {bandwidth / 1e9:,.1f} GB/s (a STREAM triad). {args.updates} timed updates after"
            f" {args.warmup}."
            + (f" Each row first with the package at {theirs[0]['commit']}." if theirs else "")
            + "\n"
        )
        print_throughput(theirs + mine, peaks, code if theirs else None)
        print_floor(theirs + mine, peaks, bandwidth, code if theirs else None)


def _key(r: dict[str, Any]) -> tuple[Any, ...]:
    return r.get("baseline"), r["batch_size"], r["precision"], r["compiled"]


def print_throughput(rows: list[dict[str, Any]], peaks: dict[str, float], code: str | None) -> None:
    """The throughput table; with ``code`` (--compare) a column of each row's commit and one
    of its speed against the same row at the baseline commit."""
    # Each row against the straightforward update of the same commit, batch, precision and
    # compile setting; each captured row against train's eager update of the same settings.
    base = {_key(r): r["pairs_per_s"] for r in rows if r["variant"] == "straightforward"}
    eager = {
        _key(r): r["pairs_per_s"] for r in rows if r["variant"] == "train" and r["capture"] == "off"
    }
    first = {_same(r): r["pairs_per_s"] for r in rows if r.get("baseline")}
    best = max(peaks.values())
    extra = " code | vs the baseline |" if code else ""
    print(
        f"|{extra} batch | precision | compiled | update | capture | pairs/s | ms/update |"
        " vs straightforward | vs eager | model GFLOP/s | % of its precision's peak |"
        " % of the faster peak |"
    )
    print(
        "|"
        + ("---|---:|" if code else "")
        + "---:|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|"
    )
    for r in rows:
        p = r["precision"]
        ref_rate = base.get(_key(r))
        vs = f"{r['pairs_per_s'] / ref_rate:.2f}" if ref_rate else "-"
        eager_rate = eager.get(_key(r))
        vs_eager = f"{r['pairs_per_s'] / eager_rate:.2f}" if eager_rate else "-"
        own = f"{r['flops'] / peaks[p]:.0%}" if peaks[p] >= 1e9 else "(no peak)"
        lead = ""
        if code:
            was = None if r.get("baseline") else first.get(_same(r))
            lead = (
                f" {r['commit']} | {r['pairs_per_s'] / was:.2f} |"
                if was
                else f" {r['commit']} | - |"
            )
        print(
            f"|{lead} {r['batch_size']} | {p} | {r['compiled']} | {r['variant']} | {r['capture']} |"
            f" {r['pairs_per_s']:,.0f} | {r['ms_per_update']:.1f} | {vs} | {vs_eager} |"
            f" {r['flops'] / 1e9:,.1f} | {own} | {r['flops'] / best:.0%} |"
        )


def _same(r: dict[str, Any]) -> tuple[Any, ...]:
    return r["batch_size"], r["precision"], r["compiled"], r["variant"], r["capture"]


if __name__ == "__main__":
    main()
