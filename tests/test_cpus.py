"""rescorer/cpus.py: the threads a command computes with are the CPUs this process may run on,
said in its first line (issue 39, item 1)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import SLICE, TINY_SYSTEM, TINY_TRAIN_FLAGS

from rescorer.cpus import ThreadChoice, available_cpus, cgroup_cpu_quota, choose_threads


def test_threads_flag_then_omp_then_what_the_process_may_use() -> None:
    assert choose_threads(3, {"OMP_NUM_THREADS": "1"}).threads == 3
    omp = choose_threads(None, {"OMP_NUM_THREADS": "1", "SLURM_CPUS_PER_TASK": "4"})
    assert (omp.threads, omp.why) == (1, "OMP_NUM_THREADS=1")
    count, _ = available_cpus({})
    assert count <= len(os.sched_getaffinity(0))
    assert choose_threads(None, {}).threads == count
    assert choose_threads(None, {"OMP_NUM_THREADS": "junk"}).threads == count


def test_slurm_cpus_per_task_limits_the_default() -> None:
    count, why = available_cpus({"SLURM_CPUS_PER_TASK": "1"})
    assert count == 1 and "SLURM_CPUS_PER_TASK=1" in why


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        ({"cpu.max": "150000 100000\n"}, 1.5),
        ({"cpu.max": "max 100000\n"}, None),
        ({"cpu/cpu.cfs_quota_us": "200000\n", "cpu/cpu.cfs_period_us": "100000\n"}, 2.0),
        ({"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}, None),
        ({}, None),
    ],
)
def test_cgroup_cpu_quota_v2_and_v1(
    tmp_path: Path, files: dict[str, str], expected: float | None
) -> None:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    proc = tmp_path / "proc-cgroup"
    proc.write_text("1:cpu,cpuacct:/\n0::/\n")
    assert cgroup_cpu_quota(str(tmp_path), str(proc)) == expected


def test_a_busy_machine_gets_a_hint_unless_the_user_chose() -> None:
    busy = ThreadChoice(2, "the CPUs this process may run on, by its affinity", 6.2, 2)
    assert "--threads 1 may be faster" in busy.describe()
    assert "busy" not in ThreadChoice(2, "--threads", 6.2, 2).describe()
    assert "busy" not in ThreadChoice(1, "x", 6.2, 2).describe()
    assert "busy" not in ThreadChoice(2, "x", 1.8, 2).describe()
    assert ThreadChoice(1, "x").describe() == "1 thread (x)"


def one_cpu() -> None:
    """``preexec_fn``: the child may run on one CPU only (as ``taskset -c N`` would)."""
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})


def first_line(args: list[str], tmp_path: Path) -> str:
    env = {
        k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "SLURM_CPUS_PER_TASK")
    }
    done = subprocess.run(
        [sys.executable, "-m", "rescorer", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        preexec_fn=one_cpu,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return done.stderr.splitlines()[0]


@pytest.mark.slow
def test_train_under_one_cpu_says_one_thread_first(tmp_path: Path) -> None:
    flags = [f for f in TINY_TRAIN_FLAGS if f != "-q"]
    flags[flags.index("--max-updates") + 1] = "2"
    line = first_line(["train", str(TINY_SYSTEM / "phrase-table.gz"), "-o", "m", *flags], tmp_path)
    assert line.startswith("rescorer train: ") and "1 thread (" in line, line
    assert "affinity" in line, line


@pytest.mark.slow
def test_score_under_one_cpu_says_one_thread_first(tmp_path: Path, tiny_model_dir: Path) -> None:
    line = first_line(["score", str(SLICE), "-m", str(tiny_model_dir), "-o", "o.gz"], tmp_path)
    assert line.startswith("rescorer score: ") and "1 thread (" in line, line
    line = first_line(
        ["score", str(SLICE), "-m", str(tiny_model_dir), "-o", "p.gz", "--threads", "2"], tmp_path
    )
    assert "2 threads (--threads)" in line, line
