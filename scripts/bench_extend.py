#!/usr/bin/env python3
"""Generation speed: ``rescorer extend`` against ``rescorer score`` on the same sources.

For each model size (``--hidden``, default the paper's 1000 and 256) and each beam width
(``--beam``, default 5 and 10), on one device, times:

- ``extend`` end to end (``extend_table``, ``--form second-table``: gzip table in, the new
  pairs out): source phrases searched per second and new pairs written per second;
- ``score`` end to end (``score_table``) on the same table: pairs per second, and the time
  ``extend`` takes per ``score`` time (the issue's "against the time score takes on the same
  sources").

The table is the first ``--lines`` lines of ``--table`` (default: the real en-fr table), so
every distinct source of those lines is searched. The models are ``--model`` (trained ones:
their beams finish when the model says EOS; give the paper-size and the hidden-256 models for
BENCHMARKS.md) or, by default, random weights of the chosen sizes: a random model rarely ends
a hypothesis, so every search runs its 3 x (words + 1) steps, the most a source can cost (an
upper bound on the time per source), and it proposes almost no new pair.

Prints a Markdown block for BENCHMARKS.md, naming the machine and the commit.

    python scripts/bench_extend.py [--lines 20000] [--device auto] [--hidden 1000 256]
        [--beam 5 10] [--model FWD_1000 FWD_256] [--threads N]
"""

from __future__ import annotations

import argparse
import datetime
import os
import tempfile
import time

import torch
from bench_score import DEFAULT_TABLE
from benchlib import cpu_name, git_commit, write_slice

from rescorer.cli.ranges import Arg, RangeHelp
from rescorer.cpus import MAX_THREADS
from rescorer.device import resolve_device, resolve_precision
from rescorer.extend.config import SECOND_TABLE, ExtendConfig
from rescorer.extend.pipeline import extend_table
from rescorer.io.table import read_table
from rescorer.model.checkpoint import save_model_dir
from rescorer.model.encdec import EncoderDecoder, ModelConfig, init_weights_
from rescorer.score.config import ScoreConfig
from rescorer.score.pipeline import score_table
from rescorer.vocab import build_vocabs


def random_model(folder: str, table: str, hidden: int, args: argparse.Namespace) -> str:
    """A model directory of the given sizes with GroundHog's random initialisation."""
    pairs = ((e.src, e.tgt) for e in read_table(table))
    src_vocab, tgt_vocab = build_vocabs(pairs, args.vocab_size, args.vocab_size)
    torch.manual_seed(0)
    config = ModelConfig(
        src_vocab_size=args.vocab_size,
        tgt_vocab_size=args.vocab_size,
        hidden_size=hidden,
        embed_size=args.embed_size,
        maxout_units=args.maxout_units,
    )
    model = EncoderDecoder(config)
    init_weights_(model)
    save_model_dir(folder, model, src_vocab, tgt_vocab, {"made_by": "bench_extend.py"})
    return folder


def main() -> None:
    parser = argparse.ArgumentParser(formatter_class=RangeHelp, description=__doc__.splitlines()[0])
    parser.add_argument("--table", default=DEFAULT_TABLE)
    parser.add_argument(
        "--model", nargs="+", help="Trained model directories (then --hidden is ignored)."
    )
    parser.add_argument("--lines", type=Arg(1, 10**8), default=20_000)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--precision", default="auto")
    parser.add_argument("--hidden", type=Arg(1, 1 << 14), nargs="+", default=[1000, 256])
    parser.add_argument("--beam", type=Arg(1, 1000), nargs="+", default=[5, 10])
    parser.add_argument(
        "--batch-sources", type=Arg(1, 1 << 16), default=None, help="default: by device"
    )
    parser.add_argument(
        "--threads",
        type=Arg(1, MAX_THREADS),
        default=None,
        help="compute threads of both (default: the rule)",
    )
    parser.add_argument("--vocab-size", type=Arg(2, 1_000_000), default=15000)
    parser.add_argument("--embed-size", type=Arg(1, 1 << 14), default=100)
    parser.add_argument("--maxout-units", type=Arg(1, 1 << 14), default=500)
    args = parser.parse_args()

    device = resolve_device(args.device)
    precision = resolve_precision(args.precision, device, "score")
    tmp = tempfile.mkdtemp(prefix="bench_extend.")
    table = os.path.join(tmp, "table.gz")
    n_lines = write_slice(args.table, args.lines, table)
    models = (
        [(os.path.basename(os.path.normpath(m)), m) for m in args.model]
        if args.model
        else [
            (f"hidden {h}", random_model(os.path.join(tmp, f"model{h}"), table, h, args))
            for h in args.hidden
        ]
    )
    common = {
        "device": args.device,
        "precision": args.precision,
        "threads": args.threads,  # the same for score and extend: their rates compare
        "quiet": True,
    }
    rows = []
    for label, model_dir in models:
        t = time.perf_counter()
        scored = score_table(
            table, model_dir, os.path.join(tmp, "scored.gz"), ScoreConfig(**common)
        )
        score_s = time.perf_counter() - t
        for beam in args.beam:
            config = ExtendConfig(
                form=SECOND_TABLE, beam=beam, batch_sources=args.batch_sources, **common
            )
            t = time.perf_counter()
            stats = extend_table(table, [model_dir], os.path.join(tmp, "new.gz"), config)
            extend_s = time.perf_counter() - t
            rows.append(
                (
                    label,
                    beam,
                    stats.searched,
                    stats.searched / extend_s,
                    stats.new_pairs,
                    stats.new_pairs / extend_s,
                    scored.pairs_scored / score_s,
                    extend_s / score_s,
                )
            )
            print(f"bench_extend: {label}, N={beam}: {rows[-1]}", flush=True)

    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else "none"
    print()
    print(
        f"### extend against score ({datetime.date.today()}, commit {git_commit()}, "
        f"{device.type}, {precision})"
    )
    print()
    threads = torch.get_num_threads()  # as the runs set it (--threads, or the default rule)
    print(
        f"CPU: {cpu_name()} ({os.cpu_count()} logical CPUs visible, {threads} compute "
        f"thread{'s' if threads != 1 else ''}); GPU: {gpu}."
    )
    kind = "trained: " + ", ".join(args.model) if args.model else "random weights (full-length)"
    print(f"Table: the first {n_lines:,} lines of {os.path.basename(args.table)}; model: {kind}.")
    print()
    head = "| model | N | sources | sources/s | new pairs | new pairs/s | score pairs/s |"
    print(head + " extend / score time |")
    print("|---|---|---|---|---|---|---|---|")
    for label, beam, sources, s_rate, new, n_rate, p_rate, ratio in rows:
        print(
            f"| {label} | {beam} | {sources:,} | {s_rate:,.1f} | {new:,} | {n_rate:,.1f} | "
            f"{p_rate:,.0f} | {ratio:.1f}x |"
        )


if __name__ == "__main__":
    main()
