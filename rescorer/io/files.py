"""Opening inputs and writing outputs, the one place that does either.

Input is plain or gzip, detected by its first two bytes, ``-`` for stdin; a truncated gzip
stream is an error naming the file. Every file rescorer writes appears under its final name only
when complete (:func:`atomic_path`: a temporary file in the same folder, renamed over the name,
with the mode a plain ``open`` would give). Table output is gzip when the name ends in ``.gz``
(level 1, no timestamp, no embedded name: the same input gives the same bytes), ``-`` for stdout.
"""

from __future__ import annotations

import errno
import io
import json
import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any, BinaryIO, TextIO

from isal import igzip, igzip_threaded

from rescorer.constants import DEFAULT_GZIP_LEVEL, GZIP_MAGIC
from rescorer.errors import InputError, RescorerError

# The errors of a write that free space (or another folder) cures: a full disk, a quota, a
# per-process file size limit (ulimit -f).
DISK_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})
MAX_JSON_BYTES = 64 << 20  # the largest JSON file read (configs, vocabularies, manifests)
# The longest line held in memory: a longer one (an input with no newline, /dev/zero) stops any
# command with its line number, whatever the options. (Lines over MAX_LINE_BYTES in
# rescorer.io.table, 1 MiB, are bad lines, which --skip-bad-lines skips.)
MAX_READ_LINE = 16 << 20


def line_too_long(path: str, lineno: int) -> InputError:
    return InputError(
        display_name(path),
        lineno,
        f"a line longer than {MAX_READ_LINE >> 20} MiB (no newline?), the longest rescorer "
        "reads (README, Limits)",
    )


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
    """A file whose failed writes raise a WriteError naming ``shown`` (the name the user gave)."""

    def __init__(self, path: str, mode: str, shown: str) -> None:
        super().__init__(path, mode)
        self.shown = shown

    def write(self, data: Any) -> int:
        try:
            return super().write(data) or 0
        except OSError as exc:
            raise write_error(self.shown, exc, _size(self.fileno())) from exc


def _size(fd: int) -> int | None:
    try:
        return os.fstat(fd).st_size
    except OSError:
        return None


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


def display_name(path: str) -> str:
    return "<stdin>" if path == "-" else path


class InputMeter:
    """How far a reader of ``open_binary`` has got in its file: bytes read of the file as it is
    on disk (compressed for gzip), against its size."""

    def __init__(self) -> None:
        self.raw: Any = None
        self.size: int | None = None

    def fraction(self) -> float | None:
        if self.raw is None or not self.size:
            return None
        try:
            return min(1.0, self.raw.tell() / self.size)
        except (OSError, ValueError):
            return None


def gzip_text_size(path: str, limit: int = 256 << 20) -> int | None:
    """The decompressed size of a gzip file from its trailer (ISIZE), when it can be trusted:
    files under ``limit`` bytes (ISIZE is the size mod 2^32, of the last member only) whose
    trailer is at least the file's size. None otherwise, or for a file that is not gzip."""
    try:
        with open(path, "rb") as f:
            if f.read(2) != GZIP_MAGIC:
                return None
            size = os.fstat(f.fileno()).st_size
            if size > limit or size < 20:
                return None
            f.seek(size - 4)
            isize = int.from_bytes(f.read(4), "little")
    except OSError:
        return None
    return isize if isize >= size else None


@contextmanager
def open_binary(path: str, meter: InputMeter | None = None) -> Iterator[BinaryIO]:
    """Open a file (or ``-``, stdin) for reading bytes, decompressing gzip detected by magic.
    With ``meter``, the reader's progress through a regular file can be read from it."""
    if path == "-":
        raw = _peekable(sys.stdin.buffer)
        close_raw = False
    else:
        raw = open_input(path)
        close_raw = True
        if meter is not None and os.path.isfile(path):
            meter.raw, meter.size = raw, os.fstat(raw.fileno()).st_size
    try:
        try:
            gzipped = raw.peek(2)[:2] == GZIP_MAGIC
        except OSError as exc:  # a folder, an I/O error
            raise RescorerError(f"{display_name(path)}: cannot read: {exc.strerror}") from exc
        if gzipped:
            # Decompression runs in a helper thread, outside the GIL.
            with igzip_threaded.open(raw, "rb", threads=1) as gz:
                yield _GzipReader(gz, path)  # type: ignore[misc]
        else:
            yield raw
    finally:
        if close_raw:
            raw.close()


def open_input(path: str) -> io.BufferedReader:
    """``open(path, "rb")``, or a RescorerError naming the file and why it cannot be read (it is
    missing, unreadable, a folder)."""
    try:
        return open(path, "rb")
    except IsADirectoryError:
        raise RescorerError(f"{path}: is a folder, expected a file") from None
    except OSError as exc:
        raise RescorerError(f"{path}: cannot open: {exc.strerror}") from exc


class _GzipReader:
    """The decompressed stream of a gzip input, whose damage (a truncated or corrupt stream,
    found by whichever read meets it) is one InputError naming the file."""

    def __init__(self, gz: Any, path: str) -> None:
        self._gz = gz
        self._path = path

    def _damaged(self, exc: BaseException) -> InputError:
        return InputError(display_name(self._path), None, f"corrupt or truncated gzip data: {exc}")

    def read(self, size: int = -1) -> bytes:
        try:
            return self._gz.read(size)
        except (EOFError, OSError) as exc:  # igzip: "Compressed file ended before the end..."
            raise self._damaged(exc) from exc

    def readline(self, size: int = -1) -> bytes:
        try:
            return self._gz.readline(size)
        except (EOFError, OSError) as exc:
            raise self._damaged(exc) from exc

    def __iter__(self) -> Iterator[bytes]:
        return self

    def __next__(self) -> bytes:
        line = self.readline()
        if not line:
            raise StopIteration
        return line

    def __getattr__(self, name: str) -> Any:
        return getattr(self._gz, name)


class _Prefixed(io.RawIOBase):
    """A raw stream that yields ``head`` and then the rest of ``stream`` (for peeking)."""

    def __init__(self, head: bytes, stream: BinaryIO) -> None:
        self._head = head
        self._stream = stream

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview | bytearray) -> int:  # type: ignore[override]
        if self._head:
            n = min(len(buffer), len(self._head))
            buffer[:n] = self._head[:n]
            self._head = self._head[n:]
            return n
        data = self._stream.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


def _peekable(stream: BinaryIO) -> io.BufferedReader:
    """``stream`` itself if it can peek (a real stdin), else a buffered wrapper that can."""
    if isinstance(stream, io.BufferedReader):
        return stream
    return io.BufferedReader(_Prefixed(b"", stream), buffer_size=1 << 16)


def iter_raw_lines(stream: BinaryIO, path: str) -> Iterator[bytes]:
    """Lines of a binary stream (with their newline); a truncated gzip stream or a line over
    MAX_READ_LINE bytes is an InputError (memory stays bounded on an input with no newline)."""
    readline = stream.readline
    lineno = 0
    try:
        while line := readline(MAX_READ_LINE + 1):
            lineno += 1
            if len(line) > MAX_READ_LINE:
                raise line_too_long(path, lineno)
            yield line
    except (EOFError, OSError) as exc:  # igzip: "Compressed file ended before the end..."
        raise InputError(
            display_name(path), None, f"corrupt or truncated gzip data: {exc}"
        ) from exc


@contextmanager
def open_text(path: str) -> Iterator[Iterator[str]]:
    """Lines (without newline) of any UTF-8 text file, plain or gzip, ``-`` for stdin.

    Invalid UTF-8 is an InputError naming the file and the line.
    """
    with open_binary(path) as stream:

        def lines() -> Iterator[str]:
            for lineno, raw in enumerate(iter_raw_lines(stream, path), start=1):
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise InputError(
                        display_name(path), lineno, f"invalid UTF-8: {exc.reason}"
                    ) from exc
                yield text[:-1] if text.endswith("\n") else text

        yield lines()


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


@contextmanager
def open_output_binary(path: str, *, compresslevel: int = DEFAULT_GZIP_LEVEL) -> Iterator[BinaryIO]:
    """A binary output that appears under ``path`` only when the block completes.

    ``-`` is stdout. A ``.gz`` name gets gzip (no timestamp, no embedded name). The data goes to a
    temporary file in the same folder, renamed over ``path`` on success and removed on error.
    """
    gzipped = path.endswith(".gz")
    if path == "-":
        out = sys.stdout.buffer
        if gzipped:  # pragma: no cover - "-" never ends in .gz
            raise AssertionError
        yield out
        out.flush()
        return
    with atomic_path(path) as tmp, open_writable(tmp, shown=path) as raw:
        if gzipped:
            with igzip.IGzipFile(
                filename="", mode="wb", compresslevel=compresslevel, fileobj=raw, mtime=0
            ) as gz:
                yield gz  # type: ignore[misc]
        else:
            yield raw


@contextmanager
def atomic_path(path: str | os.PathLike[str], *, fsync: bool = False) -> Iterator[str]:
    """A temporary name beside ``path`` to write; renamed over ``path`` when the block completes.

    On an error the temporary file is removed and ``path`` is left as it was. The file gets the
    mode a plain ``open`` would give it (0666 less the umask); with ``fsync`` its data reaches
    the disk before the rename.
    """
    path = os.fspath(path)
    if os.path.isdir(path):
        raise RescorerError(f"{path}: is a folder, expected a file name to write")
    folder = os.path.dirname(os.path.abspath(path))
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=folder)
    except OSError as exc:
        raise RescorerError(f"{path}: cannot write to {folder}: {exc.strerror}") from exc
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
        raise write_error(path, exc, on_disk) from exc
    finally:
        if not ok:
            with suppress(FileNotFoundError):
                os.unlink(tmp)


def write_json(
    path: str | os.PathLike[str],
    data: Any,
    *,
    indent: int | None = 2,
    ensure_ascii: bool = False,
    fsync: bool = False,
) -> None:
    """``data`` as JSON (and a final newline when indented), atomically."""
    text = json.dumps(data, ensure_ascii=ensure_ascii, indent=indent)
    if indent is not None:
        text += "\n"
    with atomic_path(path, fsync=fsync) as tmp, open_writable(tmp, shown=os.fspath(path)) as out:
        out.write(text.encode("utf-8"))


def write_text(path: str | os.PathLike[str], text: str) -> None:
    """``text`` (UTF-8), atomically."""
    with atomic_path(path) as tmp, open_writable(tmp, shown=os.fspath(path)) as out:
        out.write(text.encode("utf-8"))


def read_json(path: str | os.PathLike[str], *, what: str = "file") -> Any:
    """JSON from ``path``; a missing or unreadable file, or one over MAX_JSON_BYTES (a name that
    points at /dev/zero must not fill the memory), is a RescorerError naming it."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_JSON_BYTES + 1)
            if len(data) > MAX_JSON_BYTES:
                raise RescorerError(
                    f"{os.fspath(path)}: over {MAX_JSON_BYTES >> 20} MiB, the largest JSON file "
                    f"rescorer reads ({what})"
                )
            return json.loads(data)
    except FileNotFoundError as exc:
        raise RescorerError(f"{os.fspath(path)}: missing ({what})") from exc
    except IsADirectoryError:
        raise RescorerError(f"{os.fspath(path)}: is a folder, expected a file ({what})") from None
    except PermissionError as exc:
        raise RescorerError(f"{os.fspath(path)}: cannot open: {exc.strerror} ({what})") from None
    except RecursionError:
        raise RescorerError(f"{os.fspath(path)}: JSON nested too deeply") from None
    except (OSError, ValueError) as exc:  # ValueError: bad JSON or not UTF-8
        raise RescorerError(f"{os.fspath(path)}: cannot read JSON: {exc}") from exc


def read_json_object(path: str | os.PathLike[str], *, what: str = "file") -> dict[str, Any]:
    """Like :func:`read_json`, and the file must hold a JSON object."""
    data = read_json(path, what=what)
    if not isinstance(data, dict):
        raise RescorerError(
            f"{os.fspath(path)}: holds a JSON {type(data).__name__}, expected an object ({what})"
        )
    return data


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
