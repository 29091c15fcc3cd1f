"""scripts/table1.py is a batch job too (issue 38, items 8-11): a damaged work folder, a missing
sacreBLEU, Ctrl-C and SIGTERM, and a current folder that holds a ``rescorer/`` folder. Each
ended in a traceback, a late failure, click's ``Aborted!`` or a child left running; each must
end in a correct result or one clear line, 130/143 for signals, and a work folder that a
re-run finishes. On the tiny real Moses system with the real decoder and tuner (skipped when
../shared/tools/moses is absent), as tests/experiments/test_table1.py runs it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import MOSES, ROOT, TINY_SYSTEM

SCRIPT = ROOT / "scripts" / "table1.py"
needs_moses = pytest.mark.skipif(
    not (MOSES / "bin" / "moses").exists(),
    reason=f"the real Moses toolkit is not at {MOSES} (../shared/tools/moses)",
)
pytestmark = pytest.mark.slow


def table1_argv(system: Path, model: Path, work: Path) -> list[str]:
    return [
        sys.executable, str(SCRIPT), str(system), "--model", str(model), "--work", str(work),
        "--moses", str(MOSES), "--max-iterations", "1", "--trials", "100", "--threads", "2",
        "--score-args", "--compile no", "--runs", "1", "--runs-c", "0",
    ]  # fmt: skip


def run_table1(argv: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, cwd=cwd, timeout=600, check=False)


def succeeded(done: subprocess.CompletedProcess[str]) -> None:
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-4000:]


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


# ---------------------------------------- 11. a current folder that holds a rescorer/ folder
@needs_moses
def test_a_rescorer_folder_in_the_current_folder_does_not_shadow_the_package(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    """Run from a folder holding ``rescorer/`` (a checkout's parent), the filter step's
    ``python -m rescorer`` imported that folder and died. Here the folder is a package of its
    own (``rescorer/__init__.py``), which shadows any installation."""
    here = tmp_path / "parent"
    (here / "rescorer").mkdir(parents=True)
    (here / "rescorer" / "__init__.py").write_text("")
    work = tmp_path / "work"
    done = run_table1(table1_argv(TINY_SYSTEM, tiny_model_dir, work), cwd=here)
    succeeded(done)
    assert (work / "results.json").is_file()
