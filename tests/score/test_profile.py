"""``score --profile`` and ``--workers auto`` (issue 13, item 3), on the CPU."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from click.testing import CliRunner
from conftest import SLICE

from rescorer.cli import cli
from rescorer.score.config import ScoreConfig, resolve_workers
from rescorer.score.pipeline import score_table
from rescorer.score.profile import PHASES


def test_profile_times_every_phase_and_changes_no_byte(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    plain, profiled = tmp_path / "plain.gz", tmp_path / "profiled.gz"
    config = ScoreConfig(device="cpu", chunk_bytes=32768, quiet=True)
    score_table(str(SLICE), str(tiny_model_dir), str(plain), config)
    config = ScoreConfig(device="cpu", chunk_bytes=32768, quiet=True, profile=True)
    stats = score_table(str(SLICE), str(tiny_model_dir), str(profiled), config)
    assert plain.read_bytes() == profiled.read_bytes()
    assert stats.phases is not None
    seconds = stats.phases.seconds
    for name in ("read", "parse", "encoder", "decoder", "readout", "format", "write"):
        assert seconds[name] > 0, name
    assert sum(seconds.values()) <= stats.seconds


def test_cli_prints_the_profile(tiny_model_dir: Path, tmp_path: Path) -> None:
    args = ["score", str(SLICE), "-m", str(tiny_model_dir), "-o", str(tmp_path / "o.gz")]
    result = CliRunner().invoke(cli, [*args, "--profile"])
    assert result.exit_code == 0, result.output
    lines = [line.removeprefix("rescorer score: ") for line in result.output.splitlines()]
    names = [line.split()[0] for line in lines if line.split()]
    assert [n for n in names if n in PHASES] == list(PHASES)
    wall = next(line for line in lines if line.startswith("wall"))
    assert float(wall.split()[1]) > 0


def test_auto_workers() -> None:
    assert resolve_workers("auto", SimpleNamespace(type="cpu")) == 0
    assert 1 <= resolve_workers("auto", SimpleNamespace(type="cuda")) <= 16
    assert resolve_workers(3, SimpleNamespace(type="cuda")) == 3


@pytest.mark.parametrize("value", ["x", "-1", "1.5"])
def test_workers_usage_errors(value: str) -> None:
    args = ["score", "/nonexistent/pt.gz", "-m", "/nonexistent/m", "-o", "/nonexistent/o"]
    result = CliRunner().invoke(cli, [*args, "--workers", value])
    assert result.exit_code == 2 and "--workers" in result.output
