"""Whose files in /dev/shm are whose, and how much room the slots may take (issue 65).

A ``--workers`` run keeps files in /dev/shm: its shared-memory slots (:mod:`rescorer.io.shared`)
and the semaphores of its pool's queues. When the run ends they are unlinked, and when its
main process alone is killed, multiprocessing's resource tracker unlinks them. But a SIGKILL
to the whole process group (Slurm at a job's time limit) kills the tracker too: each run left
7-8 slots and 6 semaphores behind, and a node that runs many array tasks filled its /dev/shm.

So every name a process makes there begins with its :class:`Owner`'s prefix,
``rescorer-PID-RANDOM``, and the file ``/dev/shm/PREFIX.lock``, locked (``flock``) while the
process lives, says whether it still does: the kernel lets a lock go when its holder dies,
however it dies. A later run (:func:`remove_dead`) removes the files of every prefix whose lock
it can take. A lock, not the pid: a pid is reused, and one seen from another pid namespace
(containers sharing the host's /dev/shm) says nothing. No torch here.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import itertools
import os
import re
import secrets
from collections.abc import Iterator

SHM = "/dev/shm"
_LEFT = re.compile(r"(?:sem\.)?(?P<prefix>rescorer-\d+-[0-9a-f]{8})(?:-[^/]+|\.lock)")


class Owner:
    """This process's prefix of names in ``folder``, and its lock there (module docstring).
    Raises OSError where ``folder`` refuses the lock file (read-only, full, out of inodes)."""

    def __init__(self, folder: str = SHM) -> None:
        while True:
            prefix = f"rescorer-{os.getpid()}-{secrets.token_hex(4)}"
            path = os.path.join(folder, f"{prefix}.lock")
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
            fcntl.flock(fd, fcntl.LOCK_EX)  # a cleaner that took it first lets go at once
            with contextlib.suppress(FileNotFoundError):
                if os.stat(path).st_ino == os.fstat(fd).st_ino:
                    break
            os.close(fd)  # taken for a dead run's and removed (remove_dead): another name
        self.prefix, self.path, self._fd, self._pid = prefix, path, fd, os.getpid()
        self._serial = itertools.count()

    def name(self) -> str:
        """A new name of this owner's: ``PREFIX-N``."""
        return f"{self.prefix}-{next(self._serial)}"

    def release(self) -> None:
        """The lock file removed and let go (at exit: the names made are unlinked by then)."""
        if os.getpid() != self._pid:  # a forked child's copy: the parent's lock stays
            return
        with contextlib.suppress(OSError):
            os.unlink(self.path)
        with contextlib.suppress(OSError):
            os.close(self._fd)


_owner: Owner | None = None


def owner() -> Owner | None:
    """This process's :class:`Owner` in /dev/shm, made on first use; None where there is no
    /dev/shm folder (macOS: names are not files there, and none can be found later). Raises
    OSError where /dev/shm refuses the lock file."""
    global _owner
    if _owner is None and os.path.isdir(SHM):
        _owner = Owner()
        atexit.register(_owner.release)
    return _owner


def _forget_owner() -> None:
    global _owner
    _owner = None  # a forked child makes its own


os.register_at_fork(after_in_child=_forget_owner)


@contextlib.contextmanager
def semaphores_named() -> Iterator[None]:
    """The semaphores multiprocessing makes meanwhile (a pool's queues' locks) named after this
    process's :class:`Owner`: ``/dev/shm/sem.PREFIX-...``. multiprocessing's own names begin
    with ``mp`` in every process, and joblib (loky), once imported, replaces them by
    ``loky-PID-...`` for every caller, so the name maker itself is replaced meanwhile. Raises
    OSError where /dev/shm refuses the lock file, as it would refuse the semaphores."""
    found = owner()
    try:
        from multiprocessing import synchronize
    except ImportError:  # no sem_open: no semaphores to name
        found = None
    if found is None:
        yield
        return
    before = synchronize.SemLock.__dict__["_make_name"]
    prefix = found.prefix

    def make_name() -> str:
        return f"/{prefix}-s{next(synchronize.SemLock._rand)}"  # type: ignore[attr-defined]

    synchronize.SemLock._make_name = staticmethod(make_name)  # type: ignore[attr-defined]
    try:
        yield
    finally:
        synchronize.SemLock._make_name = before  # type: ignore[attr-defined]


def remove_dead(folder: str = SHM) -> list[str]:
    """The files in ``folder`` of every owner that is gone (its lock free), removed; their
    names. What it cannot remove (another user's) stays."""
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    owners: dict[str, list[str]] = {}
    for name in names:
        if found := _LEFT.fullmatch(name):
            owners.setdefault(found["prefix"], []).append(name)
    removed = []
    for prefix, files in owners.items():
        lock = f"{prefix}.lock"
        if lock not in files:  # no lock to ask: its owner may live
            continue
        try:
            fd = os.open(os.path.join(folder, lock), os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # held: the owner lives
            os.close(fd)
            continue
        for name in sorted(files, key=lambda n: n == lock):  # the lock file last
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(folder, name))
                removed.append(name)
        os.close(fd)
    return removed


def shm_room() -> str:
    """/dev/shm's room in words, to follow a reason: ``", 12 MiB free in /dev/shm"`` (``", 0
    MiB, 0 files free"`` where no inode is left either), or "" where it cannot be read."""
    try:
        st = os.statvfs(SHM)
    except OSError:
        return ""
    files = "" if st.f_favail or not st.f_files else ", 0 files"
    return f", {st.f_bavail * st.f_frsize / (1 << 20):,.0f} MiB{files} free in /dev/shm"


def free_memory(
    meminfo: str = "/proc/meminfo",
    cgroup_root: str = "/sys/fs/cgroup",
    proc_cgroup: str = "/proc/self/cgroup",
    shm: str = SHM,
) -> int | None:
    """The bytes of shared memory this process could still take: the least of the machine's
    available memory (MemAvailable), the room under its cgroup's memory limits, which a tmpfs
    page counts against (v2: its own cgroup's and its ancestors'; v1: its own and the root's, a
    container's own), and /dev/shm's free space (a tmpfs may be sized larger than the memory);
    None where none of them is known."""
    found: list[int] = []
    with contextlib.suppress(OSError, ValueError, StopIteration):
        with open(meminfo, encoding="ascii") as f:
            line = next(ln for ln in f if ln.startswith("MemAvailable:"))
        found.append(int(line.split()[1]) * 1024)
    found += _cgroup_room(cgroup_root, proc_cgroup)
    with contextlib.suppress(OSError):
        st = os.statvfs(shm)
        found.append(st.f_bavail * st.f_frsize)
    return min(found) if found else None


def _cgroup_room(root: str, proc_cgroup: str) -> list[int]:
    """limit - usage for each memory limit over this process's cgroup."""
    try:
        with open(proc_cgroup, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    pairs = []
    for line in lines:
        number, controllers, path = [*line.split(":", 2), "", ""][:3]
        if number == "0" and controllers == "":  # v2: every level up to the root
            parts = [p for p in path.split("/") if p]
            for depth in range(len(parts), -1, -1):
                folder = os.path.join(root, *parts[:depth])
                pairs.append((f"{folder}/memory.max", f"{folder}/memory.current"))
        elif "memory" in controllers.split(","):  # v1: its own, and the root (a container's)
            for folder in (os.path.join(root, "memory", path.lstrip("/")), f"{root}/memory"):
                pairs.append((f"{folder}/memory.limit_in_bytes", f"{folder}/memory.usage_in_bytes"))
    room = []
    for limit_file, usage_file in pairs:
        with contextlib.suppress(OSError, ValueError):
            with open(limit_file, encoding="ascii") as f:
                limit = f.read().strip()
            if limit == "max" or int(limit) >= 1 << 60:  # no limit (v1 says so with 2^63)
                continue
            with open(usage_file, encoding="ascii") as f:
                room.append(max(0, int(limit) - int(f.read().strip())))
    return room
