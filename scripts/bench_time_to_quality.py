#!/usr/bin/env python3
"""Training time to quality: validation perplexity against wall time, per batch size and code.

Runs ``rescorer train`` on TABLE once per ``--batch-size`` for ``--minutes`` each (one after the
other, never at once: they would share the cores), with validations every ``--valid-pairs``
training pairs, all on the same held-out pairs (same seed). With ``--compare COMMIT`` every
batch size runs twice, first with the package as it was at COMMIT (extracted by ``git archive``
into the work folder and put first on PYTHONPATH), then with this checkout's: the same command,
the same seed, in one sitting. The reference is the perplexity the first run reaches at the end
of its budget; for each run the first validation at or below it is its time to quality. Prints
a Markdown block and writes the curves as a PNG.

Resumable: a run whose folder holds a finished log is read, not rerun; an interrupted one
continues with --resume (its log keeps wall times across runs).

    python scripts/bench_time_to_quality.py --hidden-size 256 --batch-size 64 --minutes 10 \\
        --compare f587262 --work runs/ttq --png docs/results/time-to-quality.png

On a GPU (issue 56: the batch that --batch-size auto should pick there), the same runs with
``--device cuda``, every validation point also written to ``--csv`` (run, batch, seconds,
update, epoch, validation perplexity), and any further ``rescorer train`` flags after ``--``:

    python scripts/bench_time_to_quality.py --device cuda --batch-size 64 256 1024 4096 \\
        --minutes 1.5 --csv ttq.csv --png ttq.png -- --capture auto

``--beside LABEL=FOLDER`` puts an earlier run's curve (any model size, any batch) beside these in
the table and the PNG, read from its log, not run again: the paper's size beside hidden 256.

    python scripts/bench_time_to_quality.py \\
        --table runs/help/baseline/train/model/phrase-table.gz --hidden-size 1000 \\
        --batch-size 64 --minutes 90 --work runs/ttq-h1000 \\
        --beside "hidden 256, batch 64=runs/ttq-h256/batch64" \\
        --png docs/results/time-to-quality-paper-size.png
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import os
import subprocess
import sys

from benchlib import cpu_name, git_commit

from rescorer.cli.ranges import Arg, RangeHelp
from rescorer.durations import MAX_DAYS


def validations(folder: str) -> list[tuple[float, int, float]]:
    """(seconds, update, validation perplexity) of a run's log."""
    path = os.path.join(folder, "train.log.jsonl")
    if not os.path.exists(path):
        return []
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            record = json.loads(line)
            if "valid_ppl" in record:
                out.append((record["time"], record["update"], record["valid_ppl"]))
    return out


def finished(folder: str, minutes: float) -> bool:
    points = validations(folder)
    return bool(points) and points[-1][0] >= 60 * minutes - 120


def checkout(commit: str, folder: str) -> str:
    """The package as it was at ``commit``, extracted into ``folder`` (once)."""
    if not os.path.isdir(os.path.join(folder, "rescorer")):
        os.makedirs(folder, exist_ok=True)
        archive = subprocess.run(
            ["git", "archive", commit, "rescorer"], check=True, capture_output=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", folder], input=archive, check=True)
    return os.path.abspath(folder)


def device_name(device: str | None) -> str:
    """The GPU's name for a CUDA run, else the CPU's."""
    if device and device.startswith("cuda"):
        import torch

        if torch.cuda.is_available():
            return torch.cuda.get_device_name(0)
    return cpu_name()


def write_csv(
    path: str, curves: dict[str, list[tuple[float, int, float]]], batches: list[int]
) -> None:
    """Every validation point of every run: run, batch, seconds (wall time from the run's
    start), update, validation perplexity."""
    with open(path, "w", newline="", encoding="utf-8") as f:
        out = csv.writer(f)
        out.writerow(["run", "batch", "seconds", "update", "valid_ppl"])
        for (label, points), batch in zip(curves.items(), batches, strict=True):
            for seconds, update, ppl in points:
                out.writerow([label, batch, seconds, update, f"{ppl:.4f}"])


def batches_of(args: argparse.Namespace) -> list[int]:
    """The batch size of each run, in run order."""
    return [b for b in args.batch_size for _ in range(2 if args.compare else 1)]


def beside_run(text: str) -> tuple[str, str]:
    """``LABEL=FOLDER`` of --beside: a finished run's folder, with the label its curve takes."""
    label, sep, folder = text.rpartition("=")
    if not sep or not label or not validations(folder):
        raise argparse.ArgumentTypeError(
            f"expected LABEL=FOLDER, FOLDER a run with validations in its train.log.jsonl: {text!r}"
        )
    return label, os.path.abspath(folder)


def main() -> None:
    parser = argparse.ArgumentParser(formatter_class=RangeHelp, description=__doc__.splitlines()[0])
    parser.add_argument("--table", default="../shared/data/en-fr/phrase-table.gz")
    parser.add_argument("--hidden-size", type=Arg(1, 1 << 14), default=1000)
    parser.add_argument("--batch-size", type=Arg(1, 1 << 16), nargs="+", default=[64, 256])
    parser.add_argument("--minutes", type=Arg(0, MAX_DAYS * 1440, float), default=30.0)
    parser.add_argument("--valid-pairs", type=Arg(1, 10_000_000), default=64_000)
    parser.add_argument("--work", default="runs/time-to-quality")
    parser.add_argument("--png", default=None)
    parser.add_argument("--csv", default=None, help="every validation point, one row each")
    parser.add_argument("--device", default=None, help="train --device (default: train's)")
    parser.add_argument("train_flags", nargs="*", help="more rescorer train flags, after --")
    parser.add_argument(
        "--beside", metavar="LABEL=FOLDER", action="append", default=[], type=beside_run,
        help="an earlier run's curve beside these (its train.log.jsonl; not run again)",
    )  # fmt: skip
    parser.add_argument(
        "--compare", metavar="COMMIT",
        help="run every batch size with the package at COMMIT too, before this checkout's",
    )  # fmt: skip
    args = parser.parse_args()

    commit = git_commit()
    args.table, args.work = os.path.abspath(args.table), os.path.abspath(args.work)
    # (label, folder, checkout put first on PYTHONPATH or None) of every run, in order.
    runs: list[tuple[str, str, str | None]] = []
    for batch in args.batch_size:
        if args.compare:
            old = checkout(args.compare, os.path.join(args.work, f"code-{args.compare}"))
            runs.append((f"batch {batch}, {args.compare}", os.path.join(
                args.work, f"{args.compare}-batch{batch}"), old))  # fmt: skip
            runs.append((f"batch {batch}, {commit}", os.path.join(
                args.work, f"{commit}-batch{batch}"), None))  # fmt: skip
        else:
            name = f"hidden {args.hidden_size}, batch {batch}" if args.beside else f"batch {batch}"
            runs.append((name, os.path.join(args.work, f"batch{batch}"), None))
    for (_, folder, code), batch in zip(runs, batches_of(args), strict=True):
        if finished(folder, args.minutes):
            continue
        resume = ["--resume"] if os.path.exists(os.path.join(folder, "train-state.pt")) else []
        cmd = [
            sys.executable, "-m", "rescorer", "train", args.table, "-o", folder,
            "--hidden-size", str(args.hidden_size), "--batch-size", str(batch),
            "--max-time", f"{args.minutes}m", "--patience", "0", "--seed", "1",
            "--valid-every", str(max(1, args.valid_pairs // batch)), "--log-every", "100000",
            *(["--device", args.device] if args.device else []), *args.train_flags, *resume,
        ]  # fmt: skip
        env = dict(os.environ)
        if code is not None:
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [code, env.get("PYTHONPATH")]))
        print("$", f"PYTHONPATH={code}" if code else "", " ".join(cmd), file=sys.stderr,
              flush=True)  # fmt: skip
        # From the checkout's folder: the current folder comes first on sys.path.
        subprocess.run(cmd, check=True, env=env, cwd=code)

    curves = {label: validations(folder) for label, folder, _ in runs}
    if args.csv:
        write_csv(args.csv, curves, batches_of(args))
    curves.update((label, validations(folder)) for label, folder in args.beside)
    first = runs[0][0]
    reference = min(p for _, _, p in curves[first])
    where = device_name(args.device)
    print(f"### Time to quality ({datetime.date.today()}, commit {commit})\n")
    print(
        f"{where}; `rescorer train {args.table} --hidden-size {args.hidden_size}`, "
        f"{args.minutes:g} minutes per run, one run at a time, validation every "
        f"{args.valid_pairs:,} training pairs on the same 5,000 held-out pairs. Reference: "
        f"the perplexity of {first} in {args.minutes:g} minutes, {reference:.2f}.\n"
    )
    print(
        "| run | minutes | updates | best ppl | ppl at 1/3 of the time | "
        "time to reach the reference |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for label, points in curves.items():
        third = [p for t, _, p in points if t <= points[-1][0] / 3]  # this curve's own third
        reach = next((t for t, _, p in points if p <= reference), None)
        print(
            f"| {label} | {points[-1][0] / 60:.1f} | {points[-1][1]:,} | "
            f"{min(p for _, _, p in points):.2f} | "
            f"{min(third) if third else float('nan'):.2f} | "
            + (f"{reach / 60:.1f} min |" if reach is not None else "not reached |")
        )
    if args.png:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(7, 4.5))
        for label, points in curves.items():
            ax.plot([t / 60 for t, _, _ in points], [p for _, _, p in points], marker="o",
                    markersize=3, label=label)  # fmt: skip
        ax.axhline(reference, color="0.5", linestyle="--", linewidth=1,
                   label=f"reference: {first}'s best after {args.minutes:g} min "
                   f"({reference:.2f})")  # fmt: skip
        ax.annotate(
            "time to quality: when a curve first reaches the reference",
            (0.99, reference), xycoords=("axes fraction", "data"), xytext=(0, 4),
            textcoords="offset points", ha="right", va="bottom", fontsize=8, color="0.35",
        )  # fmt: skip
        ax.set_yscale("log")
        ax.set_xlabel("wall time (minutes, data loading and validation included)")
        ax.set_ylabel("validation perplexity")
        ax.set_title(where if args.beside else f"hidden {args.hidden_size}, {where}", fontsize=9)
        ax.grid(alpha=0.3, which="both")
        ax.legend()
        fig.tight_layout()
        fig.savefig(args.png, dpi=100)
        print(f"\n![validation perplexity against wall time]({args.png})")


if __name__ == "__main__":
    main()
