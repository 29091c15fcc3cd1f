"""rescorer/cpus.py: the threads a command computes with are the CPUs this process may run on,
said in its first line (issue 39, item 1)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import faults
import pytest
from conftest import SAMPLE_TABLE, SLICE, TINY_SYSTEM, TINY_TRAIN_FLAGS

from rescorer.cpus import (
    MAX_THREADS,
    THREADS_PER_CPU,
    ThreadChoice,
    available_cpus,
    busy_threads,
    cap_environment,
    cgroup_cpu_quota,
    choose_threads,
    openmp_library,
    probe_threads,
    refused_thread,
)
from rescorer.errors import RescorerError

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
import bench_threads


def test_threads_flag_then_omp_then_what_the_process_may_use() -> None:
    assert choose_threads(3, {"OMP_NUM_THREADS": "1"}).threads == 3
    omp = choose_threads(None, {"OMP_NUM_THREADS": "1", "SLURM_CPUS_PER_TASK": "4"})
    assert (omp.threads, omp.why) == (1, "OMP_NUM_THREADS=1")
    count, _ = available_cpus({})
    assert count <= len(os.sched_getaffinity(0))
    assert choose_threads(None, {}, load=0.0).threads == count
    assert choose_threads(None, {"OMP_NUM_THREADS": "junk"}, load=0.0).threads == count


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


def test_a_busy_machine_gets_a_hint_where_omp_num_threads_chose() -> None:
    busy = ThreadChoice(2, "OMP_NUM_THREADS=2", 6.2, 2, "OMP_NUM_THREADS")
    assert "--threads 1 may be faster" in busy.describe()
    assert "busy" not in ThreadChoice(2, "--threads", 6.2, 2, "--threads").describe()
    assert "busy" not in ThreadChoice(1, "x", 6.2, 2, "OMP_NUM_THREADS").describe()
    assert "busy" not in ThreadChoice(2, "x", 1.8, 2, "OMP_NUM_THREADS").describe()
    assert ThreadChoice(1, "x").describe() == "1 thread (x)"


@pytest.mark.parametrize(
    ("cpus", "load", "machine", "expected"),
    [
        (2, 0.3, 2, 2),  # idle
        (2, 2.0, 2, 2),  # as busy as its CPUs: still all
        (2, 2.1, 2, 1),  # busier: on 2 CPUs one thread at any load above 2
        (2, 5.1, 2, 1),  # issue 59's machine
        (2, 97.0, 2, 1),
        (32, 33.0, 32, 31),  # a fair share on a larger machine
        (32, 64.0, 32, 16),
        (32, 1000.0, 32, 1),
        (4, 40.0, 64, 4),  # 4 CPUs of a 64-CPU machine at load 40: not busy
        (4, 128.0, 64, 4),  # held to 4 CPUs (Slurm, a cpuset): the load may be the others'
        (2, None, 2, 2),  # no load average (not Linux)
    ],
)
def test_the_default_takes_its_fair_share_on_a_busy_machine(
    cpus: int, load: float | None, machine: int, expected: int
) -> None:
    assert busy_threads(cpus, load, machine) == expected


def test_the_busy_rule_says_why_and_leaves_the_users_choice() -> None:
    machine = os.cpu_count() or 1
    cpus, _ = available_cpus({})
    busy = choose_threads(None, {}, load=10.0 * machine)
    expected = max(1, cpus // 10) if cpus == machine else cpus  # held to some: kept
    assert busy.threads == expected and busy.source == "default"
    if expected < cpus:
        said = f"the machine is busy: load {10.0 * machine:.1f} on {machine} CPUs"
        assert busy.why.startswith(said) and "--threads N to choose" in busy.describe()
    idle = choose_threads(None, {}, load=0.0)
    assert idle.threads == cpus and "busy" not in idle.describe()
    assert choose_threads(1, {}, load=10.0 * machine).why == "--threads"
    omp = choose_threads(None, {"OMP_NUM_THREADS": "1"}, load=10.0 * machine)
    assert (omp.threads, omp.why) == (1, "OMP_NUM_THREADS=1")


def test_thread_counts_beyond_the_cpus_are_capped_and_absurd_ones_refused() -> None:
    cap = THREADS_PER_CPU * available_cpus({})[0]
    asked = choose_threads(4096, {}, load=0.0)
    assert asked.threads == cap and asked.why.startswith(f"--threads 4096 capped at {cap}, ")
    omp = choose_threads(None, {"OMP_NUM_THREADS": "100000"}, load=0.0)
    assert omp.threads == cap and omp.why.startswith(f"OMP_NUM_THREADS=100000 capped at {cap}")
    assert choose_threads(cap, {}, load=0.0).threads == cap
    for absurd in (0, -1, MAX_THREADS + 1, 2**31):
        with pytest.raises(RescorerError, match=f"--threads {absurd}: expected 1 to"):
            choose_threads(absurd, {}, load=0.0)
    for asked in ("100000", "100000,4"):  # libgomp takes a list: the first is the count
        environ = {"OMP_NUM_THREADS": asked}
        cap_environment(environ)
        assert environ == {"OMP_NUM_THREADS": str(cap)}
    for kept in ("1", "junk", str(cap)):
        environ = {"OMP_NUM_THREADS": kept}
        cap_environment(environ)
        assert environ == {"OMP_NUM_THREADS": kept}


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


def score(args: list[str], tmp_path: Path, **kwargs: object) -> subprocess.CompletedProcess[str]:
    return faults.run(
        ["score", str(SAMPLE_TABLE), "--compile", "no", *args], cwd=tmp_path, **kwargs
    )


@pytest.mark.slow
def test_threads_beyond_the_cpus_are_capped_in_the_first_line(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    cap = THREADS_PER_CPU * available_cpus({})[0]
    done = score(["-m", str(tiny_model_dir), "-o", "a.gz", "--threads", "4096"], tmp_path)
    assert done.returncode == 0, done.stderr
    first = done.stderr.splitlines()[0]
    assert f"{cap} threads (--threads 4096 capped at {cap}, " in first, first


@pytest.mark.slow
@pytest.mark.parametrize("count", ["2147483648", "65537", "0"])
def test_an_absurd_thread_count_is_one_error_line(
    tmp_path: Path, tiny_model_dir: Path, count: str
) -> None:
    done = score(["-m", str(tiny_model_dir), "-o", "a.gz", "--threads", count], tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    errors = [line for line in done.stderr.splitlines() if "error" in line]
    assert len(errors) == 1 and errors[0].startswith("rescorer score: error: "), done.stderr
    assert not (tmp_path / "a.gz").exists()


@pytest.mark.slow
def test_omp_num_threads_of_100000_is_capped_before_torch_starts_them(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    """The child may not start many threads (faults.few_threads): 7557308 started 100,000 and
    died at once there (MemoryError, or libgomp's failure)."""
    cpus, _ = available_cpus({})
    env = {**os.environ, "OMP_NUM_THREADS": "100000"}
    done = score(
        ["-m", str(tiny_model_dir), "-o", "a.gz"],
        tmp_path,
        env=env,
        preexec_fn=faults.few_threads(THREADS_PER_CPU * cpus),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    first = done.stderr.splitlines()[0]
    cap = THREADS_PER_CPU * cpus
    assert f"{cap} threads (OMP_NUM_THREADS=100000 capped at {cap}, " in first, first


@pytest.mark.slow
@pytest.mark.parametrize("command", ["score", "train", "sample"])
def test_threads_the_system_refuses_are_one_error_line(
    tmp_path: Path, tiny_model_dir: Path, command: str
) -> None:
    """libgomp ends the process with its own line where the system refuses a thread
    (faults.refused_threads); every command says it in one line of its own instead."""
    args = {
        "score": ["score", str(SAMPLE_TABLE), "-m", str(tiny_model_dir), "-o", "a.gz"],
        "train": ["train", str(TINY_SYSTEM / "phrase-table.gz"), "-o", "a", *TINY_TRAIN_FLAGS],
        "sample": ["sample", str(tiny_model_dir), "the house", "-n", "2", "-o", "a.gz"],
    }[command]
    done = faults.run(args, cwd=tmp_path, env=faults.refused_threads())
    assert done.returncode == 1, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert not any(line.startswith("libgomp") for line in lines), done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert lines[-1].startswith(f"rescorer {command}: error: the operating system refused to ")
    assert not (tmp_path / "a.gz").exists() and not (tmp_path / "a").exists()
    assert [line for line in lines if "error" in line] == [lines[-1]], done.stderr


@pytest.mark.slow
def test_on_a_busy_machine_the_default_takes_fewer_threads_and_says_why_first(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    """A real load (bench_threads.busy_load: spinning processes, niced) until the 1-minute
    load average is above the machine's CPUs; then score without --threads or OMP_NUM_THREADS
    takes fewer threads than its CPUs and says why in its first line (7557308 took them all
    and printed the advice it did not follow)."""
    cpus, machine = available_cpus({})[0], os.cpu_count() or 1
    if cpus < 2 or cpus < machine:
        pytest.skip("one CPU, or held to some of the machine's: the default keeps them")
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    with bench_threads.busy_load(2 * machine + 2, niceness=19):
        if bench_threads.wait_for_load(machine + 0.5, None, 240) <= machine:
            pytest.skip("the load average did not rise above the CPUs in 4 minutes")
        done = score(["-m", str(tiny_model_dir), "-o", "a.gz"], tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    first = done.stderr.splitlines()[0]
    assert re.search(r"score: cpu, fp32, \d+ threads? \(the machine is busy: load ", first), first
    assert int(first.split(", ")[2].split()[0]) < cpus and "--threads N to choose" in first, first


def test_pythons_own_refused_thread_is_one_line_too() -> None:
    """What user_errors prints for ``RuntimeError: can't start new thread`` (a score's
    reader thread, say); other RuntimeErrors are not its business."""

    line = refused_thread(RuntimeError("can't start new thread"))
    assert line is not None and line.startswith("the operating system refused to start a thread")
    assert "--threads 1" in line
    assert refused_thread(RuntimeError("something else")) is None
    assert refused_thread(ValueError("can't start new thread")) is None


def test_the_probe_starts_the_threads_libgomp_would(monkeypatch: pytest.MonkeyPatch) -> None:
    """In this process (torch is loaded, so libgomp is): the probe's child inherits the
    environment and limits that would make libgomp fail."""
    import torch  # noqa: F401  (libgomp)

    assert openmp_library() is not None
    probe_threads(1)  # one thread starts none
    probe_threads(3)
    monkeypatch.setenv("OMP_STACKSIZE", "1000G")
    with pytest.raises(RescorerError, match=r"refused to start 5 threads .*Thread creation failed"):
        probe_threads(5)
