"""The work folder of a Table 1 run: where each step's files are, and the run's shared context."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rescorer.experiments.config import Table1Config
from rescorer.experiments.models import ModelInfo
from rescorer.experiments.steps import WorkDir
from rescorer.experiments.systems import Model, System
from rescorer.experiments.tools import MosesTools
from rescorer.io.inputs import iter_raw_lines, open_binary, open_text

TABLE_FILE = "phrase-table.gz"  # the table a score or extend step writes in its folder


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

    def scored_table(self, system: System) -> Path:
        """The filtered table with ``system``'s new columns (the score step's output)."""
        assert system.score_step is not None
        return self.root / system.score_step / TABLE_FILE

    def extended_table(self, system: System) -> Path:
        """(f): the scored table filled up with the model's own pairs (the extend step's)."""
        assert system.extend_step is not None
        return self.root / system.extend_step / TABLE_FILE

    def generated_pairs(self, system: System) -> Path:
        """(f): the pairs the extend step added, ``source ||| target`` a line."""
        assert system.extend_step is not None
        return self.root / system.extend_step / "new-pairs.txt"

    def start_ini(self, system: System) -> Path:
        """The ini ``system`` tunes from: the shipped weights (+ its new columns')."""
        step = system.extend_step or system.score_step
        if step is None:
            return self.filter / "a.ini"
        return self.root / step / "start.ini"

    def tuned_ini(self, key: str, run: int) -> Path:
        return self.root / f"tune-{key}-{run}" / "tuned.ini"

    def pruned_ini(self, key: str, run: int) -> Path:
        return self.root / f"prune-{key}-{run}" / "pruned.ini"

    def decode_ini(self, system: System, run: int) -> Path:
        if system.pruned_from is not None:
            return self.pruned_ini(system.key, run)
        return self.tuned_ini(system.key, run)

    def hyp(self, key: str, run: int, part: str) -> Path:
        return self.root / f"decode-{key}-{run}" / f"{part}.hyp"

    def segmentation(self, key: str, run: int) -> Path:
        """(f): the test 1-best with -report-segmentation's source spans."""
        return self.root / f"decode-{key}-{run}" / "test.seg"


@dataclass
class Context:
    cfg: Table1Config
    tools: MosesTools
    paths: Layout
    work: WorkDir
    models: dict[str, Model] = field(default_factory=dict)  # by label
    infos: dict[str, ModelInfo] = field(default_factory=dict)  # what each says of itself
    best: str = ""  # the label of the model of (c)-(f) and MIRA's (b)
    systems: list[System] = field(default_factory=list)
    records: dict[str, dict[str, Any]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)  # for stderr and results.md

    def system(self, key: str) -> System:
        return next(s for s in self.systems if s.key == key)


def count_lines(path: Path) -> int:
    """Lines of a plain or gzip file (gzip known by its content, as every rescorer reader does)."""
    with open_binary(str(path)) as stream:
        return sum(1 for _ in iter_raw_lines(stream, str(path)))


def read_lines(path: Path) -> list[str]:
    """The lines of a UTF-8 text file, without their newlines."""
    with open_text(str(path)) as lines:
        return list(lines)
