"""Opening inputs, the one place that reads the files rescorer is given.

Input is plain or gzip, detected by its first two bytes, ``-`` for stdin; a truncated gzip
stream is an error naming the file, and a line over MAX_READ_LINE bytes one naming its line.
This module owns how an input is opened and cut into lines, whatever its format; the formats
have their own owners (phrase tables :mod:`rescorer.io.table`, JSON :mod:`rescorer.io.jsonfiles`,
moses.ini :mod:`rescorer.moses.ini`). Writing is :mod:`rescorer.io.outputs`'.
"""

from __future__ import annotations

import io
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, BinaryIO

from isal import igzip_threaded

from rescorer.constants import GZIP_MAGIC
from rescorer.errors import InputError, RescorerError

# The longest line held in memory: a longer one (an input with no newline, /dev/zero) stops any
# command with its line number, whatever the options. (Lines over MAX_LINE_BYTES in
# rescorer.io.table, 1 MiB, are bad lines, which --skip-bad-lines skips.)
MAX_READ_LINE = 16 << 20


def line_too_long(path: str, lineno: int) -> InputError:
    return InputError(
        display_name(path),
        lineno,
        f"a line longer than {MAX_READ_LINE >> 20} MiB (no newline?), the longest rescorer "
        "reads (docs/score.md, Limits)",
    )


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


MEASURED_GZIP = 32 << 20  # gzip files up to this size are decompressed once to measure them


def gzip_text_size(path: str, limit: int = 256 << 20) -> int | None:
    """The decompressed size of a gzip file. Up to MEASURED_GZIP bytes it is measured, by one
    decompression (a fraction of a second): such a file may hold several members (score's own
    outputs hold one per chunk), whose trailer (ISIZE) gives the last member's size only, and a
    progress line read "100.0% of the input" a third of the way through one. Larger files: the
    trailer when it can be trusted (under ``limit`` bytes, ISIZE is the size mod 2^32, and at
    least the file's size). None otherwise, for a damaged file, or for one that is not gzip."""
    try:
        with open(path, "rb") as f:
            if f.read(2) != GZIP_MAGIC:
                return None
            size = os.fstat(f.fileno()).st_size
            if size <= MEASURED_GZIP:
                f.seek(0)
                with igzip_threaded.open(f, "rb", threads=1) as gz:
                    total = 0
                    while block := gz.read(1 << 22):
                        total += len(block)
                return total
            if size > limit:
                return None
            f.seek(size - 4)
            isize = int.from_bytes(f.read(4), "little")
    except (OSError, EOFError):  # a damaged file: its reader says so
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
    """A raw stream that yields ``head`` and then the rest of ``stream`` (for peeking), and ends
    at the first end of file it meets. A terminal gives one end of file per Ctrl-D and reads on
    after it; a buffered ``read(n)`` returns what it has at the first and would read again, so
    the user would have to press Ctrl-D twice (or more)."""

    def __init__(self, head: bytes, stream: Any) -> None:
        self._head = head
        self._stream = stream
        self._eof = False

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview | bytearray) -> int:  # type: ignore[override]
        if self._head:
            n = min(len(buffer), len(self._head))
            buffer[:n] = self._head[:n]
            self._head = self._head[n:]
            return n
        if self._eof:
            return 0
        data = self._stream.read(len(buffer))
        if not data:
            self._eof = True
            return 0
        buffer[: len(data)] = data
        return len(data)


def _peekable(stream: BinaryIO) -> io.BufferedReader:
    """A buffered reader that can peek and stops at the first end of file: over a real stdin's
    file descriptor, else over ``stream`` itself (a test's bytes)."""
    raw = getattr(stream, "raw", None)
    source = raw if isinstance(stream, io.BufferedReader) and isinstance(raw, io.FileIO) else stream
    return io.BufferedReader(_Prefixed(b"", source), buffer_size=1 << 16)


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
