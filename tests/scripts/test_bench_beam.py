"""scripts/bench_beam.py on the golden model, a smoke test: it loads HEAD's beam.py beside this
checkout's, runs both and prints the table (the beam's own equivalence with GroundHog's search is
tests/extend/test_extend.py's)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

import pytest
from conftest import GOLDEN, ROOT, SLICE

pytestmark = pytest.mark.skipif(
    shutil.which("git") is None or not (ROOT / ".git").exists(),
    reason="bench_beam.py reads the baseline's beam.py from git: no git checkout here",
)


def test_it_runs_both_beams_and_compares_their_targets() -> None:
    proc = subprocess.run(
        [
            sys.executable, str(ROOT / "scripts" / "bench_beam.py"), "--model",
            str(GOLDEN / "model"), "--table", str(SLICE), "--sources", "30",
            "--batch-sources", "8", "--repeats", "1", "--baseline", "HEAD",
        ],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"^\| baseline \| [\d.]+ \| [\d.]+ \| 1\.00 \|$", proc.stdout, re.M)
    assert re.search(r"^\| this checkout \| [\d.]+ \| [\d.]+ \| [\d.]+ \|$", proc.stdout, re.M)
    assert "the same targets for 30 of 30 sources, in the same order for 30" in proc.stdout
