"""Resumable steps: each in its own folder of a work directory, skipped once complete.

A step is complete when its folder holds ``done.json`` (written last, atomically, with what the
step produced and its wall time). A folder without it is what a killed run left: it is removed
and the step runs again from scratch (a fresh working directory, as mert-moses.pl needs),
unless the step declares that it continues its own partial work (training with ``--resume``).
A ``done.json`` that is damaged (cut short, not a record), or a finished step whose outputs
its own check finds damaged, is warned about by name and the step runs again the same way.
Every command a step runs appends to the step's ``log``; a command that fails stops the run
with an error naming the step and that log. A command the run is interrupted in (Ctrl-C,
SIGTERM) is ended with every process it started before the interruption goes on.

Chains of steps that do not depend on each other (a tuning run and its decoding, say) may run
several at once (:meth:`WorkDir.run_chains`, threads that each wait on their commands). When
one fails, or the run is interrupted, every running command is ended the same way, no new one
starts, and the first error (or the interruption) ends the run. One driver at a time works in
a folder (:meth:`WorkDir.lock`, an flock on ``driver.lock``).
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import IO, Any

from rescorer.errors import RescorerError
from rescorer.experiments.processes import end_command
from rescorer.io.jsonfiles import read_json_object, write_json
from rescorer.io.locks import LockHeldError, take_pid_lock, write_pid

DONE_FILE = "done.json"
LOG_FILE = "log"
LOCK_FILE = "driver.lock"  # held (flock) by the driver running in the work folder


class StepError(RescorerError):
    """A step failed: names the step, what went wrong and the log to read."""


class StoppedError(RescorerError):
    """A command was not started, or was ended, because the run is stopping (another chain
    failed, or the run was interrupted): not the error the run reports."""


class Commands:
    """The commands running now, in every thread of a run; stopping ends them all and lets
    no new one start."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: set[subprocess.Popen[bytes]] = set()
        self.stopping = False

    def start(self, name: str, argv: list[str], **popen: Any) -> subprocess.Popen[bytes]:
        with self._lock:
            if self.stopping:
                raise StoppedError(f"step {name}: not started, the run is stopping")
            proc = subprocess.Popen(argv, **popen)
            self._running.add(proc)
            return proc

    def finished(self, proc: subprocess.Popen[bytes]) -> None:
        with self._lock:
            self._running.discard(proc)

    def stop(self) -> None:
        """Let no new command or step start."""
        with self._lock:
            self.stopping = True

    def stop_all(self) -> None:
        """Stop, and end every running command (each as :func:`end_command` does, all at
        once)."""
        with self._lock:
            self.stopping = True
            running = list(self._running)
        enders = [threading.Thread(target=end_command, args=(p,)) for p in running]
        for ender in enders:
            ender.start()
        for ender in enders:
            ender.join()


class Step:
    """A running step: its folder, its log and the commands it runs."""

    def __init__(self, name: str, folder: Path, commands: Commands | None = None) -> None:
        self.name = name
        self.folder = folder
        self.log = folder / LOG_FILE
        self.commands = commands or Commands()

    def say_in_log(self, message: str) -> None:
        """A line of the driver's own in the step's log, between its commands'."""
        with open(self.log, "a", encoding="utf-8") as log:
            log.write(f"# {message}\n")

    def need(self, *paths: Path) -> None:
        """Stop with a clear error unless every path exists."""
        for path in paths:
            if not path.exists():
                raise StepError(f"step {self.name}: missing {path} (see {self.log})")

    def run(
        self,
        argv: Sequence[str | os.PathLike[str]],
        *,
        cwd: Path | None = None,
        stdin: Path | None = None,
        stdout: Path | None = None,
        env: dict[str, str] | None = None,
        watch: Callable[[], None] | None = None,
    ) -> None:
        """Run a command, its stderr (and stdout unless redirected) appended to the log;
        ``watch`` is called every WATCH_EVERY seconds while it runs (to report progress)."""
        args = [os.fspath(a) for a in argv]
        with open(self.log, "a", encoding="utf-8") as log:
            log.write(f"$ {shlex.join(args)}" + (f" < {stdin}" if stdin else ""))
            log.write((f" > {stdout}" if stdout else "") + (f"  (in {cwd})" if cwd else "") + "\n")
            log.flush()
            out: IO[Any] = open(stdout, "wb") if stdout else log  # noqa: SIM115
            inp: IO[Any] = open(stdin, "rb") if stdin else subprocess.DEVNULL  # type: ignore[assignment]  # noqa: SIM115
            try:
                proc = self.commands.start(
                    self.name, args, cwd=cwd, stdin=inp, stdout=out, stderr=log, env=env
                )
                try:
                    _wait(proc, watch)
                except BaseException:  # Ctrl-C or SIGTERM: no command outlives the run
                    end_command(proc)
                    raise
                finally:
                    self.commands.finished(proc)
            except OSError as exc:
                raise StepError(
                    f"step {self.name}: cannot run {args[0]}: {exc.strerror} (see {self.log})"
                ) from exc
            finally:
                if stdout:
                    out.close()
                if stdin:
                    inp.close()
        if proc.returncode != 0 and self.commands.stopping:
            raise StoppedError(f"step {self.name}: ended, the run is stopping")
        if proc.returncode != 0:
            raise StepError(
                f"step {self.name}: {Path(args[0]).name} exited with status {proc.returncode}"
                f"{_last_line(self.log)}; see {self.log}"
            )


WATCH_EVERY = 2.0  # seconds between two calls of a running command's watch


def _wait(proc: subprocess.Popen[bytes], watch: Callable[[], None] | None) -> None:
    if watch is None:
        proc.wait()
        return
    while True:
        try:
            proc.wait(WATCH_EVERY)
        except subprocess.TimeoutExpired:
            watch()
        else:
            watch()  # what it wrote last
            return


def _last_line(log: Path) -> str:
    try:
        lines = [ln for ln in log.read_text(encoding="utf-8", errors="replace").splitlines() if ln]
    except OSError:
        return ""
    return f" ({lines[-1].strip()[:200]})" if lines else ""


_SAY_LOCK = threading.Lock()


def _say(message: str) -> None:
    """A line on stderr, whole: print() writes the line and its end apart, so two chains'
    lines could interleave."""
    with _SAY_LOCK:
        sys.stderr.write(f"{message}\n")
        sys.stderr.flush()


def check_work_folder(root: Path) -> None:
    """Refuse a work folder path that names something other than a folder (a file, say)."""
    if root.exists() and not root.is_dir():
        raise RescorerError(f"{root}: not a folder (expected a work folder, made if missing)")


def read_done(
    root: Path, name: str, damaged: Callable[[dict[str, Any]], str | None] | None = None
) -> tuple[dict[str, Any] | None, str | None]:
    """Step ``name``'s record in ``root``, the one reader of done.json: (record, None) for a
    complete step, (None, None) for one without a record, (None, what is wrong) when the record
    is damaged or ``damaged`` finds a problem with the step's outputs (it may raise
    RescorerError for an output it cannot read)."""
    marker = root / name / DONE_FILE
    if not marker.is_file():
        return None, None
    try:
        record = read_json_object(marker, what=f"the record of step {name}")
        seconds = record.get("seconds")
        if not isinstance(seconds, (int, float)) or isinstance(seconds, bool):
            raise RescorerError(f"{marker}: no step record (its 'seconds' is {seconds!r})")
        problem = damaged(record) if damaged is not None else None
    except RescorerError as exc:
        problem = str(exc)
    return (record, None) if problem is None else (None, problem)


class WorkDir:
    """The work directory of an experiment: runs steps once, reports progress on stderr."""

    def __init__(
        self, root: Path, *, echo: Callable[[str], None] | None = None, prog: str = "table1"
    ) -> None:
        self.root = root
        self.prog = prog
        check_work_folder(root)
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise RescorerError(f"{root}: cannot make the work folder: {exc.strerror}") from exc
        self.say = echo or _say
        self.commands = Commands()
        self._lock_fd: int | None = None

    def lock(self) -> None:
        """Hold the work folder for this process: an exclusive flock on ``driver.lock`` (our
        pid written in it), which ends with the process, even a killed one. A second driver
        started on the same folder (the same command in another terminal) would run the same
        steps at once, each removing the other's folders: it is refused, naming the pid."""
        path = self.root / LOCK_FILE
        try:
            fd = take_pid_lock(str(path))
            write_pid(fd)
        except LockHeldError as held:
            raise RescorerError(
                f"{self.root} is in use by another {self.prog} run (pid {held.holder}, {path}): "
                "wait for it to end, or end it and run this command again"
            ) from None
        except OSError as exc:
            raise RescorerError(f"{path}: cannot write in the work folder: {exc.strerror}") from exc
        self._lock_fd = fd

    def run_chains(self, chains: Sequence[Callable[[], None]], jobs: int = 1) -> None:
        """Run ``chains`` (each a function running steps in order), ``jobs`` at once, in the
        order given. The first that fails, or an interruption, stops the rest: every running
        command is ended (a tuning goes on from its last iteration next time) and that error
        or interruption is raised here."""
        if jobs <= 1:
            for chain in chains:
                chain()
            return
        with ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="chain") as pool:
            futures: list[Future[None]] = [pool.submit(self._guarded, c) for c in chains]
            try:
                done, _ = wait(futures, return_when=FIRST_EXCEPTION)
            except BaseException:  # Ctrl-C or SIGTERM, in this (the main) thread
                self._stop(futures)
                raise
            failed = [f for f in futures if f in done and f.exception() is not None]
            if failed:
                self._stop(futures)
                errors = [
                    error
                    for f in futures
                    if not f.cancelled() and (error := f.exception()) is not None
                ]
                first = next((e for e in errors if not isinstance(e, StoppedError)), errors[0])
                raise first

    def _guarded(self, chain: Callable[[], None]) -> None:
        """A chain that fails stops the run at once: its thread, free again, starts no other
        chain's step before this thread's caller has ended the running ones."""
        try:
            chain()
        except BaseException:
            self.commands.stop()
            raise

    def _stop(self, futures: list[Future[None]]) -> None:
        for future in futures:
            future.cancel()  # those not started yet
        self.commands.stop_all()
        wait(futures)

    def done(
        self, name: str, damaged: Callable[[dict[str, Any]], str | None] | None = None
    ) -> dict[str, Any] | None:
        """The record of a complete step, or None: also (with a warning naming the file) when
        done.json is damaged or ``damaged`` finds a problem with the step's outputs."""
        record, problem = read_done(self.root, name, damaged)
        if problem is not None:
            self.say(f"{self.prog}: warning: {problem}: step {name} runs again")
        return record

    def step(
        self,
        name: str,
        action: Callable[[Step], dict[str, Any]],
        *,
        keep_partial: bool = False,
        damaged: Callable[[dict[str, Any]], str | None] | None = None,
    ) -> dict[str, Any]:
        """Run ``action`` in a fresh ``root/name`` unless done; its result goes in done.json.
        ``damaged`` says what is wrong with a finished step's outputs, if anything."""
        record = self.done(name, damaged)
        if record is not None:
            self.say(f"{self.prog}: {name}: done before ({record['seconds']:.0f} s), skipped")
            return record
        if self.commands.stopping:
            raise StoppedError(f"step {name}: not started, the run is stopping")
        folder = self.root / name
        if folder.exists() and not keep_partial:
            shutil.rmtree(folder)
        folder.mkdir(parents=True, exist_ok=True)
        step = Step(name, folder, self.commands)
        self.say(f"{self.prog}: {name}: running (log: {step.log})")
        start = time.monotonic()
        result = action(step)
        record = {**result, "seconds": round(time.monotonic() - start, 1)}
        write_json(folder / DONE_FILE, record, fsync=True)
        self.say(f"{self.prog}: {name}: done in {record['seconds']:.0f} s")
        return record
