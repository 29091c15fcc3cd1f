"""The worker processes a streamed job parses and formats its chunks in (:class:`Workers`), and
their stand-in in the calling process (:class:`Inline`). No torch here.

A ``concurrent.futures.ProcessPoolExecutor``, not a ``multiprocessing.Pool``: when a worker
dies (the OOM killer's SIGKILL on a cluster node), the executor fails every task in flight with
``BrokenProcessPool``, where a Pool started another worker and left the main process waiting
for the lost task forever (issue 65). The job then ends with :meth:`Workers.death`'s words,
which name the worker and its signal.

Its semaphores are named after this process (:func:`rescorer.io.shm.semaphores_named`), so
that a later run finds and removes them where this one is killed with its resource tracker.

Workers are spawned, not forked (the main process holds torch's threads), with SIGINT ignored:
a new interpreter inherits that through exec and keeps it, so a Ctrl-C, which the terminal
sends to the whole process group, reaches the main process alone, also while a worker still
imports. A worker ends when the main process does, however it ends (:func:`_start`): the
executor's workers hold both ends of its task pipe, so the main process's death left them
waiting for a task forever, and multiprocessing's resource tracker with them.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor
from multiprocessing.context import SpawnContext, SpawnProcess
from typing import Any

from rescorer.errors import RescorerError
from rescorer.io.shared import keep_freed_memory
from rescorer.io.shm import semaphores_named, shm_room
from rescorer.job.interrupts import held

__all__ = ["Inline", "Pool", "Workers", "ready", "start_pool"]

#: Seconds a worker has to finish its task in flight when the job ends early (:meth:`Workers._end`).
GRACE = 10.0


class _Worker(SpawnProcess):
    """A spawned worker process, started with SIGINT ignored (module docstring)."""

    def start(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            super().start()  # only the main thread may set a handler (the job's thread is it)
            return
        handler = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            super().start()
        finally:
            signal.signal(signal.SIGINT, handler)


class _Spawn(SpawnContext):
    """The spawn context, its processes :class:`_Worker`\\ s."""

    Process = _Worker


def _start(initializer: Callable[..., None], initargs: tuple[Any, ...]) -> None:
    """A worker's start: ``initializer(*initargs)``, and a thread that ends the worker when
    the main process ends (module docstring)."""
    parent = multiprocessing.parent_process()
    if parent is not None:
        watch = threading.Thread(target=_end_with, args=(parent,), name="main-watch", daemon=True)
        watch.start()
    initializer(*initargs)


def _end_with(parent: multiprocessing.process.BaseProcess) -> None:
    parent.join()  # returns when the parent's end of a pipe closes: when it ends
    os._exit(1)


class Workers:
    """``count`` worker processes, each started with ``initializer(*initargs)``, spawned as
    the first tasks come. Raises OSError where the system refuses the pool's semaphores (a
    read-only or full /dev/shm), NotImplementedError or ImportError where it has none."""

    def __init__(
        self, count: int, initializer: Callable[..., None], initargs: tuple[Any, ...]
    ) -> None:
        with semaphores_named():  # whose they are, for a later run where this one is killed
            self._executor = ProcessPoolExecutor(
                count, mp_context=_Spawn(), initializer=_start, initargs=(initializer, initargs)
            )
        self._count = count
        self._ended: dict[int, int | None] = {}  # pid -> exit code, once the pool is shut down

    def submit(self, func: Callable[..., Any], *args: Any) -> Future[Any]:
        """``func(*args)`` in a worker. Raises BrokenProcessPool once a worker has died, as
        the futures of the tasks in flight then do; RescorerError where the system refuses to
        start a worker (a process or task limit tighter than ``--workers``)."""
        try:
            with held():  # not inside the executor's locks (rescorer.job.interrupts)
                return self._executor.submit(func, *args)  # starts the workers at first tasks
        except OSError as exc:
            raise RescorerError(
                f"could not start {self._count} worker processes ({exc.strerror or exc}):"
                " give fewer --workers"
            ) from exc

    def close(self) -> None:
        """Every task done, the workers ended."""
        self._shut_down(kill=False)

    def terminate(self) -> None:
        """The tasks not started dropped, the workers ended (:meth:`_end`)."""
        self._shut_down(kill=True)

    def _shut_down(self, kill: bool) -> None:
        if self._ended:
            return
        # The executor forgets its processes on shutdown, and lists them nowhere public.
        processes = dict(getattr(self._executor, "_processes", None) or {})
        if kill:
            self._end(processes)
        else:
            self._executor.shutdown(wait=True)
        self._ended = {pid: process.exitcode for pid, process in processes.items()}

    def _end(self, processes: dict[int, multiprocessing.process.BaseProcess]) -> None:
        """The workers end after the task each has in flight (a chunk's parse or format, well
        under :data:`GRACE`), as they do at a normal close; one still running after GRACE is
        killed. Not at once: a worker killed while it writes its result leaves half a message
        in the results pipe, and the executor's thread, which reads it, waits for the rest
        forever (this process holds the pipe's other end), and the job with it: Ctrl-C hung
        1 time in 5 on a busy machine. Where a worker was killed all the same (here, or by a
        SIGTERM sent to the whole process group), that end is closed once every worker has
        gone, so the read ends."""
        executor = self._executor
        thread = getattr(executor, "_executor_manager_thread", None)
        results = getattr(executor, "_result_queue", None)
        executor.shutdown(wait=False, cancel_futures=True)
        deadline = time.monotonic() + GRACE
        for process in processes.values():
            process.join(max(0.0, deadline - time.monotonic()))
        for process in processes.values():
            if process.exitcode is None:
                process.kill()
                process.join()
        if thread is None:
            return
        thread.join(1.0)
        if thread.is_alive() and results is not None:  # reading half a result
            results._writer.close()
        thread.join()

    def death(self, broken: BaseException) -> str:
        """Which worker died and how, in words, after ``broken`` (BrokenProcessPool): the pool
        is ended first. The executor ends the others with SIGTERM once one has died, and says
        why it broke where no worker died (a result it could not read)."""
        self.terminate()
        ended = [(pid, code) for pid, code in self._ended.items() if code is not None]
        first = [(pid, code) for pid, code in ended if code != -signal.SIGTERM]
        if not first and broken.__cause__ is not None:  # the cause's traceback: its last line
            said = str(broken.__cause__).strip("\n'").splitlines()
            return f"the worker pool broke: {said[-1] if said else broken}"
        if not (first or ended):
            return "a worker process ended"
        pid, code = (first or ended)[0]
        if code is not None and code < 0:
            how = f"was killed by {_signal_name(-code)}"
            if code == -signal.SIGKILL:
                how += " (what the out-of-memory killer sends)"
        else:
            how = f"exited with code {code}"
        return f"worker process {pid} {how}"

    def __enter__(self) -> Workers:
        return self

    def __exit__(self, kind: type[BaseException] | None, *rest: object) -> None:
        self.close() if kind is None else self.terminate()


def start_pool(
    count: int, initializer: Callable[..., None], initargs: tuple[Any, ...]
) -> tuple[Pool, str]:
    """``count`` :class:`Workers`, each started with ``initializer(*initargs, True)`` (True:
    in a pool); with none asked, or where the system refuses the pool, ``initializer(*initargs)``
    in this process and :class:`Inline`, the same bytes. Second: why there is no pool although
    one was asked for, in words ("" otherwise)."""
    why = ""
    if count > 0:
        try:
            pool = Workers(count, initializer, (*initargs, True))
        except (OSError, NotImplementedError, ImportError) as exc:
            why = _no_pool(exc)
        else:
            keep_freed_memory()  # this process copies each chunk in and its results out
            return pool, why
    initializer(*initargs)
    return Inline(), why


def _no_pool(exc: BaseException) -> str:
    """Why a run has no workers although asked for some: the system refused the pool (its
    semaphores live in /dev/shm: read-only, full or out of inodes in some containers and batch
    systems)."""
    reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    return (
        f"no worker pool: /dev/shm refused its semaphores ({reason}{shm_room()}), so this run "
        "parses and formats in its own process (--workers 0), which is slower; a container "
        "needs a writable /dev/shm with room (docker run --shm-size)"
    )


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


class Inline:
    """:class:`Workers`' stand-in that runs each task at once, in the calling process."""

    def submit(self, func: Callable[..., Any], *args: Any) -> Future[Any]:
        future: Future[Any] = Future()
        future.set_result(func(*args))
        return future

    def close(self) -> None:
        pass

    def terminate(self) -> None:
        pass


Pool = Workers | Inline


def ready() -> None:
    """A task that returns once a worker runs it (has started)."""
