#!/usr/bin/env python3
"""Train one model across sessions and keep a copy of its folder at given amounts of training.

The learning curve of Table 1's second edition (EXPERIMENTS.md) needs the same model at about
1 h, 3 h and 6 h of training. ``rescorer train --max-time`` budgets one invocation, data loading
included, and a run may be interrupted (Ctrl-C, SIGTERM, the end of a session) and resumed any
number of times: a SIGINT, SIGTERM or SIGHUP sent to this script reaches the training, which
saves its state and stops, and this script then stops too. This script reads the training
time already spent from the model folder's resume state, runs ``rescorer train`` (with
``--resume`` once a state exists) up to the next milestone, and copies the folder to
``MODEL_DIR@<milestone>`` when it is reached. Run the same command again to continue; it does
nothing once the last milestone is reached.

    python scripts/train_snapshots.py runs/curve/fwd --table ../shared/data/en-fr/phrase-table.gz \\
        --snapshot 1h --snapshot 3h --snapshot 6h -- --hidden-size 256 --seed 1

Everything after ``--`` goes to ``rescorer train`` as it is.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch

from rescorer.constants import TRAIN_STATE_FILE, WEIGHTS_FILE
from rescorer.durations import parse_duration
from rescorer.errors import RescorerError

OVERHEAD_S = 180.0  # vocabularies, encoding and compilation before the first update
TOLERANCE_S = 120.0  # a milestone counts as reached this close to it


def train_seconds(model_dir: Path) -> float:
    """Seconds of training recorded in MODEL_DIR's resume state (0 before the first save)."""
    state_path = model_dir / TRAIN_STATE_FILE
    if not state_path.exists():
        return 0.0
    state = torch.load(state_path, map_location="cpu", weights_only=True)
    return float(state["run"]["train_seconds"])


def snapshot_dir(model_dir: Path, label: str) -> Path:
    return model_dir.with_name(f"{model_dir.name}@{label}")


def duration(text: str) -> str:
    """An argparse type: ``text`` if it is a duration (a usage error, exit 2, otherwise)."""
    try:
        parse_duration(text)
    except RescorerError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


# What a signal to this script becomes for the training: a hangup (the terminal closed, the
# ssh connection dropped) stops it as SIGTERM does, its state saved; an ignored SIGHUP (nohup)
# stays ignored.
FORWARDED = {
    signal.SIGINT: signal.SIGINT,
    signal.SIGTERM: signal.SIGTERM,
    signal.SIGHUP: signal.SIGTERM,
}


def run_training(cmd: list[str]) -> tuple[int, int]:
    """Run ``cmd`` (rescorer train) in a process group of its own; a SIGINT, SIGTERM or SIGHUP
    sent to this script is passed on to it (FORWARDED) once per signal received (one: it
    finishes its update, saves its state and stops; a second: it stops at once), and this
    waits for it. Returns its exit status and the signal this script received (0 if none).

    A Ctrl-C in a terminal (sent to the foreground group) reaches the training once, through
    this script: the two never both receive it. (A signal sent to both at once, as systemd's
    KillMode=control-group does, reaches it twice: it stops at once, from its last saved state,
    at most ``--valid-every`` updates back.) The handlers are in place before the training
    starts, and a signal received before it exists is passed on once it does; an error here
    ends it too: none is left running. The session stays this script's, so the scheduler's
    group (autogroup, where ``echo 19 > /proc/PID/autogroup`` makes a background job yield)
    is the same."""
    received = 0
    child: list[subprocess.Popen[bytes]] = []
    early: list[int] = []

    def forward(signum: int, _frame: object) -> None:
        nonlocal received
        received = received or signum
        if not child:
            early.append(signum)
        elif child[0].poll() is None:
            child[0].send_signal(FORWARDED[signal.Signals(signum)])

    caught = [s for s in FORWARDED if s != signal.SIGHUP or signal.getsignal(s) != signal.SIG_IGN]
    before = {sig: signal.signal(sig, forward) for sig in caught}
    own_group: dict[str, Any] = (
        {"process_group": 0} if sys.version_info >= (3, 11) else {"preexec_fn": os.setpgrp}
    )
    try:
        child.append(subprocess.Popen(cmd, **own_group))
        proc = child[0]
        for signum in early:
            proc.send_signal(FORWARDED[signal.Signals(signum)])
        try:
            rc = proc.wait()
        except BaseException:
            proc.terminate()  # it saves its state and stops
            proc.wait()
            raise
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
    return rc, received


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], epilog="-- ARGS: rescorer train's options"
    )
    parser.add_argument("model_dir", type=Path)
    parser.add_argument("--table", required=True, help="the phrase table to train on")
    parser.add_argument(
        "--snapshot", action="append", required=True, type=duration, help="e.g. 1h (repeatable)"
    )
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    args = parser.parse_args(argv[:cut])
    train_args = argv[cut + 1 :]
    marks = sorted((parse_duration(s), s) for s in args.snapshot)
    model_dir: Path = args.model_dir
    while True:
        done = train_seconds(model_dir)
        for seconds, label in marks:
            target = snapshot_dir(model_dir, label)
            if done >= seconds - TOLERANCE_S and not target.exists():
                tmp = target.with_name(target.name + ".tmp")
                shutil.rmtree(tmp, ignore_errors=True)
                shutil.copytree(model_dir, tmp, ignore=shutil.ignore_patterns(TRAIN_STATE_FILE))
                tmp.rename(target)
                print(f"train_snapshots: {target} at {done / 3600:.2f} h of training", flush=True)
        pending = [(s, lab) for s, lab in marks if done < s - TOLERANCE_S]
        if not pending:
            print(f"train_snapshots: {model_dir}: every milestone reached ({done / 3600:.2f} h)")
            return 0
        budget = pending[0][0] - done + OVERHEAD_S
        cmd = ["rescorer", "train", args.table, "-o", str(model_dir)]
        if (model_dir / TRAIN_STATE_FILE).exists() or (model_dir / WEIGHTS_FILE).exists():
            cmd.append("--resume")
        cmd += ["--max-time", f"{int(budget)}s", "--patience", "0", *train_args]
        print("train_snapshots: " + " ".join(cmd), flush=True)
        rc, received = run_training(cmd)
        if received:
            name = signal.Signals(received).name
            print(f"train_snapshots: {name}: the training stopped (exit {rc}); run this again")
            return 128 + received
        if rc != 0:
            print(f"train_snapshots: rescorer train exited {rc}; run this again to continue")
            return rc
        if train_seconds(model_dir) <= done:
            print("train_snapshots: no training time was added; stopping")
            return 1


if __name__ == "__main__":
    sys.exit(main())
