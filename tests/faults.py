"""Faults for tests to meet for real: a disk that is full after a few bytes.

A tmpfs of that size where this process may mount one (root on Linux: the real ENOSPC of a
full disk); elsewhere (CI as a user, macOS) a plain folder and a per-process file size limit
(``ulimit -f``, RLIMIT_FSIZE) for the command: a write past the limit fails with EFBIG, which
rescorer meets like a full disk (rescorer.io.outputs.DISK_ERRNOS). Both act in the kernel, under
every writer (ours, torch's, safetensors'), with no hook in the code under test.
"""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path


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
        space = (2 << 30) + threads * (96 << 20)
        resource.setrlimit(resource.RLIMIT_AS, (space, space))

    return limit


def refused_threads() -> dict[str, str]:
    """An environment in which the operating system refuses every thread libgomp starts, as a
    low process limit or a full pids cgroup would: libgomp asks for stacks of 1,000 GiB
    (OMP_STACKSIZE), which no machine maps (pthread_create fails with EAGAIN). Unlike
    RLIMIT_NPROC, root meets it too. Two compute threads unless the caller changes it."""
    return {**os.environ, "OMP_STACKSIZE": "1000G", "OMP_NUM_THREADS": "2"}
