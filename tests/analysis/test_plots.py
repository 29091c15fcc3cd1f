"""``rescorer plot`` (issue 15, item 3): each figure is a valid PNG of the expected size."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import SLICE

from rescorer.cli import cli

pytest.importorskip("matplotlib", reason="plot needs the analysis extra")
pytest.importorskip("sklearn", reason="plot needs the analysis extra")


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    assert data[-8:-4] == b"IEND"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


@pytest.mark.parametrize(
    ("args", "size"),
    [
        (["scatter", str(SLICE), "--pairs", "300"], (700, 600)),
        (["words", "--points", "60", "--labels", "20"], (1000, 1000)),
        (["words", "--points", "60", "--side", "both"], (2000, 1000)),
        (["phrases", str(SLICE), "--phrases", "80"], (1600, 1500)),
        (["phrases", str(SLICE), "--phrases", "80", "--zoom", "a brand new phrase"], (1600, 1000)),
    ],
)
def test_plot_writes_a_png(
    args: list[str], size: tuple[int, int], tiny_model_dir: Path, tmp_path: Path
) -> None:
    out = tmp_path / "fig.png"
    result = CliRunner().invoke(cli, ["plot", *args, "-m", str(tiny_model_dir), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert png_size(out) == size
    assert [p.name for p in tmp_path.iterdir()] == ["fig.png"]  # no temporary file left
