"""scripts/table1.py is a batch job too (issue 38, items 8-11): a damaged work folder, a missing
sacreBLEU, Ctrl-C and SIGTERM, and a current folder that holds a ``rescorer/`` folder. Each
ended in a traceback, a late failure, click's ``Aborted!`` or a child left running; each must
end in a correct result or one clear line, 130/143 for signals, and a work folder that a
re-run finishes. On the tiny real Moses system with the real decoder and tuner (skipped when
../shared/tools/moses is absent), as tests/experiments/test_table1.py runs it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import MOSES, TINY_SYSTEM, default_sigint, relocated_copy
from conftest import table1_argv as argv_of

needs_moses = pytest.mark.skipif(
    not (MOSES / "bin" / "moses").exists(),
    reason=f"the real Moses toolkit is not at {MOSES} (../shared/tools/moses)",
)
pytestmark = pytest.mark.slow


def table1_argv(system: Path, model: Path, work: Path) -> list[str]:
    """The settings of conftest's tiny_table1_work: a copy of it goes on with this command."""
    return argv_of(system, [model], work, "--runs", "1", "--runs-c", "0")


def run_table1(argv: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, cwd=cwd, timeout=600, check=False)


def succeeded(done: subprocess.CompletedProcess[str]) -> None:
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-4000:]


# ----------------------------------------------------------------- 8. a damaged work folder
@needs_moses
def test_a_damaged_work_folder_names_the_file_and_redoes_its_step(
    tmp_path: Path, tiny_table1_work: Path, tiny_model_dir: Path
) -> None:
    """done.json cut short, ``{}`` or ``[]``, and hypotheses cut to 3 of 10 lines each gave a
    traceback (a TypeError, a KeyError, or corpus_stats' ValueError). Now a warning names the
    file and the step, which runs again, and the run ends as an undamaged one does."""
    work = relocated_copy(tiny_table1_work, tmp_path / "work")  # a finished run
    argv = table1_argv(TINY_SYSTEM, tiny_model_dir, work)
    damages = {
        "tune-a-1/done.json": lambda text: text[: len(text) // 2],
        "prepare/done.json": lambda text: "{}",
        "decode-b-model-1/done.json": lambda text: "[]",
        "decode-a-1/test.hyp": lambda text: "".join(text.splitlines(keepends=True)[:3]),
    }
    for name, damage in damages.items():
        path = work / name
        path.write_text(damage(path.read_text(encoding="utf-8")), encoding="utf-8")
        done = run_table1(argv)
        succeeded(done)
        step = name.split("/")[0]
        warnings = [line for line in done.stderr.splitlines() if "warning: /" in line]
        assert len(warnings) == 1 and str(path) in warnings[0], done.stderr
        assert warnings[0].endswith(f": step {step} runs again"), warnings[0]
        assert f"table1: {step}: running" in done.stderr
        assert json.loads((work / step / "done.json").read_text())["seconds"] >= 0
    hyp = (work / "decode-a-1" / "test.hyp").read_text(encoding="utf-8")
    assert len(hyp.splitlines()) == 10  # decoded again, whole


# ------------------------------------------------------------------- 9. no sacreBLEU
def test_without_sacrebleu_the_driver_stops_before_its_first_step(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    """It ran every step, then failed with a traceback in the evaluation. sacreBLEU is made
    unimportable in the driver's process (``sys.modules['sacrebleu'] = None``), not removed."""
    work = tmp_path / "work"
    argv = table1_argv(TINY_SYSTEM, tiny_model_dir, work)
    hide = (
        "import runpy, sys; sys.modules['sacrebleu'] = None; "
        f"sys.argv = {argv[1:]!r}; runpy.run_path(sys.argv[0], run_name='__main__')"
    )
    done = run_table1([sys.executable, "-c", hide])
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("table1: error: sacreBLEU"), done.stderr
    assert "pip install 'rescorer[experiments]'" in lines[0]
    assert not work.exists()  # no step ran


# ---------------------------------------------------------------- 10. Ctrl-C and SIGTERM
def children_of(pid: int) -> list[tuple[int, str]]:
    """The processes whose parent is ``pid``, with their command lines (from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_bytes()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if int(stat.rsplit(b")", 1)[1].split()[1]) == pid:
            found.append((int(entry.name), cmdline))
    return found


@needs_moses
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_driver_ends_its_command_says_so_and_goes_on_when_run_again(
    tmp_path: Path, tiny_table1_work: Path, tiny_model_dir: Path, signum: int
) -> None:
    """Ctrl-C gave click's ``Aborted!`` and exit 1; SIGTERM exit -15, no line, and its child
    ``rescorer filter`` left running. The system's phrase table is a FIFO no one writes, so the
    filter step's command waits in it for as long as the test needs; the signal goes to the
    driver alone (as ``kill PID`` sends it). The work folder is a finished run's, made for
    this copy of the system, less its filter step: the steps after it are done."""
    system = tmp_path / "system"
    shutil.copytree(TINY_SYSTEM, system)
    table = system / "phrase-table.gz"
    table.unlink()
    os.mkfifo(table)
    work = relocated_copy(tiny_table1_work, tmp_path / "work", {TINY_SYSTEM: system})
    shutil.rmtree(work / "filter")
    argv = table1_argv(system, tiny_model_dir, work)
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=default_sigint,
    )  # fmt: skip
    try:
        child: list[tuple[int, str]] = []
        for _ in range(1200):  # the filter command starts within seconds: at most 2 minutes
            child = [c for c in children_of(proc.pid) if " filter " in c[1]]
            if child or proc.poll() is not None:
                break
            time.sleep(0.1)
        assert child, proc.communicate()
        time.sleep(0.5)  # inside the command, waiting in the FIFO
        proc.send_signal(signum)
        _, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + signum, stderr
    assert "Traceback" not in stderr and "Aborted!" not in stderr, stderr
    which = "SIGINT" if signum == signal.SIGINT else "SIGTERM"
    assert stderr.strip().splitlines()[-1] == (
        f"table1: interrupted by {which}; the finished steps in {work} are kept: run the same "
        "command again to go on"
    ), stderr
    with pytest.raises(ProcessLookupError):  # ended, and waited for
        os.kill(child[0][0], 0)
    assert not (work / "filter" / "done.json").exists()
    table.unlink()
    shutil.copyfile(TINY_SYSTEM / "phrase-table.gz", table)
    done = run_table1(argv)
    succeeded(done)
    assert "table1: prepare: done before" in done.stderr
    assert "table1: filter: running" in done.stderr
    assert (work / "filter" / "done.json").is_file() and (work / "results.json").is_file()


def descendants_of(pid: int) -> list[tuple[int, str]]:
    found, todo = [], [pid]
    while todo:
        children = children_of(todo.pop())
        found += children
        todo += [child for child, _ in children]
    return found


@needs_moses
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_sigterm_ends_every_tuning_of_jobs_2_and_a_rerun_goes_on(
    tmp_path: Path, tiny_table1_work: Path, tiny_model_dir: Path
) -> None:
    """With --jobs 2, two MERT runs (each with its decoder) run in two threads of the driver;
    SIGTERM reaches the main thread alone. Every process of both must end, no step be
    recorded as done that did not finish, and the same command go on."""
    work = relocated_copy(tiny_table1_work, tmp_path / "work")  # run 1 of (a) and (b) done
    argv = [*table1_argv(TINY_SYSTEM, tiny_model_dir, work), "--runs", "3", "--jobs", "2"]
    proc = subprocess.Popen(argv, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    try:
        assert proc.stderr is not None
        tuning: list[str] = []
        while len(tuning) < 2:
            line = proc.stderr.readline()
            assert line, "the driver ended before two tunings ran"
            if line.startswith("table1: tune-") and ": running" in line:
                tuning.append(line.split(":")[1].strip())
        processes: list[tuple[int, str]] = []
        for _ in range(600):  # until both MERT runs are running: at most a minute
            processes = descendants_of(proc.pid)
            if sum("mert-moses.pl" in cmd for _, cmd in processes) == 2:
                break
            time.sleep(0.1)
        assert sum("mert-moses.pl" in cmd for _, cmd in processes) == 2, processes
        proc.send_signal(signal.SIGTERM)
        stderr = proc.stderr.read()
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 143, stderr
    assert "Traceback" not in stderr
    assert stderr.strip().splitlines()[-1].startswith("table1: interrupted by SIGTERM"), stderr
    for pid, _ in processes:  # every process of both tunings has ended
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert sorted(tuning) == ["tune-a-2", "tune-b-model-2"]  # the two chains start in either order
    # no step starts once the run stops (a tiny MERT may finish in the 2 s an interrupted
    # command is given to end by itself, and is then done)
    decodes = ["decode-a-2", "decode-b-model-2"]
    assert not any(f"table1: {name}: running" in stderr for name in decodes), stderr
    finished = {name: (work / name / "done.json").exists() for name in [*tuning, *decodes]}
    done = run_table1([*table1_argv(TINY_SYSTEM, tiny_model_dir, work), "--runs", "2"])
    succeeded(done)
    for name, was_done in finished.items():  # the rest runs, the finished tunings do not
        assert f"table1: {name}: {'done before' if was_done else 'running'}" in done.stderr
    assert json.loads((work / "results.json").read_text())["systems"][0]["runs"] == 2


@needs_moses
def test_a_second_driver_on_a_running_work_folder_is_refused(
    tmp_path: Path, tiny_table1_work: Path, tiny_model_dir: Path
) -> None:
    """The same command started again beside a running one (another terminal, a second
    nohup) ran the same steps at once, each removing the other's folders. It is refused
    with one line naming the running driver, before it writes anything; the first goes on."""
    work = relocated_copy(tiny_table1_work, tmp_path / "work")
    argv = [*table1_argv(TINY_SYSTEM, tiny_model_dir, work), "--runs", "2"]
    first = subprocess.Popen(argv, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    try:
        assert first.stderr is not None
        while "tune-a-2: running" not in (line := first.stderr.readline()):
            assert line, "the first driver ended before its tuning"
        config = (work / "config.json").read_bytes()
        second = run_table1(argv)
        assert second.returncode == 1
        assert second.stderr.strip().splitlines() == [
            f"table1: error: {work} is in use by another table1 run (pid {first.pid}, "
            f"{work / 'driver.lock'}): wait for it to end, or end it and run this command again"
        ]
        assert (work / "config.json").read_bytes() == config
        rest = first.stderr.read()
        assert first.wait(timeout=300) == 0, rest
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    assert json.loads((work / "results.json").read_text())["systems"][0]["runs"] == 2


# ---------------------------------------- 11. a current folder that holds a rescorer/ folder
@needs_moses
def test_a_rescorer_folder_in_the_current_folder_does_not_shadow_the_package(
    tmp_path: Path, tiny_table1_work: Path, tiny_model_dir: Path
) -> None:
    """Run from a folder holding ``rescorer/`` (a checkout's parent), the filter step's
    ``python -m rescorer`` imported that folder and died. Here the folder is a package of its
    own (``rescorer/__init__.py``), which shadows any installation. The steps that run
    ``python -m rescorer`` (filter, score) run there; the finished run's others are kept."""
    here = tmp_path / "parent"
    (here / "rescorer").mkdir(parents=True)
    (here / "rescorer" / "__init__.py").write_text("")
    work = relocated_copy(tiny_table1_work, tmp_path / "work")
    for step in ("filter", f"score-{tiny_model_dir.name}", "decode-a-1"):
        shutil.rmtree(work / step)
    done = run_table1(table1_argv(TINY_SYSTEM, tiny_model_dir, work), cwd=here)
    succeeded(done)
    ran = [line.split(":")[1].strip() for line in done.stderr.splitlines() if "running" in line]
    assert ran == ["filter", f"score-{tiny_model_dir.name}", "decode-a-1"], done.stderr
    assert (work / "results.json").is_file()
