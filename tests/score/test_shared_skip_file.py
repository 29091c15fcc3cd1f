"""Two runs sharing one --skip-bad-lines file (issue 58 item 3, a regression of issue 28 item
5): both exited 0 and one run's bad lines were lost, because a run took its locks only once
its model had loaded and its input opened, so runs that overlapped in time did not overlap in
their locks. A run now holds OUT's lock and the skip file's from before it loads anything to
its end, and the skip file's lock is named after the file its name resolves to (a link, or
``./x``, is the same file). Real commands in subprocesses; the first run waits, for as long as
the test wants, on a FIFO as its --input (``--input <(zcat test.en.gz)`` does the same)."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import TINY_SYSTEM

TABLE = TINY_SYSTEM / "phrase-table.gz"
pytestmark = pytest.mark.slow  # real processes


def rescorer(*args: str) -> list[str]:
    return [sys.executable, "-m", "rescorer", *args]


def wait_for_reader(fifo: Path, proc: subprocess.Popen[bytes]) -> int:
    """Our write end of ``fifo`` once ``proc`` has opened it to read."""
    for _ in range(1200):
        try:
            return os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as exc:
            if exc.errno != errno.ENXIO:  # ENXIO: no reader yet
                raise
        assert proc.poll() is None, proc.communicate()[1].decode()
        time.sleep(0.1)
    raise AssertionError("the first run never opened its --input")


def test_a_run_holds_the_skip_file_from_its_start(tmp_path: Path, tiny_model_dir: Path) -> None:
    model = tmp_path / "model"
    shutil.copytree(tiny_model_dir, model)
    table = tmp_path / "pt.txt"
    text = subprocess.check_output(["zcat", TABLE])
    table.write_bytes(text + b"the first run's bad line\n")
    second_table = tmp_path / "pt2.txt"
    second_table.write_bytes(text + b"the second run's bad line\n")
    bad = tmp_path / "bad.txt"
    (tmp_path / "link.txt").symlink_to(bad)
    fifo = tmp_path / "input.fifo"
    os.mkfifo(fifo)
    first = subprocess.Popen(
        rescorer("extend", str(table), "-m", str(model), "--input", str(fifo), "-o",
                 str(tmp_path / "one.txt"), "--skip-bad-lines", str(bad), "--device", "cpu",
                 "-q"),
        stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        writer = wait_for_reader(fifo, first)  # the first run has made its job, and waits
        for name in ("bad.txt", "link.txt"):
            second = subprocess.run(
                rescorer("score", str(second_table), "-m", str(model), "-o",
                         str(tmp_path / "two.txt"), "--skip-bad-lines", str(tmp_path / name),
                         "--device", "cpu", "--precision", "fp32", "-q"),
                capture_output=True, text=True, timeout=300,
            )  # fmt: skip
            assert second.returncode == 1, second.stderr
            assert f"(pid {first.pid}) is writing its bad lines there" in second.stderr
            assert not (tmp_path / "two.txt").exists()
        os.write(writer, b"the house\n")
        os.close(writer)
        _, err = first.communicate(timeout=300)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    assert first.returncode == 0, err.decode()
    assert bad.read_bytes() == b"the first run's bad line\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "bad.txt", "input.fifo", "link.txt", "model", "one.txt", "pt.txt", "pt2.txt"
    ]  # fmt: skip
