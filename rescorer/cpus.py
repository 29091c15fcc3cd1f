"""How many threads a run computes with: the CPUs this process may run on (torch-free).

A batch job gets what the scheduler grants, not what the machine has: the CPUs of the process's
affinity mask (``taskset``, a cpuset), a cgroup CPU quota (containers, systemd) and Slurm's
``SLURM_CPUS_PER_TASK``, whichever is smallest. ``OMP_NUM_THREADS``, when set, is the user's
own choice (torchrun sets it to 1 for several ranks), and ``--threads N`` overrides all of them.

Two threads on two busy cores can be several times slower than one: a new user's 90-second
training on a 2-core machine at load 6 made 32 updates with two threads against 1,258 with one
(issue 39). The choice is said in each command's first line, with a hint when the machine is
busier than its CPUs.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class ThreadChoice:
    """The thread count of a run and why it is that."""

    threads: int
    why: str  # "--threads", "OMP_NUM_THREADS=1", "affinity: 2 CPUs" ...
    load: float | None = None  # the 1-minute load average when the choice was made
    machine_cpus: int | None = None  # the CPUs the machine has (os.cpu_count)

    def describe(self) -> str:
        """``2 threads (the CPUs this process may run on, by its affinity)``, plus a hint when the
        machine is busier than its CPUs and more than one thread was chosen by default."""
        text = f"{self.threads} thread{'s' if self.threads != 1 else ''} ({self.why})"
        if (
            self.threads > 1
            and self.why != "--threads"
            and self.load is not None
            and self.machine_cpus
            and self.load > self.machine_cpus
        ):
            text += (
                f"; the machine is busy (load {self.load:.1f} on {self.machine_cpus} CPUs): "
                "--threads 1 may be faster"
            )
        return text


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


def choose_threads(requested: int | None, environ: Mapping[str, str] | None = None) -> ThreadChoice:
    """``--threads N`` if given, else OMP_NUM_THREADS if set, else the CPUs this process may
    run on (:func:`available_cpus`)."""
    environ = os.environ if environ is None else environ
    try:
        load: float | None = os.getloadavg()[0]
    except OSError:
        load = None
    machine = os.cpu_count()
    if requested is not None:
        return ThreadChoice(requested, "--threads", load, machine)
    omp = _positive_int(environ.get("OMP_NUM_THREADS"))
    if omp is not None:
        return ThreadChoice(omp, f"OMP_NUM_THREADS={omp}", load, machine)
    count, why = available_cpus(environ)
    return ThreadChoice(count, f"the CPUs this process may run on, by {why}", load, machine)
