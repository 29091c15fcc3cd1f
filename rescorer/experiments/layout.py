"""The work folder of a Table 1 run: where each step's files are, and the run's shared context."""

from __future__ import annotations

import gzip
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rescorer.experiments.config import Table1Config
from rescorer.experiments.steps import WorkDir
from rescorer.experiments.tools import MosesTools


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


def count_lines(path: Path) -> int:
    """Lines of a plain or gzip file."""
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rb") as f:
        return sum(1 for _ in f)


def read_lines(path: Path) -> list[str]:
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]
