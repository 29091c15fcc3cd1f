#!/usr/bin/env python3
"""``extend``'s batched beam search against an earlier revision's, on the same sources.

Loads ``rescorer/extend/beam.py`` as it was at ``--baseline`` (a git revision) beside the one
in this checkout, and runs both on the same source phrases (the first ``--sources`` distinct
sources of ``--table``, in batches of ``--batch-sources`` as ``extend`` takes them on a CPU;
``--device cuda --batch-sources 4096`` as on a GPU, TF32 off), alternating, ``--repeats`` times
each, one thread unless ``--threads``. Prints sources/s (the
best run of each), the ratio, and whether the two found the same targets for every source, in
the same order (and how far apart their log p are: the ranking's float32 rounding).

``--model`` is a trained model folder: its beams end when it says EOS, as in Table 1's (f).
Random weights (``--hidden H``) are the other end: every hypothesis lives to the step limit.

    python scripts/bench_beam.py --model runs/help/models/fwd@3h --baseline HEAD~1 \\
        --table runs/help/baseline/train/model/phrase-table.gz
"""

from __future__ import annotations

import argparse
import datetime
import gzip
import importlib.util
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType

import torch
from bench_extend import random_model
from benchlib import cpu_name, git_commit

from rescorer.cli.ranges import Arg, RangeHelp
from rescorer.cpus import MAX_THREADS
from rescorer.extend import beam as current
from rescorer.model.checkpoint import load_model_dir

ROOT = Path(__file__).resolve().parents[1]


def beam_at(revision: str, folder: Path) -> ModuleType:
    """rescorer/extend/beam.py at ``revision`` (or the file ``revision`` names, where there is
    no git history: a copy carried to a GPU machine), imported as a module of its own."""
    if Path(revision).is_file():
        source = Path(revision).read_text(encoding="utf-8")
    else:
        source = subprocess.run(
            ["git", "-C", str(ROOT), "show", f"{revision}:rescorer/extend/beam.py"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    path = folder / "beam_baseline.py"
    path.write_text(source, encoding="utf-8")
    spec = importlib.util.spec_from_file_location("beam_baseline", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["beam_baseline"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def distinct_sources(table: str, count: int) -> list[list[str]]:
    """The first ``count`` distinct source phrases of a Moses table, as tokens."""
    found: list[list[str]] = []
    last = None
    opener = gzip.open if table.endswith(".gz") else open
    with opener(table, "rt", encoding="utf-8") as f:
        for line in f:
            src = line.split(" ||| ", 1)[0]
            if src != last:  # Moses' tables are sorted by source
                found.append(src.split(" "))
                last = src
                if len(found) == count:
                    break
    return found


def main() -> None:
    ap = argparse.ArgumentParser(formatter_class=RangeHelp, description=__doc__.split("\n\n")[0])
    ap.add_argument("--table", required=True, help="A Moses phrase table (.gz or plain).")
    ap.add_argument("--model", help="A trained model folder (else random weights, --hidden).")
    ap.add_argument(
        "--hidden", type=Arg(1, 1 << 14), default=1000, help="Random weights: hidden size."
    )
    ap.add_argument(
        "--baseline",
        default="HEAD",
        help="The git revision to compare with, or a beam.py file (no git history there).",
    )
    ap.add_argument("--sources", type=Arg(1, 10**8), default=2560)
    ap.add_argument("--batch-sources", type=Arg(1, 1 << 16), default=256)
    ap.add_argument("--beam", type=Arg(1, 1000), default=5)
    ap.add_argument("--repeats", type=Arg(1, 1000), default=2)
    ap.add_argument("--threads", type=Arg(1, MAX_THREADS), default=1)
    ap.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (fp32 either way).")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    sources = distinct_sources(args.table, args.sources)
    with tempfile.TemporaryDirectory() as tmp:
        folder, what = args.model, f"trained model {args.model}"
        if folder is None:  # bench_extend.py's: the paper's shortlists and sizes, but --hidden
            sizes = argparse.Namespace(vocab_size=15000, embed_size=100, maxout_units=500)
            folder = random_model(f"{tmp}/random", args.table, args.hidden, sizes)
            what = (
                f"random weights, hidden {args.hidden} (paper-size shortlists, embeddings, maxout)"
            )
        loaded = load_model_dir(folder)
        model, src_vocab, tgt_vocab = loaded.model, loaded.src_vocab, loaded.tgt_vocab
        device = torch.device(args.device)
        model = model.to(device).float()
        if device.type == "cuda":  # TF32 off: both beams in the same fp32 as on the CPU
            torch.backends.cuda.matmul.allow_tf32 = False
        baseline = beam_at(args.baseline, Path(tmp))
        runs: dict[str, list[float]] = {"baseline": [], "this checkout": []}
        found: dict[str, list] = {}
        for _ in range(args.repeats):
            for name, module in (("baseline", baseline), ("this checkout", current)):
                out = []
                start = time.perf_counter()
                for i in range(0, len(sources), args.batch_sources):
                    part = sources[i : i + args.batch_sources]
                    out += module.beam_search_batched(model, src_vocab, tgt_vocab, part, args.beam)
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                runs[name].append(time.perf_counter() - start)
                found[name] = out
    pairs = list(zip(found["baseline"], found["this checkout"], strict=True))
    same = sum({h.ids for h in a} == {h.ids for h in b} for a, b in pairs)
    ordered = sum([h.ids for h in a] == [h.ids for h in b] for a, b in pairs)
    gap = max(
        (abs(x.logp - y.logp) for a, b in pairs for x in a for y in b if x.ids == y.ids),
        default=0.0,
    )
    best = {name: len(sources) / min(times) for name, times in runs.items()}
    where = cpu_name()
    if device.type == "cuda":
        where = f"{torch.cuda.get_device_name(device)}, host {where}"
    print(
        f"### The batched beam search, {args.baseline} against this checkout "
        f"({datetime.date.today()}, commit {git_commit()}, {where}, {args.threads} "
        f"thread(s))\n\n{what}; {len(sources):,} distinct sources of {args.table}, batches of "
        f"{args.batch_sources}, N = {args.beam}, {args.repeats} runs each, alternating\n"
    )
    print("| beam.py | runs (s) | sources/s (best run) | ratio |")
    print("|---|---|---:|---:|")
    for name, times in runs.items():
        ratio = best[name] / best["baseline"]
        print(
            f"| {name} | {' '.join(f'{t:.1f}' for t in times)} | {best[name]:.1f} | {ratio:.2f} |"
        )
    print(
        f"\nthe same targets for {same:,} of {len(sources):,} sources, in the same order for "
        f"{ordered:,} (a near tie may sort either way); the largest gap between the two's log p "
        f"of one target: {gap:.1e}"
    )


if __name__ == "__main__":
    main()
