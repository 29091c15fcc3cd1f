"""The durable output of ``rescorer score``: ``OUT.partial``, its lock and its progress record,
and where a ``--resume`` run starts. No torch here. The record's format, the fingerprints in it
and the checks made of it are in :mod:`rescorer.job.record`; the files a run may write, in
:mod:`rescorer.job.clobber`.

The record is written at most every ``--checkpoint-every`` seconds (and at the end, and when
the run is interrupted), not per chunk: each one costs two or three fsyncs, a wall on network
file systems at 10^6 pairs/s. After each whole chunk written the run names the point a record
may vouch for (:meth:`Output.advance`); a record names the last such point, after the output
up to it is on disk. A killed run loses at most the chunks since its last record, which a
``--resume`` run scores again to the same bytes."""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import stat
import sys
import time
from dataclasses import dataclass, replace
from typing import IO, Any

from rescorer.errors import RescorerError
from rescorer.io.jsonfiles import read_json, write_json
from rescorer.io.locks import take_run_lock
from rescorer.io.outputs import (
    STDOUT,
    fsync,
    open_writable,
    write_error,
    write_target,
    writes_in_place,
)
from rescorer.job.clobber import leftovers, skip_lock_path
from rescorer.job.record import RESUME_REFUSED as RESUME_REFUSED  # the drivers import it here
from rescorer.job.record import Resume, record_problem, recorded_resume, tail_sha256
from rescorer.job.shards import manifest_path, write_manifest
from rescorer.job.stats import JobStats


@dataclass
class _Point:
    """A point a progress record may vouch for: whole chunks written up to input ``offset``."""

    offset: int
    next_line: int
    out_bytes: int
    bad_bytes: int
    stats: dict[str, Any]


_HELD: set[Output] = set()  # the Outputs whose locks this process holds


def partial_path(out: str) -> str:
    """Where a streamed job writes OUT until it is complete."""
    return out + ".partial"


def record_path(out: str) -> str:
    """The progress record that ``--resume`` continues from: it exists once a chunk is done."""
    return partial_path(out) + ".json"


def streams(out: str) -> bool:
    """Whether OUT is written as the run goes, with nothing beside it (no partial file, lock,
    record or manifest) and nothing to resume: stdout (``-``), a character device
    (``/dev/null``) or a FIFO (:func:`rescorer.io.outputs.writes_in_place`)."""
    return out == "-" or writes_in_place(out)


def release_locks() -> None:
    """Remove and release the locks of every Output this process holds: a command that fails
    after its job took them (a model that does not load) leaves no lock file behind. Run at
    exit, and by the command line after an error."""
    for held in list(_HELD):
        held.unlock()


atexit.register(release_locks)


class Output:
    """OUT.partial plus its progress record OUT.partial.json (or, when OUT :func:`streams`,
    OUT itself, not resumable)."""

    def __init__(
        self,
        out: str,
        run_key: dict[str, Any],
        skip_bad_lines: str | None,
        checkpoint_every: float = 0.0,
        command: str = "score",
    ) -> None:
        """``checkpoint_every``: seconds between progress records (0: at every chunk)."""
        self.direct = streams(out)  # stdout, a device or a FIFO: written as it goes
        # A link is written through: OUT.partial beside its file, renamed over that file.
        self.out = out = out if self.direct else write_target(out)
        self.partial, self.record = partial_path(out), record_path(out)
        self.run_key = json.loads(json.dumps(run_key))
        self.skip_bad_lines = skip_bad_lines
        self.sink: IO[bytes] | None = None
        self.bad_out: IO[bytes] | None = None
        self.lock_path, self.lock_fd = self.partial + ".lock", -1
        self.bad_lock = skip_lock_path(skip_bad_lines) if skip_bad_lines is not None else ""
        # /dev/null, a FIFO: written as it goes, with no lock, size or sync (0 bytes to resume)
        self.bad_direct = skip_bad_lines is not None and writes_in_place(skip_bad_lines)
        self.bad_lock_fd = -1
        self.every = checkpoint_every
        self.command = command  # the rescorer command writing OUT, as messages name it
        self.done: _Point | None = None  # the last point advance() named
        self.recorded: _Point | None = None  # the point of the record on disk (or resumed)
        self.last_record = time.monotonic()
        self.records = 0  # progress records written by this run

    def set_run(self, run_key: dict[str, Any]) -> None:
        """What the progress record ties OUT to (input, model, options), once it is known."""
        self.run_key = json.loads(json.dumps(run_key))

    def lock(self) -> None:
        """Take OUT.partial.lock (an exclusive flock holding our pid) or refuse, naming the pid
        of the run that holds it, and the same for the --skip-bad-lines file (two runs that
        share it would truncate each other's bad lines; its lock is named after the file the
        name resolves to: :func:`~rescorer.job.clobber.skip_lock_path`). The kernel drops a
        lock when a run dies, however it dies; :func:`release_locks` removes the lock files
        of a run that ends (or fails) before :meth:`close`."""
        _HELD.add(self)
        if not self.direct:
            if os.path.isdir(self.out):
                raise RescorerError(f"{self.out}: is a folder, expected a file name to write")
            self.lock_fd = take_run_lock(self.lock_path, self.out, "writing it", self.command)
        if self.skip_bad_lines is not None and not self.bad_direct:
            try:
                self.bad_lock_fd = take_run_lock(
                    self.bad_lock,
                    self.skip_bad_lines,
                    "writing its bad lines there (--skip-bad-lines)",
                    self.command,
                )
            except BaseException:
                self.unlock()
                raise
        if self.direct:
            return
        # A run killed while it replaced its record or wrote its manifest leaves the temporary
        # file behind; the lock says that run is gone, so its leftovers can go.
        for leftover in leftovers(self.out):
            _remove(leftover)

    def unlock(self) -> None:
        """Remove and release the locks. Removed while still held: a run that opened the old
        file before the removal finds, once it has the lock, that the name is gone or names
        another file, and tries again (``take_pid_lock``), so it never writes beside us."""
        if self.lock_fd >= 0:
            _remove(self.lock_path)
            os.close(self.lock_fd)
            self.lock_fd = -1
        if self.bad_lock_fd >= 0:
            _remove(self.bad_lock)
            os.close(self.bad_lock_fd)
            self.bad_lock_fd = -1
        _HELD.discard(self)

    def load_resume(self, fresh: Resume, table: str = "", force: bool = False) -> Resume:
        """Where the recorded run stopped, or ``fresh`` (the run's own start) without a record.

        The record must hold what RECORD_SCHEMA says, be for this input (path and
        fingerprint), this model directory (path and content hash) and these options, resume
        at a line start of ``table``, and OUT.partial must still hold what it says. Without a
        record the run starts over, and says so; a complete OUT whose manifest names another
        model is kept unless ``force``.
        """
        if self.direct:
            raise RescorerError(
                f"{self.out}: --resume needs a regular output file, not a device or a FIFO"
            )
        if not os.path.exists(self.record):
            self._nothing_to_resume(force)
            return fresh
        return recorded_resume(self.record, self.partial, self.run_key, table)

    def refuse_to_discard(self, restart: bool) -> None:
        """A run without --resume starts OUT.partial over: refuse while it holds an interrupted
        run that --resume could continue (its record is there and valid), unless ``restart``
        (--restart, --force); then the record goes first, so that no later --resume finds a
        record of bytes that are gone. (An interrupted run's partial file without a valid
        record cannot be resumed: it is started over without a word, as before.)"""
        if self.direct or not os.path.exists(self.record):
            return
        try:
            state = read_json(self.record, what="the progress record of an interrupted run")
        except RescorerError:
            state = None
        if not restart and record_problem(state) is None and os.path.exists(self.partial):
            lines = state["stats"].get("lines_out") if isinstance(state["stats"], dict) else None
            held = f"{lines:,} scored lines" if isinstance(lines, int) else "the scored lines"
            raise RescorerError(
                f"{self.partial}: holds {held} of an interrupted run (its record: "
                f"{self.record}); add --resume to continue it, or --restart to start over and "
                "discard them"
            )
        _remove(self.record)

    def _nothing_to_resume(self, force: bool) -> None:
        """--resume without a record: say that the run starts over; keep a complete OUT whose
        shard manifest names another model unless ``force``."""
        if self.direct:
            return
        complete = os.path.isfile(self.out)
        if complete and not force and os.path.isfile(manifest_path(self.out)):
            try:
                found = read_json(manifest_path(self.out), what="a shard manifest")
            except RescorerError:
                found = None
            model = found.get("model") if isinstance(found, dict) else None
            sha = model.get("sha256") if isinstance(model, dict) else None
            if sha != self.run_key.get("model"):
                raise RescorerError(
                    f"{self.out}: is complete and {manifest_path(self.out)} names another model "
                    f"(sha256 {str(sha)[:12]}, this one {str(self.run_key.get('model'))[:12]}); "
                    "--resume has nothing to resume: write elsewhere, or add --force to "
                    "replace it"
                )
        then = f"; the complete {self.out} will be replaced" if complete else ""
        doing = "scoring" if self.command == "score" else f"{self.command}ing"
        print(
            f"rescorer: --resume: no {self.record}, nothing to resume: {doing} from the first "
            f"line{then}",
            file=sys.stderr,
        )

    def open(self, resume: Resume) -> None:
        if self.out == "-":
            self.sink = sys.stdout.buffer
        elif self.direct:  # a device or a FIFO, written as it is
            self.sink = open_writable(self.out)
        else:
            sink = open_writable(self.partial, "r+b" if resume.out_bytes else "wb")
            sink.truncate(resume.out_bytes)
            sink.seek(resume.out_bytes)
            self.sink = sink
        if self.skip_bad_lines and self.bad_direct:
            self.bad_out = open_writable(self.skip_bad_lines)
        elif self.skip_bad_lines:
            mode = "r+b" if resume.bad_bytes else "wb"
            bad_out = open_writable(self.skip_bad_lines, mode)
            bad_out.truncate(resume.bad_bytes)
            bad_out.seek(resume.bad_bytes)
            self.bad_out = bad_out

    def write(self, data: bytes | memoryview, bad_lines: list[bytes]) -> None:
        assert self.sink is not None
        try:
            self.sink.write(data)
        except BrokenPipeError:  # the reader went away: the command line says so
            raise
        except OSError as exc:  # a stdout that is not use_checked_stdout's, on a full disk
            raise write_error(STDOUT, exc, None) from exc
        if bad_lines:
            assert self.bad_out is not None
            self.bad_out.write(b"".join(line + b"\n" for line in bad_lines))

    def advance(self, offset: int, next_line: int, stats: JobStats) -> None:
        """The output now holds whole chunks up to input ``offset`` (``next_line``): a point a
        record may vouch for. Writes the record when ``checkpoint_every`` seconds have passed
        since the last one."""
        if self.direct:
            return
        assert self.sink is not None
        self.done = _Point(
            offset,
            next_line,
            self.sink.tell(),
            self.bad_out.tell() if self.bad_out is not None and not self.bad_direct else 0,
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
        if self.direct or point is None or point == self.recorded:
            return
        assert self.sink is not None
        # What the record promises reaches the disk first.
        fsync(self.sink, self.partial)
        if self.bad_out is not None and not self.bad_direct:
            fsync(self.bad_out, str(self.skip_bad_lines))
        stats = dict(point.stats)
        stats["seconds"] += time.monotonic() - stats.pop("started")
        state = {
            "run": self.run_key,
            "offset": point.offset,
            "next_line": point.next_line,
            "out_bytes": point.out_bytes,
            "tail_sha256": tail_sha256(self.partial, point.out_bytes),
            "bad_bytes": point.bad_bytes,
            "stats": stats,
        }
        write_json(self.record, state, indent=None, ensure_ascii=True, fsync=True)
        self.recorded = replace(point)
        self.records += 1

    def close(self, ok: bool, keep_partial: bool, manifest: dict[str, Any] | None = None) -> None:
        """Rename OUT.partial to OUT if ``ok`` (writing OUT.manifest.json first if given, so a
        finished shard is never without one); else remove it unless ``keep_partial``."""
        # After a failure the buffers may not fit on the disk either: what a record vouches for
        # is on disk already, and a --resume run cuts the rest.
        failing = contextlib.nullcontext() if ok else contextlib.suppress(OSError, RescorerError)
        bad_file = None  # the --skip-bad-lines file this run wrote: (device, inode)
        if self.bad_out is not None:
            with contextlib.suppress(OSError):
                bad_file = _regular_file_id(os.fstat(self.bad_out.fileno()))
            with failing:
                self.bad_out.close()
        if self.out == "-":
            try:
                if ok and self.sink is not None:
                    self.sink.flush()  # the last bytes: a full disk here is an error too
            except OSError as exc:  # a stdout that is not use_checked_stdout's
                if isinstance(exc, BrokenPipeError):
                    raise
                raise write_error(STDOUT, exc, None) from exc
            finally:
                self.unlock()
            return
        if self.direct:  # a device or a FIFO: closed (flushed), never renamed or removed
            try:
                if self.sink is not None:
                    with failing:
                        self.sink.close()
            finally:
                self.unlock()
            return
        if self.sink is not None:
            with failing:
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
            # its bad lines belong to what was just removed (never a device, never another
            # file that took the name since)
            if self.skip_bad_lines and bad_file and bad_file == _name_id(self.skip_bad_lines):
                _remove(self.skip_bad_lines)
        self.unlock()


def _regular_file_id(st: os.stat_result) -> tuple[int, int] | None:
    return (st.st_dev, st.st_ino) if stat.S_ISREG(st.st_mode) else None


def _name_id(path: str) -> tuple[int, int] | None:
    """The regular file ``path`` names itself (a link is not followed), or None."""
    try:
        return _regular_file_id(os.lstat(path))
    except OSError:
        return None


def _remove(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
