#!/usr/bin/env python3
"""Peak memory of ``rescorer score`` against table length, per precision, same run.

Each figure is one ``rescorer score`` process on the first N lines of a real table (gzip), its
peak resident set size read from the kernel's accounting of that child (``wait4``). The
configurations:

- ``bf16``: the default bf16 path (oneDNN's per-shape kernel caches bounded by rescorer);
- ``bf16-unbounded``: the same with both caches at oneDNN's own default of 1,024 entries, which
  is what every bf16 run did before the bound (the baseline);
- ``fp32``: the fp32 path (MKL products, no per-shape caches).

The script itself loads no torch and keeps no table in memory: a child's peak as the kernel
counts it includes the parent's pages at the fork, so the random model is made in a child too.
Memory that does not grow with N is the claim; seconds are printed too, but they are one run
each and the runs are not interleaved, so read them as rough. The last row is ``score`` meeting
a line with no newline (a 64 MiB prefix of /dev/zero, issue 28): it must stop with its line
number, its memory bounded by the longest line read (16 MiB) and the chunk size, not the file.
The table ends with the bound docs/score.md states (Memory): the largest peak over every N, per
config.

    python scripts/bench_memory.py [--model DIR] [--sizes 20000,200000,1000000]
        [--configs bf16,fp32] [--workers N] [--chunk-bytes B]
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

from rescorer.cli.ranges import MAX_CHUNK_BYTES, Arg, RangeHelp

DEFAULT_TABLE = os.path.join(
    os.path.dirname(__file__), "..", "..", "shared", "data", "en-fr", "phrase-table.gz"
)
CONFIGS = {
    "bf16": ("bf16", {}),
    "bf16-unbounded": (
        "bf16",
        {"ONEDNN_PRIMITIVE_CACHE_CAPACITY": "1024", "LRU_CACHE_CAPACITY": "1024"},
    ),
    "fp32": ("fp32", {}),
}


def peak_rss(cmd: list[str], env: dict[str, str], expect: int = 0) -> tuple[float, float, int]:
    """(peak RSS in MiB, wall seconds, exit code) of one child process; raises if its exit code
    is not ``expect``."""
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - t
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != expect:
        raise SystemExit(f"{' '.join(cmd)}: exit {proc.returncode}, expected {expect}")
    return usage.ru_maxrss / 1024, seconds, proc.returncode


def make_model(table: str, hidden_size: int, folder: str) -> None:
    """A model of ``hidden_size`` with random weights and 15,000-word shortlists (the paper's)."""
    import torch

    from rescorer.io.table import read_table
    from rescorer.model.checkpoint import save_model_dir
    from rescorer.model.encdec import EncoderDecoder, ModelConfig, init_weights_
    from rescorer.vocab import build_vocabs

    pairs = ((e.src, e.tgt) for e in read_table(table))
    src_vocab, tgt_vocab = build_vocabs(pairs, 15000, 15000)
    torch.manual_seed(0)
    model = EncoderDecoder(ModelConfig(hidden_size=hidden_size))
    init_weights_(model)
    save_model_dir(folder, model, src_vocab, tgt_vocab, {"made_by": "bench_memory.py"})


def main() -> None:
    parser = argparse.ArgumentParser(formatter_class=RangeHelp, description=__doc__.splitlines()[0])
    parser.add_argument("--table", default=DEFAULT_TABLE)
    parser.add_argument("--model", help="A model directory (default: random, --hidden-size).")
    parser.add_argument("--hidden-size", type=Arg(1, 1 << 14), default=256)
    parser.add_argument("--sizes", default="20000,200000,1000000")
    parser.add_argument("--configs", default=",".join(CONFIGS))
    parser.add_argument("--workers", default="0", help="score --workers (0: none, or auto).")
    parser.add_argument(
        "--chunk-bytes",
        type=Arg(1, MAX_CHUNK_BYTES),
        help="score --chunk-bytes (default: its own).",
    )
    parser.add_argument(
        "--no-endless", action="store_true", help="Skip the endless-line (/dev/zero) row."
    )
    parser.add_argument("--make-model", metavar="DIR", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.make_model:
        make_model(args.table, args.hidden_size, args.make_model)
        return
    sizes = [int(s) for s in args.sizes.split(",")]
    configs = args.configs.split(",")

    commit = git_commit()  # the code measured: read before the runs
    tmp = tempfile.mkdtemp(prefix="bench_memory.")
    model_dir = args.model
    if model_dir is None:
        model_dir = os.path.join(tmp, "model")
        cmd = [sys.executable, __file__, "--table", args.table, "--make-model", model_dir]
        subprocess.run([*cmd, "--hidden-size", str(args.hidden_size)], check=True)

    rows = []
    options = ["-q", "--workers", args.workers]
    if args.chunk_bytes:
        options += ["--chunk-bytes", str(args.chunk_bytes)]
    for size in sizes:
        table = os.path.join(tmp, f"table-{size}.gz")
        lines = write_slice(args.table, size, table)
        for name in configs:
            precision, extra = CONFIGS[name]
            env = {k: v for k, v in os.environ.items() if k not in CONFIGS["bf16-unbounded"][1]}
            env.update(extra)
            out = os.path.join(tmp, "out.gz")
            cmd = [sys.executable, "-m", "rescorer", "score", table, "-m", model_dir]
            cmd += ["-o", out, "--precision", precision, *options]
            mib, seconds, _ = peak_rss(cmd, env)
            rows.append((lines, name, mib, seconds))
            print(f"{lines:>9,} {name:<15} {mib:8.0f} MiB {seconds:7.1f} s", file=sys.stderr)
            os.remove(out)
        os.remove(table)
    endless = None
    if not args.no_endless:
        zeros = os.path.join(tmp, "zeros")
        with open(zeros, "wb") as f:
            f.truncate(64 << 20)  # sparse: a 64 MiB prefix of /dev/zero
        cmd = [sys.executable, "-m", "rescorer", "score", zeros, "-m", model_dir]
        cmd += ["-o", os.path.join(tmp, "out.gz"), "--precision", "fp32", *options]
        mib, seconds, code = peak_rss(cmd, dict(os.environ), expect=1)
        endless = (mib, seconds)
        print(f"endless line: exit {code}, {mib:.0f} MiB {seconds:.1f} s", file=sys.stderr)
    shutil.rmtree(tmp)

    print(f"### Peak memory of `rescorer score` ({datetime.date.today()}, commit {commit})\n")
    torch_version = subprocess.run(
        [sys.executable, "-c", "import torch; print(torch.__version__)"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    print(f"- machine: {cpu_name()}, {os.cpu_count()} cores; torch {torch_version}")
    print(f"- model: {model_dir if args.model else f'random, hidden {args.hidden_size}'}")
    print(f"- table: first N lines of {os.path.basename(args.table)}")
    print(f"- score options: {' '.join(options)}\n")
    print("| lines | config | peak RSS (MiB) | ratio to the smallest N | seconds |")
    print("|---:|---|---:|---:|---:|")
    first = {name: mib for lines, name, mib, _ in rows if lines == rows[0][0]}
    for lines, name, mib, seconds in rows:
        print(f"| {lines:,} | {name} | {mib:.0f} | {mib / first[name]:.2f} | {seconds:.1f} |")
    if endless is not None:
        print(f"| 64 MiB, no newline (refused) | fp32 | {endless[0]:.0f} | | {endless[1]:.1f} |")
    print("\nBound (docs/score.md's): the largest peak over these N, per config:")
    for name in configs:
        peaks = [mib for _, n, mib, _ in rows if n == name]
        print(f"- {name}: {min(peaks):.0f} to {max(peaks):.0f} MiB")


if __name__ == "__main__":
    main()
