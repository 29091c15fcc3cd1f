"""``score --workers`` meets the faults of a cluster node (issue 65), in real processes: a worker
killed by the OOM killer, a /dev/shm that refuses, the whole process group killed by Slurm's
time limit. Each run ends within seconds, with the bytes of a run that met no fault."""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import SLICE
from faults import descendants, private_dev_shm

from rescorer.io.table import read_table
from rescorer.model.checkpoint import save_model_dir
from rescorer.model.encdec import EncoderDecoder, ModelConfig, init_weights_
from rescorer.vocab import build_vocabs

ONE_THREAD = {**os.environ, "OMP_NUM_THREADS": "1"}
LINES = gzip.decompress(SLICE.read_bytes()).decode("utf-8").splitlines()
pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="/proc and /dev/shm: Linux")


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A tiny model, a table of 10 copies of the slice (source phrases distinct per copy: a
    run of a few seconds, still going when a test kills part of it) and one uninterrupted
    ``--workers 2`` run's output."""
    folder = tmp_path_factory.mktemp("worker-faults")
    torch.manual_seed(0)
    pairs = [(e.src, e.tgt) for e in read_table(str(SLICE))]
    src_vocab, tgt_vocab = build_vocabs(pairs, 300, 300)
    model = EncoderDecoder(ModelConfig(300, 300, hidden_size=16, embed_size=8, maxout_units=8))
    init_weights_(model)
    save_model_dir(folder / "model", model, src_vocab, tgt_vocab, {"made_by": __file__})
    big = folder / "big.gz"
    text = "".join(f"{i:02d}{line}\n" for i in range(10) for line in LINES)
    big.write_bytes(gzip.compress(text.encode("utf-8")))
    paths = {"model": folder / "model", "big": big, "whole": folder / "whole.gz"}
    subprocess.run([*score_command(paths), "-o", str(paths["whole"])], check=True, env=ONE_THREAD)
    return paths


def score_command(paths: dict[str, Path], table: str = "big") -> list[str]:
    return [sys.executable, "-m", "rescorer", "score", str(paths[table]), "-m",
            str(paths["model"]), "--device", "cpu", "--precision", "fp32", "--workers", "2",
            "--chunk-bytes", "8192", "--checkpoint-every", "0.02", "-q"]  # fmt: skip


def start_and_wait_for_progress(command: list[str], out: Path) -> subprocess.Popen[str]:
    """``command`` started in its own process group, returned once its progress record says
    that some thousands of lines are written (its workers run)."""
    proc = subprocess.Popen(
        [*command, "-o", str(out)],
        stderr=subprocess.PIPE,
        text=True,
        env=ONE_THREAD,
        start_new_session=True,
    )
    record = Path(f"{out}.partial.json")
    deadline = time.monotonic() + 120
    while proc.poll() is None and time.monotonic() < deadline:
        if record.exists() and json.loads(record.read_text() or "{}").get("next_line", 0) > 3000:
            return proc
        time.sleep(0.01)
    os.killpg(proc.pid, signal.SIGKILL)
    pytest.fail(f"the run ended or made no progress before the fault: {proc.communicate()[1]}")


def workers_of(pid: int) -> list[int]:
    """The pool's worker processes below ``pid`` (not multiprocessing's resource tracker)."""
    found = []
    for child in descendants(pid)[1:]:
        try:
            cmdline = Path(f"/proc/{child}/cmdline").read_bytes()
        except OSError:
            continue
        if b"spawn_main" in cmdline:
            found.append(child)
    return found


@pytest.mark.slow
def test_a_killed_worker_ends_the_run_with_one_line_and_resume_finishes_it(
    tmp_path: Path, run: dict[str, Path]
) -> None:
    """The OOM killer's SIGKILL to one worker: the run used to wait forever for the chunk the
    worker held (a multiprocessing.Pool starts another worker and forgets the task). Now: exit 1
    within seconds, one line naming the signal, OUT.partial kept, and --resume ends with the
    bytes of an uninterrupted run."""
    command, out = score_command(run), tmp_path / "out.gz"
    proc = start_and_wait_for_progress(command, out)
    workers = workers_of(proc.pid)
    assert len(workers) == 2, workers
    os.kill(workers[0], signal.SIGKILL)
    try:
        _, err = proc.communicate(timeout=60)  # a hang, not a speed limit
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail(f"still running 60 s after a worker was killed: {proc.communicate()[1]}")
    assert proc.returncode == 1, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert f"worker process {workers[0]}" in lines[0] and "SIGKILL" in lines[0], err
    assert f"{out}.partial" in lines[0] and "--resume" in lines[0], err
    assert Path(f"{out}.partial").exists() and not out.exists()
    subprocess.run([*command, "-o", str(out), "--resume"], check=True, env=ONE_THREAD)
    assert out.read_bytes() == run["whole"].read_bytes()


def shm_names_mapped(pid: int) -> set[str]:
    """The /dev/shm files (slots, semaphores) that process ``pid`` and its children have mapped
    (a semaphore's maker maps it under a temporary name: its workers under its own)."""
    names = set()
    for process in descendants(pid):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{process}/maps").read_text().splitlines():
                fields = line.split(maxsplit=5)
                path = fields[5] if len(fields) == 6 else ""
                if path.startswith("/dev/shm/") and not path.endswith("(deleted)"):
                    names.add(path[len("/dev/shm/") :])
    return names


@pytest.mark.slow
def test_a_killed_process_group_leaves_nothing_in_dev_shm_once_resumed(
    tmp_path: Path, run: dict[str, Path]
) -> None:
    """Slurm's time limit: SIGKILL to the whole process group, multiprocessing's resource
    tracker included, which would have removed the run's slots and semaphores. They used to
    stay in /dev/shm for good (7-8 slots and 6 semaphores a run, --resume or not); now the
    next run removes those of runs that are gone."""
    command, out = score_command(run), tmp_path / "out.gz"
    proc = start_and_wait_for_progress(command, out)
    left = shm_names_mapped(proc.pid)
    assert any(name.startswith("sem.") for name in left), left  # the pool's semaphores
    assert any(not name.startswith("sem.") for name in left), left  # and slots
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate()
    subprocess.run([*command, "-o", str(out), "--resume"], check=True, env=ONE_THREAD)
    assert out.read_bytes() == run["whole"].read_bytes()
    assert not [name for name in left if Path("/dev/shm", name).exists()]


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["read-only", "full", "out of inodes"])
def test_a_dev_shm_that_refuses_runs_without_workers_with_one_note(
    tmp_path: Path, run: dict[str, Path], kind: str
) -> None:
    """A container's or a batch system's /dev/shm that refuses the pool's semaphores: the run
    used to die with an OSError traceback before the first chunk. Now: no workers, one note
    saying why, and the bytes of a run with workers."""
    prefix = private_dev_shm(kind)
    if isinstance(prefix, str):
        pytest.skip(prefix)
    table = tmp_path / "table.gz"  # a slice's worth: this run has no workers
    table.write_bytes(gzip.compress("".join(f"{line}\n" for line in LINES).encode("utf-8")))
    command = [c for c in score_command({**run, "table": table}, "table") if c != "-q"]
    subprocess.run([*command, "-o", str(tmp_path / "with.gz")], check=True, env=ONE_THREAD)
    done = subprocess.run(
        [*prefix, *command, "-o", str(tmp_path / "without.gz")],
        capture_output=True,
        text=True,
        env=ONE_THREAD,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    notes = [ln for ln in done.stderr.splitlines() if re.search(r"\bnote\b", ln)]
    assert len(notes) == 1 and "/dev/shm" in notes[0] and "--workers 0" in notes[0], done.stderr
    assert (tmp_path / "with.gz").read_bytes() == (tmp_path / "without.gz").read_bytes()


@pytest.mark.slow
def test_the_workers_of_a_killed_main_process_end_too(tmp_path: Path, run: dict[str, Path]) -> None:
    """The OOM killer's SIGKILL to the main process alone: its workers end within seconds
    (an executor's workers hold both ends of its task pipe and used to wait for a task
    forever, the resource tracker, holding the slots, with them)."""
    proc = start_and_wait_for_progress(score_command(run), tmp_path / "out.gz")
    workers = workers_of(proc.pid)
    assert len(workers) == 2, workers
    proc.kill()
    proc.wait()  # not its stderr's end: the workers hold that pipe too
    assert proc.stderr is not None
    proc.stderr.close()
    deadline = time.monotonic() + 60  # a hang, not a speed limit
    while time.monotonic() < deadline and any(running(pid) for pid in workers):
        time.sleep(0.1)
    alive = [pid for pid in workers if running(pid)]
    for pid in alive:
        os.kill(pid, signal.SIGKILL)
    assert not alive, "workers still running 60 s after their main process was killed"


def running(pid: int) -> bool:
    """Process ``pid`` exists and has not ended (a zombie has, its parent not yet told)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] != "Z"
