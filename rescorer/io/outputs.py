"""Writing files, the one place that does.

Every file rescorer writes appears under its final name only when complete
(:func:`atomic_path`: a temporary file in the same folder, renamed over the name, with the mode
a plain ``open`` would give), and a failed write (a full disk, a quota) is a WriteError naming
the file and the bytes on disk (:func:`open_writable`). A character device (``/dev/null``) or
a FIFO is written in place, never replaced, with nothing created beside it
(:func:`writes_in_place`). Table output is gzip when the name ends in ``.gz`` (level 1, no
timestamp, no embedded name: the same input gives the same bytes), ``-`` for stdout, whose
every write is checked to its last byte (:func:`use_checked_stdout`, :func:`finish_stdout`: a
full disk is ``<stdout>: cannot write``, exit 1; a reader that leaves, a BrokenPipeError the
command line reports as one line, exit 1); :func:`gzip_member` makes the members of scored
tables. This module owns the
writing and the gzip framing; what is written is its callers' (the phrase-table format is
:mod:`rescorer.io.table`'s, JSON :mod:`rescorer.io.jsonfiles`'). Reading is
:mod:`rescorer.io.inputs`'.
"""

from __future__ import annotations

import atexit
import errno
import io
import os
import stat
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any, BinaryIO, TextIO

from isal import igzip

from rescorer.constants import DEFAULT_GZIP_LEVEL
from rescorer.errors import RescorerError

# The errors of a write that free space (or another folder) cures: a full disk, a quota, a
# per-process file size limit (ulimit -f).
DISK_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})


class WriteError(RescorerError):
    """Writing a file failed (a full disk, a quota, an I/O error): names the file and how many
    of its bytes are on disk. ``disk_full`` when freeing space lets the same command go on."""

    def __init__(self, path: str, on_disk: int | None, reason: str, disk_full: bool) -> None:
        self.path, self.on_disk, self.disk_full = path, on_disk, disk_full
        size = f" ({on_disk:,} bytes of it written)" if on_disk is not None else ""
        super().__init__(f"{path}: cannot write: {reason}{size}")


def write_error(path: str, exc: BaseException, on_disk: int | None) -> WriteError:
    """The WriteError for ``exc`` raised while writing ``path``."""
    if isinstance(exc, OSError) and exc.strerror:
        code = exc.errno
        disk_full = code in DISK_ERRNOS
        reason = exc.strerror.lower() + (" (disk full?)" if code == errno.ENOSPC else "")
    else:  # a library's own error (safetensors): its message, which holds the OS error
        text = str(exc)
        disk_full = "No space left" in text or "quota" in text.lower()
        reason = text[:200]
    return WriteError(path, on_disk, reason, disk_full)


class _CheckedFile(io.FileIO):
    """A file whose failed writes raise a WriteError naming ``shown`` (the name the user gave).
    A BrokenPipeError (the reader of a pipe or FIFO went away) passes as it is: the command
    line says so in its own words."""

    def __init__(self, path: str | int, mode: str, shown: str, closefd: bool = True) -> None:
        super().__init__(path, mode, closefd=closefd)
        self.shown = shown

    def write(self, data: Any) -> int:
        try:
            return super().write(data) or 0
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise write_error(self.shown, exc, _size(self.fileno())) from exc


def _size(fd: int) -> int | None:
    """The bytes of the regular file ``fd`` (None for a pipe or a device, which hold none)."""
    try:
        st = os.fstat(fd)
    except OSError:
        return None
    return st.st_size if stat.S_ISREG(st.st_mode) else None


def open_writable(
    path: str, mode: str = "wb", *, shown: str | None = None, buffering: int = 1 << 20
) -> io.BufferedWriter | io.BufferedRandom:
    """``open(path, mode)`` for writing bytes (``wb``, ``ab`` or ``r+b``), buffered, whose failed
    writes (a full disk) raise a WriteError naming ``shown`` (default ``path``) and the bytes on
    disk, never a bare OSError. Every file rescorer writes goes through here."""
    shown = shown or path
    try:
        raw = _CheckedFile(path, mode.replace("b", ""), shown)
    except OSError as exc:
        raise RescorerError(f"{shown}: cannot open for writing: {exc.strerror}") from exc
    if "+" in mode:
        return io.BufferedRandom(raw, buffering)
    return io.BufferedWriter(raw, buffering)


def fsync(f: Any, shown: str) -> None:
    """Flush ``f`` and make its data reach the disk; a failure is a WriteError naming ``shown``."""
    f.flush()
    try:
        os.fsync(f.fileno())
    except OSError as exc:
        raise write_error(shown, exc, _size(f.fileno())) from exc


GZIP_MEMBER_LEVELS = (0, 9)


def gzip_member(data: bytes, level: int = DEFAULT_GZIP_LEVEL) -> bytes:
    """One gzip member holding ``data``, the same bytes for the same input in every process.

    zlib, not ISA-L: a resumed run or a shard must rewrite exactly the members a single run
    writes, and ISA-L's output for the same chunk was seen to differ by a byte between two
    processes (both valid gzip). zlib level 1 compresses about 120 MB/s here, far above what
    the model produces on a CPU; parse/format workers spread it on a GPU host.
    """
    import gzip

    return gzip.compress(data, compresslevel=level, mtime=0)


STDOUT = "<stdout>"  # how messages name standard output


class _Stdout(io.BufferedWriter):
    """Standard output as :func:`use_checked_stdout` makes it: writes go on until every byte is
    out (a plain unbuffered stdout, ``python -u`` or PYTHONUNBUFFERED, drops the rest of a short
    write: a disk that fills, a pipe whose reader leaves), and a failure is a WriteError naming
    ``<stdout>`` (BrokenPipeError for a closed pipe)."""


def use_checked_stdout() -> None:
    """Make ``sys.stdout`` (text, and its ``buffer`` for bytes) a :class:`_Stdout` on the same
    descriptor, as the ``rescorer`` command does before any command runs. Nothing changes
    where stdout is not a real file (a test's capture). :func:`finish_stdout` makes its last
    flush; at exit, a flush that cannot be made any more is dropped (stdout to /dev/null)
    rather than told as an ignored exception after the command has said what went wrong."""
    current = sys.stdout
    if current is None or isinstance(getattr(current, "buffer", None), _Stdout):
        return
    try:
        fd = current.fileno()
    except (AttributeError, OSError, ValueError):
        return
    current.flush()
    raw = _CheckedFile(fd, "w", STDOUT, closefd=False)
    sys.stdout = io.TextIOWrapper(
        _Stdout(raw),
        encoding=current.encoding,
        errors=current.errors,
        line_buffering=bool(current.line_buffering),
        write_through=getattr(current, "write_through", False),
    )
    atexit.register(drop_stdout)


def finish_stdout() -> None:
    """The last flush of standard output, checked: a WriteError naming ``<stdout>`` (a full
    disk) or a BrokenPipeError (the reader left), never an exit 0 with the output cut short."""
    try:
        sys.stdout.flush()
    except (BrokenPipeError, RescorerError):
        raise
    except OSError as exc:  # a stdout that is not use_checked_stdout's
        raise write_error(STDOUT, exc, None) from exc


def drop_stdout() -> None:
    """Flush standard output if it can be, else point it at /dev/null: after an error has been
    told (or at exit), what cannot be written is dropped without a second message."""
    try:
        sys.stdout.flush()
    except Exception:  # any failure: it has been told, or it cannot be
        with suppress(Exception):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)
            sys.stdout.flush()


def writes_in_place(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is written as it is, never through a temporary file renamed over it: a
    character device (``/dev/null``, ``/dev/full``, a terminal) or a FIFO, links followed, and
    any name in /dev or /proc (``/dev/stdout``, ``/dev/fd/1``), where rescorer creates,
    renames and removes nothing (a name there that does not exist is refused). A block device
    or a socket is refused."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    if folder in ("/dev", "/dev/fd") or folder == "/proc" or folder.startswith("/proc/"):
        if not os.path.lexists(path):
            raise RescorerError(f"{path}: cannot write to {folder}: no such file, and none made")
        return True
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    if stat.S_ISCHR(mode) or stat.S_ISFIFO(mode):
        return True
    if stat.S_ISBLK(mode) or stat.S_ISSOCK(mode):
        kind = "a block device" if stat.S_ISBLK(mode) else "a socket"
        raise RescorerError(
            f"{path}: is {kind}; rescorer writes files, character devices (/dev/null) and FIFOs"
        )
    return False


@contextmanager
def open_output_binary(path: str, *, compresslevel: int = DEFAULT_GZIP_LEVEL) -> Iterator[BinaryIO]:
    """A binary output that appears under ``path`` only when the block completes.

    ``-`` is stdout (flushed, checked, at the end). A ``.gz`` name gets gzip (no timestamp, no
    embedded name). The data goes to a temporary file in the same folder, renamed over ``path``
    on success and removed on error (:func:`atomic_path`; a device or FIFO is written in place).
    """
    gzipped = path.endswith(".gz")
    if path == "-":
        out = sys.stdout.buffer
        if gzipped:  # pragma: no cover - "-" never ends in .gz
            raise AssertionError
        yield out
        try:
            out.flush()
        except (BrokenPipeError, RescorerError):
            raise
        except OSError as exc:  # a stdout that is not use_checked_stdout's
            raise write_error(STDOUT, exc, None) from exc
        return
    with atomic_path(path) as tmp, open_writable(tmp, shown=path) as raw:
        if gzipped:
            with igzip.IGzipFile(
                filename="", mode="wb", compresslevel=compresslevel, fileobj=raw, mtime=0
            ) as gz:
                yield gz  # type: ignore[misc]
        else:
            yield raw


def write_target(path: str) -> str:
    """The name a write to ``path`` replaces: ``path``, or where it is a symbolic link the file
    it leads to (a chain followed, a dangling link's target created), as a shell's ``>`` writes
    through a link: the link stays, and the file it names gets the bytes (written beside it,
    then renamed over it). A tool that replaced the link put the output beside the link,
    maybe on another disk than the one the link points at."""
    return os.path.realpath(path) if os.path.islink(path) else path


@contextmanager
def atomic_path(path: str | os.PathLike[str], *, fsync: bool = False) -> Iterator[str]:
    """A temporary name beside ``path`` to write; renamed over ``path`` when the block completes.

    On an error the temporary file is removed and ``path`` is left as it was. The file gets the
    mode a plain ``open`` would give it (0666 less the umask); with ``fsync`` its data reaches
    the disk before the rename. A ``path`` that :func:`writes_in_place` (``/dev/null``, a FIFO)
    is yielded itself: written directly, never replaced, nothing created beside it. A symbolic
    link is written through (:func:`write_target`).
    """
    path = os.fspath(path)
    if os.path.isdir(path):
        raise RescorerError(f"{path}: is a folder, expected a file name to write")
    if writes_in_place(path):
        try:
            yield path
        except OSError as exc:  # a writer that is not open_writable's (torch, a library)
            if exc.errno not in DISK_ERRNOS:
                raise
            raise write_error(path, exc, None) from exc
        return
    shown, path = path, write_target(path)
    folder = os.path.dirname(os.path.abspath(path))
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=folder)
    except OSError as exc:
        raise RescorerError(f"{shown}: cannot write to {folder}: {exc.strerror}") from exc
    os.close(fd)
    ok = False
    try:
        yield tmp
        os.chmod(tmp, 0o666 & ~_umask())
        if fsync:
            with open(tmp, "rb") as f:
                os.fsync(f.fileno())
        os.replace(tmp, path)
        ok = True
    except OSError as exc:  # a writer that is not open_writable's (torch, a library)
        if exc.errno not in DISK_ERRNOS:
            raise
        on_disk = os.path.getsize(tmp) if os.path.exists(tmp) else None
        raise write_error(shown, exc, on_disk) from exc
    finally:
        if not ok:
            with suppress(FileNotFoundError):
                os.unlink(tmp)


def write_text(path: str | os.PathLike[str], text: str) -> None:
    """``text`` (UTF-8), atomically."""
    with atomic_path(path) as tmp, open_writable(tmp, shown=os.fspath(path)) as out:
        out.write(text.encode("utf-8"))


def make_dir(path: str | os.PathLike[str]) -> None:
    """Create a folder (and its parents) for output, or say why it cannot be one."""
    try:
        os.makedirs(path, exist_ok=True)
    except FileExistsError:
        raise RescorerError(f"{os.fspath(path)}: exists and is not a folder") from None
    except OSError as exc:
        raise RescorerError(f"{os.fspath(path)}: cannot create the folder: {exc.strerror}") from exc


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextmanager
def open_output(path: str, *, compresslevel: int = DEFAULT_GZIP_LEVEL) -> Iterator[TextIO]:
    """Text (UTF-8, ``\\n``) version of :func:`open_output_binary`."""
    with open_output_binary(path, compresslevel=compresslevel) as raw:
        text = io.TextIOWrapper(raw, encoding="utf-8", newline="\n", write_through=False)
        try:
            yield text
            text.flush()
        finally:
            text.detach()
