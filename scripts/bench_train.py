"""Training throughput (pairs/s) of the paper-size model on real phrase pairs.

Reads the table once, keeps every K-th line (a spread of real pairs, about --pairs of them),
builds the shortlists from those, then times --updates Adadelta updates of --batch-size random
pairs after --warmup untimed ones, for each --precision: the same ``train_step`` as
``rescorer train`` (forward, backward, clip, optimiser). Prints one line per precision and,
with --json, a JSON record.

    python scripts/bench_train.py                        # paper config, bf16 and fp32, CPU
    python scripts/bench_train.py --hidden-size 256 --device cuda --updates 200
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from datetime import datetime, timezone

import numpy as np
import torch
from benchlib import cpu_name

from rescorer.batching import PairArraysBuilder, epoch_batches
from rescorer.device import resolve_device
from rescorer.io.table import read_table, split_tokens
from rescorer.model.encdec import EncoderDecoder, ModelConfig, count_parameters, init_weights_
from rescorer.train.loop import train_step
from rescorer.vocab import build_vocabs

DEFAULT_TABLE = "../shared/data/en-fr/phrase-table.gz"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--table", default=DEFAULT_TABLE)
    parser.add_argument("--pairs", type=int, default=20000, help="real pairs to sample")
    parser.add_argument("--hidden-size", type=int, default=1000)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--updates", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--precision", nargs="+", default=["bf16", "fp32"])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    lines = sum(1 for _ in read_table(args.table))
    step = max(lines // args.pairs, 1)
    entries = [(e.src, e.tgt) for e in read_table(args.table) if e.lineno % step == 0]
    src_vocab, tgt_vocab = build_vocabs(entries, 15000, 15000)
    builder = PairArraysBuilder()
    for src, tgt in entries:
        builder.add(
            src_vocab.encode_eos(split_tokens(src)), tgt_vocab.encode_eos(split_tokens(tgt))
        )
    pairs = builder.build()
    lengths = np.maximum(pairs.src_lens, pairs.tgt_lens)
    batches = epoch_batches(lengths, args.batch_size, seed=1, epoch=0)
    device = resolve_device(args.device)
    config = ModelConfig(hidden_size=args.hidden_size)
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    print(
        f"{len(pairs):,} real pairs (every {step}th line of {args.table}; mean source"
        f" {pairs.src_lens.mean() - 1:.2f}, target {pairs.tgt_lens.mean() - 1:.2f} words + EOS);"
        f" {device}, {torch.get_num_threads()} threads, torch {torch.__version__}",
        file=sys.stderr,
    )
    for precision in args.precision:
        torch.manual_seed(0)
        model = EncoderDecoder(config)
        init_weights_(model, torch.Generator().manual_seed(0))
        model.to(device).train()
        optim = torch.optim.Adadelta(model.parameters(), lr=1.0, rho=0.95, eps=1e-6)
        n_pairs = n_tokens = 0
        for i in range(args.warmup + args.updates):
            if i == args.warmup:
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                start = time.perf_counter()
                n_pairs = n_tokens = 0
            batch = pairs.batch(batches[i % len(batches)], device)
            train_step(model, optim, batch, precision, clip_norm=1.0)
            n_pairs += batch.num_pairs
            n_tokens += batch.num_tokens
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        seconds = time.perf_counter() - start
        record = {
            "benchmark": "train",
            "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "commit": commit,
            "device": str(device),
            "cpu": cpu_name(),
            "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
            "threads": torch.get_num_threads(),
            "precision": precision,
            "hidden_size": args.hidden_size,
            "parameters": count_parameters(model),
            "batch_size": args.batch_size,
            "updates": args.updates,
            "pairs_per_s": n_pairs / seconds,
            "target_tokens_per_s": n_tokens / seconds,
            "ms_per_update": 1000 * seconds / args.updates,
        }
        print(
            f"{precision}: {record['pairs_per_s']:,.0f} pairs/s,"
            f" {record['ms_per_update']:.0f} ms/update (H={args.hidden_size},"
            f" {record['parameters']:,} parameters, batch {args.batch_size})"
        )
        if args.json:
            print(json.dumps(record))


if __name__ == "__main__":
    main()
