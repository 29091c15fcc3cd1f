#!/usr/bin/env python3
"""The default thread count's rule, measured: ``rescorer score`` on an idle and on a busy
machine with ``--threads 1``, ``--threads 2`` and the default (rescorer/cpus.py: all the CPUs
this process may run on, their fair share while the load average is above the machine's CPUs).

The busy machine is made here: ``--busy N`` processes that spin (as other users' jobs would),
started before the runs and left to raise the 1-minute load average above the CPU count
(``--settle`` seconds at most), stopped at the end. The idle runs come first and wait (at most
``--settle`` seconds) for the load to fall under half the CPUs, before each run, so that the
default's choice does not meet the load of the run before; the load each run started at is
printed with it. Each setting runs ``--repeats`` times, alternating, and the median is kept.

Prints a Markdown block for BENCHMARKS.md:

    python scripts/bench_threads.py --model rnn-model/ --table phrase-table.gz \\
        [--lines 20000] [--busy 4] [--repeats 3] [--settle 120]

Without ``--model`` a tiny model is trained first (a dry run: ``--lines 300 --settle 0
--repeats 1`` checks the script in a minute; its figures mean nothing).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from benchlib import HERE, cpu_name, git_commit, write_slice

from rescorer.cli.ranges import Arg, RangeHelp

ROOT = Path(HERE).parent
TINY_TABLE = ROOT / "tests" / "data" / "tiny-system" / "phrase-table.gz"
DEFAULT_TABLE = ROOT / "tests" / "data" / "pt.en-fr.slice.gz"
SETTINGS = ("1", "2", "default")
SPIN = "while True:\n    pass\n"


def load() -> float:
    """The 1-minute load average."""
    return os.getloadavg()[0]


@contextlib.contextmanager
def busy_load(count: int, niceness: int = 0) -> Iterator[list[subprocess.Popen[bytes]]]:
    """``count`` processes that spin until the block ends (a machine busy with other jobs), at
    ``niceness`` (they count in the load average at any)."""
    spinners = [
        subprocess.Popen(
            [sys.executable, "-S", "-c", f"import os\nos.nice({niceness})\n{SPIN}"],
            stdin=subprocess.DEVNULL,
        )
        for _ in range(count)
    ]
    try:
        yield spinners
    finally:
        for spinner in spinners:
            spinner.kill()
        for spinner in spinners:
            spinner.wait()


def wait_for_load(busier_than: float | None, calmer_than: float | None, seconds: float) -> float:
    """Wait (at most ``seconds``) until the load average is above ``busier_than`` or below
    ``calmer_than``; the load average then."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        now = load()
        if (busier_than is not None and now > busier_than) or (
            calmer_than is not None and now < calmer_than
        ):
            return now
        time.sleep(1)
    return load()


def score_once(table: str, model: str, setting: str, work: str, extra: list[str]) -> dict:
    """One ``rescorer score`` run: its wall time, the threads its first line says it took and
    the load average it started at."""
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    threads = [] if setting == "default" else ["--threads", setting]
    out = os.path.join(work, "scored.gz")
    argv = [sys.executable, "-m", "rescorer", "score", table, "-m", model, "-o", out]
    argv += ["--progress-every", "0", *threads, *extra]
    started_at = load()
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, env=env)
    seconds = time.perf_counter() - start
    with contextlib.suppress(FileNotFoundError):
        os.remove(out)
    if done.returncode != 0:
        sys.exit(f"bench_threads: rescorer score failed:\n{done.stderr[-2000:]}")
    used = re.search(r"(\d+) threads? \(", (done.stderr.splitlines() or [""])[0])
    rate = re.search(r"scored [\d,]+ pairs in [\d.]+ s \(([\d,]+) pairs/s", done.stderr)
    return {
        "seconds": seconds,
        "rate": float(rate[1].replace(",", "")) if rate else 0.0,
        "threads": int(used[1]) if used else 0,
        "load": started_at,
    }


def measure(
    table: str, model: str, repeats: int, work: str, extra: list[str], calm: float | None = None
) -> dict:
    """Each setting ``repeats`` times, alternating: {setting: (median wall seconds, median
    pairs/s as score reports them, threads taken, median load at the start)}. With ``calm``
    (seconds), each run first waits that long at most for the load its predecessors left to
    fall under half the CPUs: the idle runs' default must not meet the last run's load."""
    runs: dict[str, list[dict]] = {setting: [] for setting in SETTINGS}
    for _ in range(repeats):
        for setting in SETTINGS:
            if calm is not None:
                wait_for_load(None, (os.cpu_count() or 1) / 2, calm)
            runs[setting].append(score_once(table, model, setting, work, extra))
    return {
        setting: (
            statistics.median(r["seconds"] for r in found),
            statistics.median(r["rate"] for r in found),
            found[-1]["threads"],
            statistics.median(r["load"] for r in found),
        )
        for setting, found in runs.items()
    }


def tiny_model(work: str) -> str:
    """A model trained in seconds (the dry run's)."""
    out = os.path.join(work, "tiny-model")
    flags = "--hidden-size 8 --embed-size 6 --maxout-units 5 --max-updates 5 -q --threads 1"
    subprocess.run(
        [sys.executable, "-m", "rescorer", "train", str(TINY_TABLE), "-o", out, *flags.split()],
        check=True,
    )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        formatter_class=RangeHelp, description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--model", help="model folder (default: a tiny one, trained here)")
    parser.add_argument("--table", default=str(DEFAULT_TABLE), help="phrase table to score")
    parser.add_argument("--lines", type=Arg(1, 10**8), default=20_000, help="lines scored per run")
    parser.add_argument(
        "--busy", type=Arg(0, 1024), default=4, help="spinning processes for the load"
    )
    parser.add_argument("--repeats", type=Arg(1, 1000), default=3, help="runs per setting (median)")
    parser.add_argument(
        "--settle", type=Arg(0, 86400, float), default=120, help="seconds to wait for the load"
    )
    parser.add_argument("--score-args", default="", help="more flags for rescorer score")
    args = parser.parse_args()
    commit, cpus = git_commit(), os.cpu_count() or 1
    extra = args.score_args.split()
    with tempfile.TemporaryDirectory(prefix="bench-threads-") as work:
        model = args.model or tiny_model(work)
        table = os.path.join(work, "table.gz")
        lines = write_slice(args.table, args.lines, table, cycle=True)
        idle = measure(table, model, args.repeats, work, extra, calm=args.settle)
        with busy_load(args.busy):
            wait_for_load(cpus, None, args.settle)
            busy = measure(table, model, args.repeats, work, extra)
    print(f"### Threads on an idle and a busy machine ({datetime.date.today()}, {commit})\n")
    print(
        f"{cpu_name()}, {cpus} CPUs; {lines:,} lines of {args.table}, model {args.model or 'tiny'}"
    )
    print(f"(busy: {args.busy} spinning processes); median of {args.repeats} runs\n")
    print("| machine | load at start | --threads | threads taken | pairs/s | wall s |")
    print("|---|---:|---|---:|---:|---:|")
    for name, found in (("idle", idle), ("busy", busy)):
        for setting, (wall, rate, threads, at) in found.items():
            print(f"| {name} | {at:.1f} | {setting} | {threads} | {rate:,.0f} | {wall:.1f} |")


if __name__ == "__main__":
    main()
