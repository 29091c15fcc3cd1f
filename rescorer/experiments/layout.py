"""The work folder of a Table 1 run: where each step's files are, and the run's shared context."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rescorer.experiments.config import Table1Config
from rescorer.experiments.steps import WorkDir
from rescorer.experiments.tools import MosesTools
from rescorer.io.files import iter_raw_lines, open_binary, open_text


@dataclass
class Layout:
    """Paths of the files the steps pass to each other."""

    root: Path

    @property
    def prepare(self) -> Path:
        return self.root / "prepare"

    @property
    def filter(self) -> Path:
        return self.root / "filter"

    def tuned_ini(self, system: str, run: int) -> Path:
        return self.root / f"tune-{system}-{run}" / "tuned.ini"

    def decode_ini(self, system: str, run: int) -> Path:
        if system == "d":
            return self.root / f"prune-d-{run}" / "d.ini"
        return self.tuned_ini(system, run)

    def hyp(self, system: str, run: int, part: str) -> Path:
        return self.root / f"decode-{system}-{run}" / f"{part}.hyp"


@dataclass
class Context:
    cfg: Table1Config
    tools: MosesTools
    paths: Layout
    work: WorkDir
    model: Path | None = None
    records: dict[str, dict[str, Any]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)  # for stderr and results.md


def count_lines(path: Path) -> int:
    """Lines of a plain or gzip file (gzip known by its content, as every rescorer reader does)."""
    with open_binary(str(path)) as stream:
        return sum(1 for _ in iter_raw_lines(stream, str(path)))


def read_lines(path: Path) -> list[str]:
    """The lines of a UTF-8 text file, without their newlines."""
    with open_text(str(path)) as lines:
        return list(lines)
