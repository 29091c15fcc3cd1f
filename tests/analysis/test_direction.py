"""The analyses read table pairs as (source, target): an inverse-direction model is refused with
one line rather than shown as if it scored p(target | source) (issue 24, item 3, not done yet)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import SLICE

from rescorer.cli import cli

COMMANDS = [
    ["sample", "MODEL", "the file", "-o", "-"],
    ["compare", str(SLICE), "the file", "-m", "MODEL", "-o", "-"],
    ["plot", "scatter", str(SLICE), "-m", "MODEL", "-o", "FIG"],
]


@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: " ".join(a[:2]))
def test_an_inverse_model_is_refused(
    args: list[str], tiny_inverse_model_dir: Path, tmp_path: Path
) -> None:
    where = {"MODEL": str(tiny_inverse_model_dir), "FIG": str(tmp_path / "fig.png")}
    result = CliRunner().invoke(cli, [where.get(a, a) for a in args])
    assert result.exit_code == 1, result.output
    assert "inverse-direction model" in result.output
    assert "forward models only" in result.output
