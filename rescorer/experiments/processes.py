"""Ending a command with every process it started: what a driver does when it is interrupted
(Ctrl-C, SIGTERM) or one of its chains fails, so that no command outlives the run (a
mert-moses.pl's decoder, a ``dpkg -x``'s ``tar``) and a re-run finds nothing writing in its
folders."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

# Seconds an interrupted command gets to end by itself (a Ctrl-C at a terminal reaches it too),
# then to end on SIGTERM, before it and what it started are killed.
END_GRACE = (2.0, 20.0)


def run_captured(argv: Sequence[str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``argv`` run to its end, its stdout and stderr captured (text). Interrupted (Ctrl-C,
    SIGTERM raised as :class:`KeyboardInterrupt`), the command and every process it started
    (``dpkg -x``'s ``dpkg-deb`` and ``tar``, say) are ended by :func:`end_command` before the
    interruption goes on: none is left writing where a re-run works. OSError when it cannot
    start."""
    proc = subprocess.Popen(
        list(argv),
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        out, err = proc.communicate()
    except BaseException:  # no command outlives the run
        end_command(proc)
        raise
    return subprocess.CompletedProcess(list(argv), proc.returncode, out, err)


def end_command(proc: subprocess.Popen[Any]) -> None:
    """End ``proc`` and every process it started (mert-moses.pl's decoder, say): a command
    that has not ended by itself within END_GRACE[0] seconds gets SIGTERM, as do its
    descendants (a rescorer command then removes its temporary files and exits 143), and
    whatever still runs END_GRACE[1] seconds later, SIGKILL."""
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(END_GRACE[0])
    tree = [*descendants(proc.pid), proc.pid] if proc.poll() is None else []
    for pid in tree:
        send(pid, signal.SIGTERM)
    try:
        proc.wait(END_GRACE[1])
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    for pid in tree[:-1]:  # the descendants: no longer ours to wait for
        send(pid, signal.SIGKILL)


def send(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signum)


def descendants(pid: int) -> list[int]:
    """The processes ``pid`` started, and theirs (from /proc; none known elsewhere)."""
    children: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile
        children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found
