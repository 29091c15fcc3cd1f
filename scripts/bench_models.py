#!/usr/bin/env python3
"""Scoring with two models (forward and inverse, one ``score`` run) against one, same run.

Issue 24, item 5. Each run is one ``rescorer score`` child process on the first --lines lines
of a table; its wall seconds and its peak resident set size (the kernel's ``wait4`` accounting
of that child) are recorded. The two configurations alternate, --repeats times each, so a
machine that slows down part-way slows both; the medians and ranges are printed.

- ``one``: ``-m FWD``;
- ``two``: ``-m FWD -m INV`` (the inverse model's pairs grouped by target in each chunk).

Without --forward/--inverse both models are random, hidden --hidden-size, 15,000-word
shortlists (the paper's), made in a child (the parent loads no torch). ``--count`` prints
instead the inverse model's work on the table with and without grouping by target, chunk by
chunk as ``score`` cuts it: distinct conditioning-phrase tokens, encoder steps and decoder
positions (prefix-tree nodes), as BENCHMARKS.md counts them for the forward model.

    python scripts/bench_models.py [--table T] [--lines 20000] [--repeats 3] [--count]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from benchlib import cpu_name, git_commit, write_slice

from rescorer.cli.ranges import MAX_CHUNK_BYTES, Arg, RangeHelp

DEFAULT_TABLE = os.path.join(
    os.path.dirname(__file__), "..", "..", "shared", "data", "en-fr", "phrase-table.gz"
)


def make_model(table: str, hidden_size: int, folder: str, direction: str) -> None:
    """A random model of ``hidden_size`` with 15,000-word shortlists of its own sides."""
    import torch

    from rescorer.io.table import read_table
    from rescorer.model.checkpoint import save_model_dir
    from rescorer.model.encdec import EncoderDecoder, ModelConfig, init_weights_
    from rescorer.vocab import build_vocabs

    pairs = ((e.src, e.tgt) for e in read_table(table))
    if direction == "inverse":
        pairs = ((t, s) for s, t in pairs)
    src_vocab, tgt_vocab = build_vocabs(pairs, 15000, 15000)
    torch.manual_seed(0 if direction == "forward" else 1)
    model = EncoderDecoder(ModelConfig(hidden_size=hidden_size))
    init_weights_(model)
    save_model_dir(
        folder, model, src_vocab, tgt_vocab, {"made_by": "bench_models.py"}, direction=direction
    )


def count_work(table: str, inverse: str, chunk_bytes: int) -> dict[str, dict[str, int]]:
    """The inverse model's work on ``table`` grouped by target and not, chunk by chunk."""
    import numpy as np

    from rescorer.io.chunks import iter_chunks
    from rescorer.io.columns import split_columns
    from rescorer.io.inputs import open_binary
    from rescorer.score.pairs import encode_inverse, prefix_tree
    from rescorer.vocab import Vocab

    src_vocab = Vocab.load(os.path.join(inverse, "vocab.src.json"))
    tgt_vocab = Vocab.load(os.path.join(inverse, "vocab.tgt.json"))
    work = {g: {"pairs": 0, "source_tokens": 0, "encoder_steps": 0, "decoder_positions": 0}
            for g in ("grouped", "line order")}  # fmt: skip
    with open_binary(table) as stream:
        for chunk in iter_chunks(stream, chunk_bytes):
            columns = split_columns(chunk.data, None)
            if columns is None:
                raise SystemExit(f"{table}: a chunk with an unusual line; count on a clean table")
            for name, group in (("grouped", True), ("line order", False)):
                p, _ = encode_inverse(src_vocab, tgt_vocab, columns.src, columns.tgt, group)
                w = work[name]
                w["pairs"] += p.num_pairs
                w["source_tokens"] += int(np.diff(p.src_off).sum())
                w["encoder_steps"] += sum(
                    len(lv.tokens) for lv in prefix_tree(p.src_ids, p.src_off)
                )
                # the decoder's tree: [conditioning phrase j, y_1..y_{T-1}] (score/trees.py)
                seq = np.empty(len(p.tgt_ids), dtype=np.int64)
                seq[1:] = p.tgt_ids[:-1]
                seq[p.tgt_off[:-1]] = tgt_vocab.num_rows + p.pair_src
                w["decoder_positions"] += sum(len(lv.tokens) for lv in prefix_tree(seq, p.tgt_off))
    return work


def peak_rss(cmd: list[str]) -> tuple[float, float]:
    """(peak RSS in MiB, wall seconds) of one child process; raises if it fails."""
    t = time.perf_counter()
    proc = subprocess.Popen(cmd)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - t
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(cmd)}: exit {os.waitstatus_to_exitcode(status)}")
    return usage.ru_maxrss / 1024, seconds


def main() -> None:
    parser = argparse.ArgumentParser(formatter_class=RangeHelp, description=__doc__.splitlines()[0])
    parser.add_argument("--table", default=DEFAULT_TABLE)
    parser.add_argument("--lines", type=Arg(1, 10**8), default=20000)
    parser.add_argument("--forward", help="A forward model directory (default: random).")
    parser.add_argument("--inverse", help="An inverse model directory (default: random).")
    parser.add_argument("--hidden-size", type=Arg(1, 1 << 14), default=256)
    parser.add_argument("--repeats", type=Arg(1, 1000), default=3)
    parser.add_argument("--chunk-bytes", type=Arg(1, MAX_CHUNK_BYTES), default=1 << 20)
    parser.add_argument("--count", action="store_true", help="Count the inverse model's work.")
    parser.add_argument("--score-flags", default="", help="More flags for rescorer score.")
    parser.add_argument(
        "--make-model", nargs=2, metavar=("DIR", "DIRECTION"), help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    if args.make_model:
        make_model(args.table, args.hidden_size, *args.make_model)
        return
    with tempfile.TemporaryDirectory(prefix="bench-models-") as tmp:
        table = os.path.join(tmp, "slice.gz")
        lines = write_slice(args.table, args.lines, table)
        models = {}
        for direction, given in (("forward", args.forward), ("inverse", args.inverse)):
            if given is None:
                given = os.path.join(tmp, direction)
                subprocess.run(
                    [sys.executable, __file__, "--table", table, "--hidden-size",
                     str(args.hidden_size), "--make-model", given, direction],
                    check=True,
                )  # fmt: skip
            models[direction] = given
        print(f"# {lines:,} lines of {args.table}; commit {git_commit()}; {cpu_name()}")
        if args.count:
            work = count_work(table, models["inverse"], args.chunk_bytes)
            print(json.dumps(work, indent=1))
            return
        base = [sys.executable, "-m", "rescorer", "score", table, "-q",
                "--chunk-bytes", str(args.chunk_bytes), *args.score_flags.split()]  # fmt: skip
        runs = {
            "one": ["-m", models["forward"]],
            "two": ["-m", models["forward"], "-m", models["inverse"]],
        }
        figures: dict[str, list[tuple[float, float]]] = {name: [] for name in runs}
        for repeat in range(args.repeats):
            for name, flags in runs.items():  # alternating: one, two, one, two, ...
                out = os.path.join(tmp, f"{name}.gz")
                figures[name].append(peak_rss([*base, *flags, "-o", out]))
                rss, seconds = figures[name][-1]
                print(f"run {repeat + 1} {name}: {seconds:.2f} s, peak RSS {rss:,.0f} MiB")
        print("| models | median s | range s | pairs/s | median peak RSS MiB |")
        print("|---|---:|---:|---:|---:|")
        for name, values in figures.items():
            secs = [s for _, s in values]
            rss_values = [r for r, _ in values]
            med = statistics.median(secs)
            print(
                f"| {name} | {med:.2f} | {min(secs):.2f}-{max(secs):.2f} | {lines / med:,.0f} | "
                f"{statistics.median(rss_values):,.0f} |"
            )


if __name__ == "__main__":
    main()
