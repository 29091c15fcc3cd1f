"""Whose files in /dev/shm are whose (rescorer/io/shm.py): a run's names carry its owner's
prefix and a lock that ends with the owner, so a later run removes the files of runs that are
gone and only those; and the room the slots may take."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rescorer.io.shared import Slots
from rescorer.io.shm import SHM, Owner, free_memory, owner, remove_dead, semaphores_named

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="flock, /proc and /dev/shm")

OWNER = """
import sys, time
from rescorer.io.shm import Owner
made = Owner(sys.argv[1])
open(f"{sys.argv[1]}/{made.name()}", "w").close()
open(f"{sys.argv[1]}/sem.{made.prefix}-a1b2c3d4", "w").close()
print(made.prefix, flush=True)
time.sleep(600)
"""


def test_a_later_run_removes_the_files_of_an_owner_that_was_killed_and_only_those(
    tmp_path: Path,
) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", OWNER, str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        dead = proc.stdout.readline().strip()
        assert dead.startswith(f"rescorer-{proc.pid}-"), dead
        mine = Owner(str(tmp_path))  # alive: this process
        for name in (mine.name(), f"sem.{mine.prefix}-e5f6g7h8"):
            (tmp_path / name).touch()
        others = ["psm_0123abcd", "sem.mp-0123abcd", "rescorer-9-deadbeef-0"]  # no lock: kept
        for name in others:
            (tmp_path / name).touch()
        everything = sorted(os.listdir(tmp_path))
        assert remove_dead(str(tmp_path)) == []  # both owners alive
        proc.kill()
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
    removed = remove_dead(str(tmp_path))
    assert sorted(removed) == [f"{dead}-0", f"{dead}.lock", f"sem.{dead}-a1b2c3d4"]
    assert removed[-1] == f"{dead}.lock"  # the lock last: no file is left without one
    assert sorted(os.listdir(tmp_path)) == sorted(set(everything) - set(removed))
    mine.release()
    assert not Path(mine.path).exists()


@pytest.mark.skipif(not Path(SHM).is_dir(), reason="no /dev/shm")
@pytest.mark.parametrize("loky", [False, True], ids=["multiprocessing", "joblib-loky-imported"])
def test_the_pool_semaphores_and_the_slots_carry_the_owner_prefix(loky: bool) -> None:
    """A semaphore made under semaphores_named is /dev/shm/sem.PREFIX-...; one made after it
    is named multiprocessing's way. Also once joblib's loky is imported, which replaces
    multiprocessing's names for every caller (the analyses import it: a CI run failed here)."""
    if loky:
        pytest.importorskip("joblib.externals.loky.backend", reason="joblib is not installed")
    made = owner()
    assert made is not None
    ours = f"sem.{made.prefix}-"
    before = {n for n in os.listdir(SHM) if n.startswith(ours)}
    with semaphores_named():
        lock = multiprocessing.get_context("spawn").Lock()
    name = lock._semlock.name  # type: ignore[attr-defined]
    assert name.startswith(f"/{made.prefix}-"), name
    assert {n for n in os.listdir(SHM) if n.startswith(ours)} - before == {f"sem.{name[1:]}"}
    other = multiprocessing.get_context("spawn").Lock()  # after: multiprocessing's own name
    assert not other._semlock.name.startswith(f"/{made.prefix}"), other._semlock.name  # type: ignore[attr-defined]
    del lock, other
    with Slots(4096, 1) as slots:
        slot = slots.put(b"abc")
        assert slot is not None and slot.name.startswith(f"{made.prefix}-")


def test_the_slots_take_at_most_half_the_memory_left(tmp_path: Path) -> None:
    """A /dev/shm larger than the memory would take all of it: fewer slots than the chunks in
    flight, said once; the rest crosses through pipes."""
    notes: list[str] = []
    with Slots(4096, 10, notes.append, memory=7 * 4096) as slots:
        assert slots.count == 3
        made = [slots.put(b"x") for _ in range(4)]
        assert [s is not None for s in made] == [True, True, True, False]
    assert len(notes) == 1 and "3 of the 10" in notes[0], notes


def test_free_memory_is_the_least_of_the_machine_the_cgroups_and_dev_shm(tmp_path: Path) -> None:
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal: 8000000 kB\nMemAvailable: 4000000 kB\n")
    root = tmp_path / "cgroup"
    job, step = root / "job", root / "job" / "step"
    step.mkdir(parents=True)
    (job / "memory.max").write_text("3000000000\n")  # a parent's limit counts too
    (job / "memory.current").write_text("1000000000\n")
    (step / "memory.max").write_text("max\n")
    (step / "memory.current").write_text("900000000\n")
    proc_cgroup = tmp_path / "self-cgroup"
    proc_cgroup.write_text("0::/job/step\n")
    shm = str(tmp_path)  # a real file system's free space: far more than 2 GB here
    if os.statvfs(shm).f_bavail * os.statvfs(shm).f_frsize < 3_000_000_000:
        pytest.skip("the temporary folder has too little room for this case")
    assert free_memory(str(meminfo), str(root), str(proc_cgroup), shm) == 2_000_000_000
    proc_cgroup.write_text("0::/elsewhere\n")  # no limit: the machine's
    assert free_memory(str(meminfo), str(root), str(proc_cgroup), shm) == 4_096_000_000
    v1 = root / "memory" / "slurm" / "job_7"
    v1.mkdir(parents=True)
    (v1 / "memory.limit_in_bytes").write_text("1500000000\n")
    (v1 / "memory.usage_in_bytes").write_text("500000000\n")
    proc_cgroup.write_text("4:memory:/slurm/job_7\n3:cpu,cpuacct:/slurm/job_7\n")
    assert free_memory(str(meminfo), str(root), str(proc_cgroup), shm) == 1_000_000_000
    missing = str(tmp_path / "none")
    assert free_memory(missing, missing, missing, missing) is None
