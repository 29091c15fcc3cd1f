#!/usr/bin/env python3
"""Byte-identity across a refactoring: the same commands on the code of two commits, sha256
of every output compared.

    python scripts/check_identity.py BEFORE [AFTER]

BEFORE and AFTER are git revisions (AFTER: the working tree when left out). Each side's code is
exported with ``git archive`` (the working tree is used as it is) and run with PYTHONPATH set to
it, in the same absolute folder (so recorded paths agree), on CPU, on the real slices in
tests/data:

- train: tiny sizes, fp32, 20 updates; and 10 updates, then ``--resume`` to 20;
- score (with the committed model tests/data/golden/model, so shard manifests name one model
  hash on both sides): default options, ``--word-penalty --column logp`` (plain text),
  ``--precision fp32 --workers 1``, a shard pair (small chunks), ``merge`` and the single run;
- score-nbest and rerank (1-best and ``--nbest-out``) with that model;
- filter (``--input``; ``--top-k`` with ``--weights``) and combine (``--lm``, ``--column``).

Files whose bytes differ are compared again without what a run records about itself: wall-clock
seconds and dates, the host, and the path of the interpreter's ``__main__`` (JSON, JSON lines
and torch ``.pt`` files); a ``.safetensors`` file as its parsed header and its tensor bytes (the
header's key order varies between two runs of one code). Prints one line per output; exit
status 1 when anything else differs.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"
# What a run records about itself (not about its output): dropped before comparing again.
VOLATILE = {"time", "date", "seconds", "train_seconds", "finished_utc", "host"}
TINY = [
    "--hidden-size", "8", "--embed-size", "6", "--maxout-units", "5", "--src-vocab-size", "200",
    "--tgt-vocab-size", "200", "--batch-size", "16", "--valid-every", "10",
    "--valid-fraction", "0.05", "-q", "--device", "cpu", "--precision", "fp32",
    "--compile", "no",
]  # fmt: skip
INPUTS = {
    "tiny.pt.gz": DATA / "tiny-system" / "phrase-table.gz",
    "tiny.ini": DATA / "tiny-system" / "moses.ini",
    "slice.pt.gz": DATA / "pt.en-fr.slice.gz",
    "filter-slice.pt.gz": DATA / "en-fr.filter-slice.pt.gz",
    "test6.en": DATA / "en-fr.test6.en",
    "real.ini": DATA / "en-fr.moses.ini",
    "tiny.arpa": DATA / "tiny.arpa",
    "seg.nbest": DATA / "nbest" / "tiny.test6.nbest-seg",
    "nbest.test6.en": DATA / "nbest" / "tiny.test6.en",
    "golden": DATA / "golden" / "model",
}
SCORE = ["-m", "golden", "--device", "cpu", "-q", "--compile", "no"]
INI = ["--weights", "tiny.ini", "--decoded-with", "tiny.ini"]
RERANK = ["rnn.nbest", *INI, "--weight", "RNN0=0.05"]
COMBINE = ["slice.pt.gz", "--weights", "real.ini", "--lm", "tiny.arpa"]
SHARDS = ["--chunk-bytes", "4096"]
COMMANDS: list[list[str]] = [
    ["train", "tiny.pt.gz", "-o", "model", *TINY, "--max-updates", "20"],
    ["train", "tiny.pt.gz", "-o", "model-resumed", *TINY, "--max-updates", "10"],
    ["train", "tiny.pt.gz", "-o", "model-resumed", *TINY, "--max-updates", "20", "--resume"],
    ["score", "slice.pt.gz", *SCORE, "-o", "scored.gz"],
    ["score", "slice.pt.gz", *SCORE, "--word-penalty", "--column", "logp", "-o", "scored-wp.txt"],
    ["score", "slice.pt.gz", *SCORE, "--precision", "fp32", "--workers", "1", "-o", "fp32.gz"],
    ["score", "slice.pt.gz", *SCORE, *SHARDS, "--shard", "1/2", "-o", "part1.gz"],
    ["score", "slice.pt.gz", *SCORE, *SHARDS, "--shard", "2/2", "-o", "part2.gz"],
    ["score", "slice.pt.gz", *SCORE, *SHARDS, "-o", "single.gz"],
    ["merge", "merged.gz", "part1.gz", "part2.gz", "-q"],
    ["score-nbest", "seg.nbest", "-m", "golden", "--input", "nbest.test6.en", "-o", "rnn.nbest"],
    ["rerank", *RERANK, "-o", "rerank.1best"],
    ["rerank", *RERANK, "--nbest-out", "-o", "rerank.nbest"],
    ["filter", "filter-slice.pt.gz", "--input", "test6.en", "-o", "filtered.gz"],
    ["filter", "slice.pt.gz", "--top-k", "2", "--weights", "real.ini", "--no-lm", "-o", "top2.gz"],
    ["combine", *COMBINE, "-o", "combined.gz"],
    ["combine", *COMBINE, "--column", "-o", "combined.txt"],
]


def export(rev: str | None, dest: Path) -> Path:
    """The code of ``rev`` (None: the working tree itself)."""
    if rev is None:
        return ROOT
    dest.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", rev], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return dest


def produce(code: Path, run: Path) -> None:
    """Every command of COMMANDS with ``code`` on PYTHONPATH, in ``run``."""
    run.mkdir()
    for name, path in INPUTS.items():
        (shutil.copytree if path.is_dir() else shutil.copyfile)(path, run / name)
    env = {**os.environ, "PYTHONPATH": str(code), "CUDA_VISIBLE_DEVICES": ""}
    where = subprocess.run(
        [sys.executable, "-c", "import rescorer; print(rescorer.__file__)"],
        env=env, cwd=run, check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    if not where.startswith(str(code)):
        sys.exit(f"check_identity: {code} is not the rescorer imported ({where})")
    for args in COMMANDS:
        proc = subprocess.run(
            [sys.executable, "-m", "rescorer", *args],
            env=env, cwd=run, capture_output=True, text=True,
        )  # fmt: skip
        if proc.returncode != 0:
            sys.exit(f"check_identity: rescorer {' '.join(args)} failed:\n{proc.stderr}")
    for name, path in INPUTS.items():
        (shutil.rmtree if path.is_dir() else os.unlink)(run / name)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def strip(value: Any) -> Any:
    """``value`` without VOLATILE keys and without the first command-line word."""
    if isinstance(value, dict):
        out = {k: strip(v) for k, v in value.items() if k not in VOLATILE}
        if isinstance(out.get("command_line"), list):
            out["command_line"] = out["command_line"][1:]
        return out
    if isinstance(value, list | tuple):
        return [strip(v) for v in value]
    return value


def normalised(path: Path) -> Any:
    if path.suffix == ".json":
        return strip(json.loads(path.read_text(encoding="utf-8")))
    if path.suffix == ".jsonl":
        return [strip(json.loads(line)) for line in path.read_text(encoding="utf-8").splitlines()]
    if path.suffix == ".safetensors":  # its header's key order varies from run to run
        header = int.from_bytes(path.read_bytes()[:8], "little")
        data = path.read_bytes()
        return (json.loads(data[8 : 8 + header]), data[8 + header :])
    if path.suffix == ".pt":
        import torch

        state = torch.load(path, map_location="cpu", weights_only=False)
        return _plain(strip(state))
    return None


def _plain(value: Any) -> Any:
    """Tensors as (dtype, shape, bytes), so ``==`` compares them exactly."""
    if hasattr(value, "numpy"):
        array = value.detach().cpu().contiguous()
        return (str(array.dtype), tuple(array.shape), array.view(-1).numpy().tobytes())
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def compare(before: Path, after: Path) -> bool:
    names = sorted(
        {str(p.relative_to(before)) for p in before.rglob("*") if p.is_file()}
        | {str(p.relative_to(after)) for p in after.rglob("*") if p.is_file()}
    )
    same = True
    for name in names:
        a, b = before / name, after / name
        if not (a.is_file() and b.is_file()):
            print(f"MISSING     {name}: only {'before' if a.is_file() else 'after'}")
            same = False
            continue
        ha, hb = sha256(a), sha256(b)
        if ha == hb:
            print(f"identical   {ha[:16]}  {name}")
        elif normalised(a) is not None and normalised(a) == normalised(b):
            print(f"same data   {ha[:8]}/{hb[:8]}  {name} (but for times, host, key order)")
        else:
            print(f"DIFFERENT   {ha[:8]}/{hb[:8]}  {name}")
            same = False
    return same


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("before", help="git revision of the code before")
    parser.add_argument("after", nargs="?", help="git revision after (default: working tree)")
    parser.add_argument("--keep", action="store_true", help="keep the outputs (printed)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="check-identity-"))
    try:
        for side, rev in (("before", args.before), ("after", args.after)):
            code = export(rev, work / f"code-{side}")
            produce(code, work / "run")  # one absolute path for both sides
            (work / "run").rename(work / side)
        same = compare(work / "before", work / "after")
    finally:
        if args.keep:
            print(f"outputs kept in {work}", file=sys.stderr)
        else:
            shutil.rmtree(work)
    print("all outputs identical" if same else "outputs DIFFER", file=sys.stderr)
    sys.exit(0 if same else 1)


if __name__ == "__main__":
    main()
