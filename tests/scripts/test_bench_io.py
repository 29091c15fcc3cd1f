"""scripts/bench_io.py's parts 2 and 3 run at small sizes: score's stages in one process and
through score's own chunk loop in a pool (shared-memory slots), and the main process's ceiling
with no-op stages, each a table row with its figures."""

from __future__ import annotations

import re
import subprocess
import sys

from conftest import ROOT, SLICE


def bench_io(*args: str) -> str:
    proc = subprocess.run(
        [sys.executable, "bench_io.py", "--table", str(SLICE), *args],
        cwd=ROOT / "scripts",
        capture_output=True,
        text=True,
        timeout=300,  # a hang, not a speed limit
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_the_stages_in_one_process_and_through_the_chunk_loop() -> None:
    out = bench_io("--stages-only", "--max-workers", "2")
    assert re.search(r"^\| main process \| [\d,]+ \| [\d,]+ \| – \|$", out, re.M), out
    for n in (1, 2):
        assert re.search(rf"^\| --workers {n} \| [\d,]+ \| [\d,]+ \| [\d,]+ \|$", out, re.M), out


def test_the_main_process_ceiling_with_no_op_stages() -> None:
    out = bench_io("--noop", "--max-workers", "1", "--repeat", "1")
    assert "(2,090 lines)" in out, out
    assert re.search(r"^\| read, cut, keep order, write \| 1 \| [\d.]+ \| [\d,]+ \| [\d.]+ \|$",
                     out, re.M), out  # fmt: skip
