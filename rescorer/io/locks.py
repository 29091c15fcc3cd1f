"""An exclusive lock held by a process for as long as it lives: an flock on a named file with
the holder's pid in it. ``score``/``extend`` hold one beside OUT and one beside the
--skip-bad-lines file (:func:`take_run_lock`), the Table 1 and baseline drivers one in their
work folder; each says in its own words who holds it. No torch here."""

from __future__ import annotations

import contextlib
import fcntl
import os

from rescorer.errors import RescorerError
from rescorer.io.outputs import write_error


class LockHeldError(Exception):
    """Another process holds the lock: ``holder`` is the pid written in the file (or
    ``unknown``), ``what`` the words written after it (:func:`write_pid`), maybe empty."""

    def __init__(self, holder: str, what: str = "") -> None:
        super().__init__(holder)
        self.holder, self.what = holder, what


def take_pid_lock(path: str) -> int:
    """An exclusive flock on ``path`` (created if needed) as an open descriptor, which the
    caller keeps open while it holds the lock (the lock ends with it, even if killed) and
    writes its pid into (:func:`write_pid`). Raises :class:`LockHeldError`, or the OSError of
    opening ``path``.

    The lock is taken on the file the name holds *after* flock returns: a file that was
    removed (or replaced) between our open and our flock is a dead lock that the next run
    would not see, so we go round again on the file the name holds now."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            words = os.read(fd, 64).decode("ascii", "replace").split()
            os.close(fd)
            raise LockHeldError(words[0] if words else "unknown", " ".join(words[1:])) from None
        try:
            named = os.stat(path)
        except FileNotFoundError:
            named = None
        held = os.fstat(fd)
        if named is not None and (named.st_dev, named.st_ino) == (held.st_dev, held.st_ino):
            return fd
        os.close(fd)  # removed by the run that held it: try the name again


def write_pid(fd: int, what: str = "") -> None:
    """Our pid in the lock file ``fd``, then ``what`` holds it (ASCII words, e.g. ``extend``)
    if given (an OSError on a full disk)."""
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()} {what}".strip().encode("ascii") + b"\n")


def take_run_lock(lock_path: str, owner: str, doing: str, command: str = "score") -> int:
    """The lock of a ``rescorer`` run on what it writes (``score``/``extend``: OUT, the
    --skip-bad-lines file): :func:`take_pid_lock` on ``lock_path`` with our pid and ``command``
    written in it, or a RescorerError naming ``owner``, the command and pid of the run that
    holds it (a lock of an older rescorer holds no command: ours is named), which is ``doing``
    something there."""
    try:
        fd = take_pid_lock(lock_path)
    except LockHeldError as held:
        holder = held.what if held.what.isidentifier() else command
        raise RescorerError(
            f"{owner}: another rescorer {holder} (pid {held.holder}) is {doing}; wait for it "
            "to end or write elsewhere"
        ) from None
    except OSError as exc:
        raise RescorerError(f"{owner}: cannot write beside it: {exc.strerror}") from exc
    try:
        write_pid(fd, command)
    except OSError as exc:  # a full disk
        os.close(fd)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(lock_path)
        raise write_error(lock_path, exc, None) from exc
    return fd
