"""The durable output of ``rescorer score``: ``OUT.partial``, its lock and its progress record,
where a ``--resume`` run starts, and the fingerprints (input, model) that tie a record to its
run. No torch here.

The record is written at most every ``--checkpoint-every`` seconds (and at the end, and when
the run is interrupted), not per chunk: each one costs two or three fsyncs, a wall on network
file systems at 10^6 pairs/s. After each whole chunk written the run names the point a record
may vouch for (:meth:`Output.advance`); a record names the last such point, after the output
up to it is on disk. A killed run loses at most the chunks since its last record, which a
``--resume`` run scores again to the same bytes."""

from __future__ import annotations

import contextlib
import fcntl
import functools
import glob
import hashlib
import json
import os
import sys
import time
from dataclasses import dataclass, field, replace
from typing import IO, Any

from rescorer.constants import CONFIG_FILE, SRC_VOCAB_FILE, TGT_VOCAB_FILE, WEIGHTS_FILE
from rescorer.errors import RescorerError
from rescorer.io.files import read_json, write_json
from rescorer.score.config import ScoreStats
from rescorer.score.shards import manifest_path, write_manifest

TAIL_BYTES = 1 << 16  # the output bytes a progress record vouches for by hash
HEAD_BYTES = 1 << 20  # the input bytes at each end that its fingerprint hashes


def _tail_sha256(path: str, end: int) -> str:
    """sha256 of the TAIL_BYTES of ``path`` before offset ``end``."""
    start = max(0, end - TAIL_BYTES)
    with open(path, "rb") as f:
        f.seek(start)
        return hashlib.sha256(f.read(end - start)).hexdigest()


def input_fingerprint(path: str) -> dict[str, Any]:
    """Size and sha256 of the first and last HEAD_BYTES: cheap on 10^9-line tables, and a
    table that was rewritten, appended to or truncated since the record changes it."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = hashlib.sha256(f.read(HEAD_BYTES)).hexdigest()
        f.seek(max(0, size - HEAD_BYTES))
        tail = hashlib.sha256(f.read(HEAD_BYTES)).hexdigest()
    return {"bytes": size, "head_sha256": head, "tail_sha256": tail}


def model_fingerprint(model_dir: str) -> str | None:
    """sha256 over the files that decide the scores (config, vocabularies, weights)."""
    digest = hashlib.sha256()
    try:
        for name in (CONFIG_FILE, SRC_VOCAB_FILE, TGT_VOCAB_FILE, WEIGHTS_FILE):
            with open(os.path.join(model_dir, name), "rb") as f:
                for block in iter(functools.partial(f.read, 1 << 20), b""):
                    digest.update(block)
    except OSError:
        return None  # load_model_dir has said what is missing
    return digest.hexdigest()


def same_file(a: str, b: str) -> bool:
    """Whether two names are one file (same device and inode), so links and ./ tricks count."""
    try:
        sa, sb = os.stat(a), os.stat(b)
    except OSError:
        return False
    return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)


@dataclass
class Resume:
    """Where a run starts: the input offset and line, and what the outputs already hold."""

    offset: int = 0
    first_line: int = 1
    out_bytes: int = 0
    bad_bytes: int = 0
    stats: dict[str, Any] = field(default_factory=dict)


@dataclass
class _Point:
    """A point a progress record may vouch for: whole chunks written up to input ``offset``."""

    offset: int
    next_line: int
    out_bytes: int
    bad_bytes: int
    stats: dict[str, Any]


class Output:
    """OUT.partial plus its progress record OUT.partial.json (or stdout, not resumable)."""

    def __init__(
        self,
        out: str,
        run_key: dict[str, Any],
        skip_bad_lines: str | None,
        checkpoint_every: float = 0.0,
    ) -> None:
        """``checkpoint_every``: seconds between progress records (0: at every chunk)."""
        self.out = out
        self.partial, self.record = out + ".partial", out + ".partial.json"
        self.run_key = json.loads(json.dumps(run_key))
        self.skip_bad_lines = skip_bad_lines
        self.sink: IO[bytes] | None = None
        self.bad_out: IO[bytes] | None = None
        self.lock_path, self.lock_fd = self.partial + ".lock", -1
        self.every = checkpoint_every
        self.done: _Point | None = None  # the last point advance() named
        self.recorded: _Point | None = None  # the point of the record on disk (or resumed)
        self.last_record = time.monotonic()
        self.records = 0  # progress records written by this run

    def lock(self) -> None:
        """Take OUT.partial.lock (an exclusive flock holding our pid) or refuse, naming the pid
        of the run that holds it. The kernel drops the lock when a run dies, however it dies."""
        if self.out == "-":
            return
        if os.path.isdir(self.out):
            raise RescorerError(f"{self.out}: is a folder, expected a file name to write")
        try:
            fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o666)
        except OSError as exc:
            raise RescorerError(f"{self.out}: cannot write beside it: {exc.strerror}") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            other = os.read(fd, 32).decode("ascii", "replace").strip() or "unknown"
            os.close(fd)
            raise RescorerError(
                f"{self.out}: another rescorer score (pid {other}) is writing it; wait for it to "
                "end or write elsewhere"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode("ascii"))
        self.lock_fd = fd
        # A run killed while it replaced its record or wrote its manifest leaves the temporary
        # file behind; the lock says that run is gone, so its leftovers can go.
        for path in (self.record, manifest_path(self.out)):
            folder, name = os.path.split(os.path.abspath(path))
            pattern = os.path.join(glob.escape(folder), f".{glob.escape(name)}.*.tmp")
            for leftover in glob.glob(pattern):
                _remove(leftover)

    def unlock(self) -> None:
        if self.lock_fd >= 0:
            _remove(self.lock_path)
            os.close(self.lock_fd)
            self.lock_fd = -1

    def load_resume(self, fresh: Resume) -> Resume:
        """Where the recorded run stopped, or ``fresh`` (the run's own start) without a record.

        The record must be for this input (path and fingerprint), this model directory (path
        and content hash) and these options, and OUT.partial must still hold what it says.
        """
        if not os.path.exists(self.record):
            return fresh
        state = read_json(self.record, what="the progress record of an interrupted run")
        again = "run without --resume to start over"
        old = state.get("run", {}) if isinstance(state, dict) else {}
        for key, what in (
            ("table", "for another input table"),
            ("input", "for other input content (the table changed since)"),
            ("model_dir", "for another model directory"),
            ("model", "for another model (the model directory changed since)"),
            ("config", "with other options"),
        ):
            if old.get(key) != self.run_key.get(key):
                raise RescorerError(f"{self.record}: was written {what}; {again}")
        out_bytes = int(state["out_bytes"])
        try:
            size = os.path.getsize(self.partial)
        except OSError:
            raise RescorerError(
                f"{self.partial}: missing, but {self.record} says {out_bytes} bytes were "
                f"written; {again}"
            ) from None
        if size < out_bytes:
            raise RescorerError(
                f"{self.partial}: {size} bytes, shorter than the {out_bytes} its record says "
                f"(lost in a crash or power loss?); {again}"
            )
        if _tail_sha256(self.partial, out_bytes) != state.get("tail_sha256"):
            raise RescorerError(
                f"{self.partial}: its last written bytes differ from its record; {again}"
            )
        return Resume(
            state["offset"],
            state["next_line"],
            state["out_bytes"],
            state["bad_bytes"],
            state["stats"],
        )

    def open(self, resume: Resume) -> None:
        if self.out == "-":
            self.sink = sys.stdout.buffer
        else:
            sink = open(self.partial, "r+b" if resume.out_bytes else "wb")  # noqa: SIM115
            sink.truncate(resume.out_bytes)
            sink.seek(resume.out_bytes)
            self.sink = sink
        if self.skip_bad_lines:
            mode = "r+b" if resume.bad_bytes else "wb"
            bad_out = open(self.skip_bad_lines, mode)  # noqa: SIM115
            bad_out.truncate(resume.bad_bytes)
            bad_out.seek(resume.bad_bytes)
            self.bad_out = bad_out

    def write(self, data: bytes, bad_lines: list[bytes]) -> None:
        assert self.sink is not None
        self.sink.write(data)
        if bad_lines:
            assert self.bad_out is not None
            self.bad_out.write(b"".join(line + b"\n" for line in bad_lines))

    def advance(self, offset: int, next_line: int, stats: ScoreStats) -> None:
        """The output now holds whole chunks up to input ``offset`` (``next_line``): a point a
        record may vouch for. Writes the record when ``checkpoint_every`` seconds have passed
        since the last one."""
        if self.out == "-":
            return
        assert self.sink is not None
        self.done = _Point(
            offset,
            next_line,
            self.sink.tell(),
            self.bad_out.tell() if self.bad_out is not None else 0,
            {
                "lines_in": stats.lines_in,
                "lines_out": stats.lines_out,
                "bad": stats.bad,
                "range_sha256": stats.range_sha256,
                "seconds": stats.earlier_seconds,  # plus this run's, when recorded
                "started": stats.started,
            },
        )
        if time.monotonic() - self.last_record >= self.every:
            self.checkpoint()

    def checkpoint(self) -> None:
        """Record the last point :meth:`advance` named, unless the record says it already:
        flush and fsync OUT.partial (and the bad-lines file) first, then replace the record
        (written to a temporary file, fsynced, renamed over it). Bytes written after that
        point (a chunk interrupted while it was written) reach the disk too, and a --resume
        run cuts them off."""
        self.last_record = time.monotonic()
        point = self.done
        if self.out == "-" or point is None or point == self.recorded:
            return
        assert self.sink is not None
        for f in (self.sink, self.bad_out):  # what the record promises reaches the disk first
            if f is not None:
                f.flush()
                os.fsync(f.fileno())
        stats = dict(point.stats)
        stats["seconds"] += time.monotonic() - stats.pop("started")
        state = {
            "run": self.run_key,
            "offset": point.offset,
            "next_line": point.next_line,
            "out_bytes": point.out_bytes,
            "tail_sha256": _tail_sha256(self.partial, point.out_bytes),
            "bad_bytes": point.bad_bytes,
            "stats": stats,
        }
        write_json(self.record, state, indent=None, ensure_ascii=True, fsync=True)
        self.recorded = replace(point)
        self.records += 1

    def close(self, ok: bool, keep_partial: bool, manifest: dict[str, Any] | None = None) -> None:
        """Rename OUT.partial to OUT if ``ok`` (writing OUT.manifest.json first if given, so a
        finished shard is never without one); else remove it unless ``keep_partial``."""
        if self.bad_out is not None:
            self.bad_out.close()
        if self.out == "-":
            if ok and self.sink is not None:
                self.sink.flush()
            return
        if self.sink is not None:
            self.sink.close()
        if ok:
            if manifest is not None:
                write_manifest(self.out, manifest, data_path=self.partial)
            # The record goes first: killed in between, a --resume run finds OUT.partial
            # without a record and starts afresh, never a record whose partial file is gone.
            _remove(self.record)
            os.replace(self.partial, self.out)
        elif not keep_partial:  # bad input or a crash: leave nothing behind
            _remove(self.partial)
            _remove(self.record)
        self.unlock()


def _remove(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
