#!/usr/bin/env python3
"""A command's whole process, start to exit: what a short ``rescorer`` run costs beyond its work.

Each command runs as a user runs it (``python -m rescorer ...``, whose entry point freezes the
objects left before the interpreter's shutdown walks them) and as the same entry point without
that freeze (the baseline), alternating, ``--repeats`` times each; the medians and their ratio.
The commands: ``score`` of the first ``--lines`` lines of the slice with a tiny model (imports
torch), ``check`` of the same table (torch-free), and ``python -c "import torch"`` with and
without ``gc.freeze()`` (the interpreter alone).

    python scripts/bench_startup.py [--repeats 9] [--lines 2000] [--model tests/data/golden/model]
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import subprocess
import sys
import tempfile
import time

from benchlib import HERE, cpu_name, git_commit, write_slice

from rescorer.cli.ranges import Arg, RangeHelp

ROOT = os.path.dirname(HERE)
SLICE = os.path.join(ROOT, "tests", "data", "pt.en-fr.slice.gz")
WITHOUT_FREEZE = "import rescorer.cli as c; c.skip_the_collections_at_exit = lambda: None; c.main()"


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(formatter_class=RangeHelp, description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=Arg(1, 1000), default=9, help="Runs of each form.")
    parser.add_argument("--lines", type=Arg(1, 10**7), default=2000, help="Lines scored.")
    parser.add_argument("--model", default=os.path.join(ROOT, "tests", "data", "golden", "model"))
    return parser.parse_args()


def seconds(argv: list[str]) -> float:
    """The wall time of one run of ``argv``, which must succeed."""
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    args = parse_args()
    commit = git_commit()
    py = sys.executable
    with tempfile.TemporaryDirectory() as work:
        table = os.path.join(work, "pt.gz")
        lines = write_slice(SLICE, args.lines, table)
        out = os.path.join(work, "out.gz")
        score = ["score", table, "-m", args.model, "-o", out, "--device", "cpu",
                 "--precision", "fp32", "--compile", "no", "-q", "--force"]  # fmt: skip
        score_row = f"rescorer score, {lines:,} lines"
        rows = {
            score_row: (
                [py, "-m", "rescorer", *score],
                [py, "-c", WITHOUT_FREEZE, *score],
            ),
            f"rescorer check, {lines:,} lines": (
                [py, "-m", "rescorer", "check", table],
                [py, "-c", WITHOUT_FREEZE, "check", table],
            ),
            "python -c 'import torch'": (
                [py, "-c", "import gc, torch; gc.freeze()"],
                [py, "-c", "import torch"],
            ),
        }
        times: dict[str, tuple[list[float], list[float]]] = {k: ([], []) for k in rows}
        for argv in rows[score_row]:
            seconds(argv)  # the file cache and the bytecode warm
        for _ in range(args.repeats):
            for name, (frozen, plain) in rows.items():
                times[name][1].append(seconds(plain))
                times[name][0].append(seconds(frozen))
    today = datetime.date.today().isoformat()
    print(f"### A command's process, start to exit ({today}, commit {commit})\n")
    print(f"CPU: {cpu_name()} ({os.cpu_count()} logical CPUs), OMP_NUM_THREADS="
          f"{os.environ.get('OMP_NUM_THREADS', 'unset')}; median of {args.repeats} runs each, "
          "alternating.\n")  # fmt: skip
    print("| command | without the freeze (s) | with it (s) | ratio |")
    print("|---|---:|---:|---:|")
    for name, (frozen, plain) in times.items():
        a, b = statistics.median(plain), statistics.median(frozen)
        print(f"| {name} | {a:.2f} | {b:.2f} | {a / b:.2f}x |")


if __name__ == "__main__":
    main()
