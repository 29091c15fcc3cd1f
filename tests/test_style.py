"""The code base stays ruff-clean (ruff.toml) and mypy-clean (setup.cfg)."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from conftest import ROOT


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("ruff") is None, reason="ruff is not installed")
def test_ruff_clean() -> None:
    proc = subprocess.run(
        ["ruff", "check", "rescorer", "scripts", "tests"], cwd=ROOT, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("mypy") is None, reason="mypy is not installed")
def test_mypy_clean() -> None:
    """The package and scripts type-check (configuration in setup.cfg; py.typed promises it)."""
    proc = subprocess.run(["mypy", "rescorer", "scripts"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
