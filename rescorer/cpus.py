"""How many threads a run computes with: the CPUs this process may run on (torch-free).

A batch job gets what the scheduler grants, not what the machine has: the CPUs of the process's
affinity mask (``taskset``, a cpuset), a cgroup CPU quota (containers, systemd) and Slurm's
``SLURM_CPUS_PER_TASK``, whichever is smallest. ``OMP_NUM_THREADS``, when set, is the user's
own choice (torchrun sets it to 1 for several ranks), and ``--threads N`` overrides all of them.

Two threads on two busy cores can be several times slower than one: a new user's 90-second
training on a 2-core machine at load 6 made 32 updates with two threads against 1,258 with one
(issue 39). So when the user has not chosen and the machine is busier than its CPUs (the
1-minute load average above its CPU count), a run takes its fair share instead
(:func:`busy_threads`), and says why in its first line.

No count is taken beyond :data:`THREADS_PER_CPU` threads per CPU this process may run on
(``OMP_NUM_THREADS=100000`` made torch start that many threads, starve the machine and die):
a larger ``--threads`` or OMP_NUM_THREADS is capped, and the first line says so; a count above
:data:`MAX_THREADS` is refused. The command line caps OMP_NUM_THREADS in its own environment
before torch loads (:func:`cap_environment`), as libgomp and MKL read it then.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass

from rescorer.errors import RescorerError

THREADS_PER_CPU = 2  # the most threads a run takes per CPU it may run on (more are capped)
MAX_THREADS = 1 << 16  # a thread count above this is not a count: refused (--threads, configs)


@dataclass(frozen=True)
class ThreadChoice:
    """The thread count of a run and why it is that."""

    threads: int
    why: str  # "--threads", "OMP_NUM_THREADS=1", "affinity: 2 CPUs" ...
    load: float | None = None  # the 1-minute load average when the choice was made
    machine_cpus: int | None = None  # the CPUs the machine has (os.cpu_count)
    source: str = "default"  # "--threads", "OMP_NUM_THREADS" or "default" (this module's rule)

    def describe(self) -> str:
        """``2 threads (the CPUs this process may run on, by its affinity)``, plus a hint when
        the machine is busier than its CPUs and OMP_NUM_THREADS asked for more than one."""
        text = f"{self.threads} thread{'s' if self.threads != 1 else ''} ({self.why})"
        if (
            self.threads > 1
            and self.source == "OMP_NUM_THREADS"
            and self.load is not None
            and self.machine_cpus
            and self.load > self.machine_cpus
        ):
            text += (
                f"; the machine is busy (load {self.load:.1f} on {self.machine_cpus} CPUs): "
                "--threads 1 may be faster"
            )
        return text


def busy_threads(cpus: int, load: float | None, machine_cpus: int | None) -> int:
    """The default thread count of a process that may run on ``cpus`` CPUs of a machine of
    ``machine_cpus`` at 1-minute ``load``: all ``cpus`` while the load is at most the machine's
    CPUs, else their fair share, ``cpus * machine_cpus / load`` rounded down, at least 1 (on 2
    CPUs: 1 thread at any load above 2). Each of the team's threads waits for the slowest at
    every parallel step, so on CPUs busy with other jobs two threads ran 2.2-3.9 times slower
    than one (issue 59: load 4-5 on 2 CPUs; scripts/bench_threads.py measures it). A process
    held to fewer CPUs than the machine has (taskset, a cpuset, Slurm, a quota) keeps them:
    the machine's load average does not tell its CPUs' load from the others'."""
    if load is None or not machine_cpus or load <= machine_cpus or cpus < machine_cpus:
        return cpus
    return max(1, min(cpus, math.floor(cpus * machine_cpus / load)))


def cgroup_cpu_quota(
    root: str = "/sys/fs/cgroup", proc_cgroup: str = "/proc/self/cgroup"
) -> float | None:
    """The CPUs a cgroup CPU quota grants this process (quota / period; 1.5 for 150 ms per
    100 ms), or None without a quota. cgroup v2 (``cpu.max``) and v1 (``cpu.cfs_quota_us`` and
    ``cpu.cfs_period_us``), at the process's own cgroup and, failing that, at the root."""
    try:
        with open(proc_cgroup, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError:
        lines = []
    v2_path, v1_path = "/", "/"
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if parts[0] == "0" and parts[1] == "":
            v2_path = parts[2] or "/"
        elif "cpu" in parts[1].split(","):
            v1_path = parts[2] or "/"
    candidates = [
        (os.path.join(root, v2_path.lstrip("/"), "cpu.max"), None),
        (os.path.join(root, "cpu.max"), None),
        (os.path.join(root, "cpu", v1_path.lstrip("/"), "cpu.cfs_quota_us"), "v1"),
        (os.path.join(root, "cpu", "cpu.cfs_quota_us"), "v1"),
        (os.path.join(root, "cpu,cpuacct", v1_path.lstrip("/"), "cpu.cfs_quota_us"), "v1"),
    ]
    for path, kind in candidates:
        try:
            with open(path, encoding="ascii") as f:
                text = f.read().split()
            if kind == "v1":
                with open(path.replace("cfs_quota_us", "cfs_period_us"), encoding="ascii") as f:
                    text += f.read().split()
        except OSError:
            continue
        if len(text) < 2 or text[0] in ("max", "-1"):
            return None
        try:
            quota, period = float(text[0]), float(text[1])
        except ValueError:
            return None
        return quota / period if quota > 0 and period > 0 else None
    return None


def _positive_int(text: str | None) -> int | None:
    try:
        value = int(str(text).strip())
    except ValueError:
        return None
    return value if value >= 1 else None


def available_cpus(environ: Mapping[str, str] | None = None) -> tuple[int, str]:
    """(CPUs this process may run on, what limits them): the smallest of its affinity mask, a
    cgroup CPU quota (rounded up) and SLURM_CPUS_PER_TASK."""
    environ = os.environ if environ is None else environ
    try:
        affinity = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        affinity = os.cpu_count() or 1
    limits = [(affinity, "its affinity")]
    quota = cgroup_cpu_quota()
    if quota is not None:
        limits.append((max(1, math.ceil(quota)), f"its cgroup CPU quota of {quota:g}"))
    slurm = _positive_int(environ.get("SLURM_CPUS_PER_TASK"))
    if slurm is not None:
        limits.append((slurm, f"SLURM_CPUS_PER_TASK={slurm}"))
    count, why = min(limits, key=lambda limit: limit[0])
    return count, why


def thread_cap(environ: Mapping[str, str] | None = None) -> tuple[int, str]:
    """(the most threads a run takes, why): :data:`THREADS_PER_CPU` per CPU this process may
    run on (:func:`available_cpus`)."""
    count, why = available_cpus(environ)
    return (
        THREADS_PER_CPU * count,
        f"{THREADS_PER_CPU} per CPU this process may run on ({count}, by {why})",
    )


def check_thread_count(count: int, what: str = "--threads") -> int:
    """``count`` if it is a thread count (1 to :data:`MAX_THREADS`), else a RescorerError."""
    if not 1 <= count <= MAX_THREADS:
        raise RescorerError(f"{what} {count}: expected 1 to {MAX_THREADS:,} threads")
    return count


#: OMP_NUM_THREADS as the environment gave it, where :func:`cap_environment` lowered it.
_ASKED: dict[str, str] = {}


def cap_environment(environ: MutableMapping[str, str] | None = None) -> None:
    """Lower OMP_NUM_THREADS to :func:`thread_cap` where it asks for more (``100000``), before
    torch loads: libgomp and MKL read it then, and every child process inherits it. The value
    asked for is kept for the first line's reason (:func:`choose_threads`)."""
    environ = os.environ if environ is None else environ
    text = environ.get("OMP_NUM_THREADS", "")
    asked = _positive_int(text.split(",")[0])  # "8,2": 8 threads, 2 in nested regions
    cap, _ = thread_cap(environ)
    if asked is not None and asked > cap:
        _ASKED.setdefault("OMP_NUM_THREADS", str(asked))
        environ["OMP_NUM_THREADS"] = str(cap)


def choose_threads(
    requested: int | None,
    environ: Mapping[str, str] | None = None,
    load: float | bool | None = True,
) -> ThreadChoice:
    """``--threads N`` if given, else OMP_NUM_THREADS if set, else the CPUs this process may
    run on (:func:`available_cpus`), fewer on a busy machine (:func:`busy_threads`); none above
    :func:`thread_cap`. ``load``: the 1-minute load average (True: this machine's now)."""
    environ = os.environ if environ is None else environ
    if load is True:
        try:
            load = os.getloadavg()[0]
        except OSError:
            load = None
    figure = None if isinstance(load, bool) else load
    machine = os.cpu_count()
    if requested is not None:
        check_thread_count(requested)
        return _capped(requested, "--threads", f"--threads {requested}", environ, figure, machine)
    omp = _positive_int(environ.get("OMP_NUM_THREADS"))
    if omp is not None:
        asked = _ASKED.get("OMP_NUM_THREADS") if environ is os.environ else None
        name = f"OMP_NUM_THREADS={asked or omp}"
        return _capped(int(asked or omp), "OMP_NUM_THREADS", name, environ, figure, machine)
    count, why = available_cpus(environ)
    reason = f"the CPUs this process may run on, by {why}"
    threads = busy_threads(count, figure, machine)
    if threads < count:
        reason = (
            f"the machine is busy: load {figure:.1f} on {machine} CPUs, so {threads} of the "
            f"{count} CPUs this process may run on, by {why}; --threads N to choose"
        )
    return ThreadChoice(threads, reason, figure, machine)


def _capped(
    count: int,
    source: str,
    name: str,
    environ: Mapping[str, str],
    load: float | None,
    machine: int | None,
) -> ThreadChoice:
    """The choice of ``count`` threads the user asked for (by ``name``), capped."""
    cap, why = thread_cap(environ)
    if count <= cap:
        return ThreadChoice(
            count, "--threads" if source == "--threads" else name, load, machine, source
        )
    return ThreadChoice(cap, f"{name} capped at {cap}, {why}", load, machine, source)


# One parallel region of ``count`` threads in libgomp, each calling free(NULL): what torch's
# first parallel step does, in a child process that has not loaded torch (argv: library, count).
_PROBE = (
    "import ctypes, sys\n"
    "gomp = ctypes.CDLL(sys.argv[1])\n"
    "gomp.GOMP_parallel(ctypes.CDLL(None).free, None, ctypes.c_uint(int(sys.argv[2])), 0)\n"
)


_PROBED: set[int] = set()  # the counts this process started once already


def openmp_library() -> str | None:
    """The GNU OpenMP library (libgomp) this process has loaded (torch's), or None."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
            for line in f:
                path = line.split(maxsplit=5)[-1].strip()
                if os.path.basename(path).startswith("libgomp") and os.path.isfile(path):
                    return path
    except OSError:
        pass
    return None


def probe_threads(count: int) -> None:
    """A RescorerError, one line, where the operating system refuses the ``count`` threads a run
    asked for: libgomp meets a refused thread at torch's first parallel step and ends the
    process with its own line (``libgomp: Thread creation failed: ...``, exit 1), which no
    Python code can catch. So a child process with this one's limits and environment starts
    them first (a process limit, ``ulimit -u``; memory, ``ulimit -v``; a cgroup's pids.max;
    OMP_STACKSIZE). Nothing to do for one thread, or without libgomp."""
    library = openmp_library() if count > 1 and count not in _PROBED else None
    if library is None:
        return
    try:
        done = subprocess.run(
            [sys.executable, "-S", "-I", "-c", _PROBE, library, str(count)],
            capture_output=True,
            text=True,
            errors="replace",
            timeout=300,
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as exc:  # no process to be had at all
        raise RescorerError(thread_failure(count, str(exc))) from None
    if done.returncode != 0:
        said = [line for line in done.stderr.splitlines() if line.strip()]
        reason = said[-1].removeprefix("libgomp: ") if said else f"exit {done.returncode}"
        raise RescorerError(thread_failure(count, reason))
    _PROBED.add(count)


def thread_failure(count: int | None, reason: str) -> str:
    """The error line of a run whose threads the operating system refused."""
    what = f"{count} threads" if count is not None else "a thread"
    return (
        f"the operating system refused to start {what} ({reason.strip()}): a limit on "
        "processes (ulimit -u, a cgroup's pids.max) or memory (ulimit -v) was reached; "
        "fewer threads (--threads 1) need fewer"
    )


def refused_thread(exc: BaseException) -> str | None:
    """The error line for Python's own error where the operating system refused a thread
    (``RuntimeError: can't start new thread``), else None; libgomp's is met before it happens
    (:func:`probe_threads`)."""
    if isinstance(exc, RuntimeError) and "can't start new thread" in str(exc):
        return thread_failure(None, str(exc))
    return None
