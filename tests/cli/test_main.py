"""The console entry point (rescorer.cli.main): what every command's process does around it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import SLICE

# A process that runs main() as the console script does, with a temporary folder that only a
# weakref.finalize callback removes and an atexit callback that reports the collector's state.
ENTRY = """
import atexit, gc, sys, tempfile
from rescorer.cli import main
folder = tempfile.TemporaryDirectory()
print(folder.name, flush=True)
atexit.register(lambda: print("frozen at exit:", gc.get_freeze_count() > 0, flush=True))
sys.argv = ["rescorer", *sys.argv[1:]]
main()
"""


@pytest.mark.parametrize(("args", "code"), [(["check", str(SLICE)], 0), (["check", "/no/pt"], 1)])
def test_the_objects_left_are_frozen_and_exit_callbacks_still_run(
    args: list[str], code: int
) -> None:
    """main() freezes the objects left (the shutdown's collections skip them, 0.9 s of a torch
    command's exit), after success and after an error alike; atexit and finalizers still run."""
    done = subprocess.run(
        [sys.executable, "-c", ENTRY, *args], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == code, done.stderr
    lines = done.stdout.splitlines()
    assert lines[-1] == "frozen at exit: True", done.stdout
    assert not Path(lines[0]).exists()  # the finalizer ran
    if code:
        assert "rescorer check: error: " in done.stderr and "/no/pt" in done.stderr
