"""Faults for tests to meet for real: a disk that is full after a few bytes.

A tmpfs of that size where this process may mount one (root on Linux: the real ENOSPC of a
full disk); elsewhere (CI as a user, macOS) a plain folder and a per-process file size limit
(``ulimit -f``, RLIMIT_FSIZE) for the command: a write past the limit fails with EFBIG, which
rescorer meets like a full disk (rescorer.io.outputs.DISK_ERRNOS). Both act in the kernel, under
every writer (ours, torch's, safetensors'), with no hook in the code under test.
"""

from __future__ import annotations

import contextlib
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass
class SmallDisk:
    folder: Path
    limit: int
    tmpfs: bool

    def preexec(self) -> Callable[[], None] | None:
        """What a command on this disk runs before exec (None on a tmpfs)."""
        if self.tmpfs:
            return None
        limit = self.limit

        def set_limit() -> None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

        return set_limit

    def grow(self, limit: int) -> None:
        """Free space: the disk (or the file size limit) becomes ``limit`` bytes."""
        if self.tmpfs:
            subprocess.run(["mount", "-o", f"remount,size={limit}", str(self.folder)], check=True)
        self.limit = limit


def _can_mount() -> bool:
    return sys.platform == "linux" and os.geteuid() == 0 and shutil.which("mount") is not None


@contextmanager
def small_disk(parent: Path, limit: int) -> Iterator[SmallDisk]:
    """A folder under ``parent`` whose disk is full after about ``limit`` bytes (see above)."""
    folder = parent / "small-disk"
    folder.mkdir()
    mounted = False
    if _can_mount():
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={limit}", "tmpfs", str(folder)],
            capture_output=True,
        )
        mounted = done.returncode == 0  # a container may refuse: fall back to the limit
    try:
        yield SmallDisk(folder, limit, mounted)
    finally:
        if mounted:
            subprocess.run(["umount", "-l", str(folder)], check=False)


def run(
    args: list[str], disk: SmallDisk | None = None, timeout: float = 120, **kwargs: object
) -> subprocess.CompletedProcess[str]:
    """``python -m rescorer ARGS`` (on ``disk`` if given), its output captured as text."""
    if disk is not None:
        kwargs["preexec_fn"] = disk.preexec()
    return subprocess.run(  # type: ignore[call-overload, no-any-return]
        [sys.executable, "-m", "rescorer", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        **kwargs,
    )


def few_threads(threads: int = 8) -> Callable[[], None]:
    """``preexec_fn``: the child may hold address space for about ``threads`` threads beyond
    what a run needs (RLIMIT_AS: each thread takes a stack of 8 MiB and an allocator arena of
    64 MiB of it). A child that tried to start 100,000 threads fails within a second there,
    where it would starve the machine of processes for minutes; RLIMIT_NPROC would bound it
    too, but root ignores it."""

    def limit() -> None:
        space = (4 << 30) + threads * (96 << 20)  # torch with CUDA maps GiBs
        resource.setrlimit(resource.RLIMIT_AS, (space, space))

    return limit


def refused_threads() -> dict[str, str]:
    """An environment in which the operating system refuses every thread libgomp starts, as a
    low process limit or a full pids cgroup would: libgomp asks for stacks of 1,000 GiB
    (OMP_STACKSIZE), which no machine maps (pthread_create fails with EAGAIN). Unlike
    RLIMIT_NPROC, root meets it too. Two compute threads unless the caller changes it."""
    return {**os.environ, "OMP_STACKSIZE": "1000G", "OMP_NUM_THREADS": "2"}


# ------------------------------------------------------------------------------ hang guards
class HangError(AssertionError):
    """A command that waited on nothing that would come (no CPU time, nothing runnable) for
    ``quiet`` seconds, or spent more CPU time than it may."""


@dataclass
class TreeState:
    """A process and its descendants at one moment."""

    cpu_ticks: int  # user and system time of every thread, in clock ticks
    busy: bool  # some thread runs, waits for a CPU (R) or for the disk (D)
    waits: list[str]  # "pid 1234 S pipe_read" per sleeping thread: what it waits in


def _stat_fields(path: str) -> list[str] | None:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            text = f.read()
    except OSError:  # gone meanwhile
        return None
    return text[text.rfind(")") + 2 :].split()  # after "pid (comm) ": state, ppid, ...


def descendants(pid: int) -> list[int]:
    """``pid`` and every process below it."""
    parents: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            fields = _stat_fields(f"/proc/{name}/stat")
            if fields is not None:
                parents.setdefault(int(fields[1]), []).append(int(name))
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo.extend(parents.get(current, []))
    return found


def tree_state(pid: int) -> TreeState:
    """What ``pid``'s processes and threads are doing (from /proc: Linux)."""
    ticks, busy, waits = 0, False, []
    for process in descendants(pid):
        try:
            tasks = os.listdir(f"/proc/{process}/task")
        except OSError:
            continue
        for task in tasks:
            fields = _stat_fields(f"/proc/{process}/task/{task}/stat")
            if fields is None:
                continue
            ticks += int(fields[11]) + int(fields[12])  # utime, stime
            if fields[0] in "RD":
                busy = True
            else:
                try:
                    with open(f"/proc/{process}/task/{task}/wchan", encoding="ascii") as f:
                        wchan = f.read().strip()
                except OSError:
                    wchan = "?"
                waits.append(f"pid {process} {fields[0]} {wchan}")
    return TreeState(ticks, busy, waits)


def run_unless_hung(
    args: list[str],
    *,
    quiet: float = 30,
    cpu_limit: float = 300,
    wall_limit: float = 3600,
    python: bool = True,
    **kwargs: Any,
) -> subprocess.CompletedProcess[str]:
    """``python -m rescorer ARGS`` (``ARGS`` itself with ``python=False``), its output captured
    as text, raising :class:`HangError` for a hang, not for slowness: a process (with its
    children) that used no CPU time and had no thread running, runnable or in disk wait for
    ``quiet`` seconds is blocked on something that will not come (a FIFO's writer, a lock); one
    that used more than ``cpu_limit`` seconds of CPU runs away. A run starved by a loaded
    machine uses little CPU but stays runnable, so it is waited for however long it takes (up
    to ``wall_limit``, the last resort). The process tree is killed on a hang."""
    argv = [sys.executable, "-m", "rescorer", *args] if python else list(args)
    kwargs.setdefault("start_new_session", True)
    ticks_per_second = os.sysconf("SC_CLK_TCK")
    with subprocess.Popen(
        argv,
        stdin=kwargs.pop("stdin", subprocess.DEVNULL),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kwargs,
    ) as proc:
        start = last_progress = time.monotonic()
        last_ticks = -1
        while True:
            try:
                stdout, stderr = proc.communicate(timeout=0.5)  # drains the pipes meanwhile
                return subprocess.CompletedProcess(argv, proc.returncode, stdout, stderr)
            except subprocess.TimeoutExpired:
                pass
            state, now = tree_state(proc.pid), time.monotonic()
            if state.busy or state.cpu_ticks != last_ticks:
                last_progress, last_ticks = now, state.cpu_ticks
            problem = ""
            if now - last_progress > quiet:
                problem = f"hung: no CPU time and nothing runnable for {quiet:g} s"
            elif state.cpu_ticks / ticks_per_second > cpu_limit:
                problem = f"ran away: over {cpu_limit:g} s of CPU time"
            elif now - start > wall_limit:
                problem = f"still running after {wall_limit:g} s"
            if problem:
                waits = "; ".join(state.waits[:8])
                _kill_tree(proc)
                raise HangError(f"{' '.join(argv)}: {problem} (waiting in: {waits})")


def _kill_tree(proc: subprocess.Popen[str]) -> None:
    """SIGKILL to the process group of ``proc`` (its own session) and to ``proc``."""
    with contextlib.suppress(OSError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(OSError):
        proc.kill()
    proc.communicate()


# ----------------------------------------------------------------------- a private /dev/shm
SHM_KINDS = {  # the tmpfs mounted on /dev/shm, then what fills it
    "read-only": ("ro,size=1m", ""),
    "full": ("size=64k", "head -c 1m /dev/zero > /dev/shm/filler 2>/dev/null; "),
    "out of inodes": ("nr_inodes=1,size=1m", ""),  # the root folder takes the one inode
}


def private_dev_shm(kind: str) -> list[str] | str:
    """The argv prefix that runs a command with a /dev/shm of its own of ``kind`` (SHM_KINDS):
    a tmpfs mounted in a new mount namespace (``unshare -m``, root on Linux), which no other
    process sees; or, where none can be made, the reason."""
    if not (_can_mount() and shutil.which("unshare")):
        return "a private /dev/shm needs root, mount and unshare (Linux)"
    options, fill = SHM_KINDS[kind]
    script = f'mount -t tmpfs -o {options} tmpfs /dev/shm && {fill}exec "$@"'
    prefix = ["unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh"]
    probe = subprocess.run([*prefix, "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"no private /dev/shm here (unshare -m, mount): {probe.stderr.strip()}"
    return prefix
