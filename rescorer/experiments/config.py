"""What a Table 1 run is: its settings, their validation, and the work folder's record of them.

A work folder remembers the settings that change results (``config.json``); going on in it with
other values is refused, so every step in one folder comes from one experiment.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rescorer.errors import RescorerError
from rescorer.io.files import write_json

SYSTEMS = {
    "a": "baseline",
    "b": "+RNN",
    "c": "+RNN+WP",
    "d": "+RNN, top-K table",
}
TUNED = ("a", "b", "c")  # (d) reuses (b)'s tuned weights


TUNERS = ("mert", "mira")
# Settings that change results: a work directory made with other values is refused.
RESULT_KEYS = (
    "system",
    "model",
    "train_budget",
    "train_args",
    "score_args",
    "dev_lines",
    "max_iterations",
    "tuner",
    "top_k",
    "new_weight",
    "seed",
    "src",
    "tgt",
    "feature_name",
)


@dataclass(frozen=True)
class Table1Config:
    """What ``scripts/table1.py`` runs; every field is recorded in results.json."""

    system: Path
    work: Path
    moses: Path
    model: Path | None = None  # a rescorer model directory, or train one with train_budget
    train_budget: str | None = None  # --max-time of `rescorer train`, e.g. 2h
    train_args: tuple[str, ...] = ()  # more `rescorer train` flags, e.g. --hidden-size 256
    score_args: tuple[str, ...] = ()  # more `rescorer score` flags, e.g. --precision fp32
    runs: int = 3  # K tuning runs per system
    dev_lines: int | None = None  # tune on the first N dev sentences (None: all)
    max_iterations: int = 10  # mert-moses.pl --maximum-iterations
    tuner: str = "mert"  # mert or mira (mert-moses.pl --batch-mira)
    top_k: int = 5  # system (d): targets kept per source
    new_weight: float = 0.05  # tuning starts the RNN (and WP) weight here (moses-ini --weight)
    threads: int = 2  # decoder threads
    seed: int = 1  # run r of every system uses tuner seed seed * 1000 + r
    src: str = "en"
    tgt: str = "fr"
    feature_name: str | None = None  # the phrase-table feature when the ini has several
    trials: int = 10000  # approximate randomisation trials

    def tuner_seed(self, run: int) -> int:
        return self.seed * 1000 + run

    def recorded(self) -> dict[str, Any]:
        """The settings that change results, as plain JSON values."""
        data = asdict(self)
        return {
            k: (str(v) if isinstance(v, Path) else list(v) if isinstance(v, tuple) else v)
            for k, v in data.items()
            if k in RESULT_KEYS
        }


def check_config(cfg: Table1Config) -> None:
    if (cfg.model is None) == (cfg.train_budget is None):
        raise RescorerError("give a model directory (--model) or --train BUDGET, not both")
    if cfg.runs < 1:
        raise RescorerError(f"--runs {cfg.runs}: expected at least 1 tuning run per system")
    if cfg.tuner not in TUNERS:
        raise RescorerError(f"--tuner {cfg.tuner}: expected one of {', '.join(TUNERS)}")
    if cfg.dev_lines is not None and cfg.dev_lines < 1:
        raise RescorerError(f"--dev-lines {cfg.dev_lines}: expected a positive count")
    if cfg.top_k < 1 or cfg.max_iterations < 1 or cfg.threads < 1:
        raise RescorerError("--top-k, --max-iterations and --threads must be positive")
    if cfg.model is not None and not (cfg.model / "config.json").is_file():
        raise RescorerError(f"--model {cfg.model}: not a rescorer model directory (no config.json)")
    if not (cfg.system / "moses.ini").is_file():
        raise RescorerError(f"{cfg.system}: no moses.ini (expected a Moses system folder)")
    for part in ("dev", "test"):
        for lang in (cfg.src, cfg.tgt):
            path = cfg.system / f"{part}.{lang}"
            if not path.is_file():
                raise RescorerError(f"{cfg.system}: no {path.name} (expected dev/test source/ref)")


def check_work_dir(cfg: Table1Config) -> None:
    """Refuse to go on in a work directory made with settings that change results."""
    path = cfg.work / "config.json"
    if path.is_file():
        with open(path, encoding="utf-8") as f:
            old = json.load(f)
        changed = [k for k in RESULT_KEYS if old.get(k) != cfg.recorded().get(k)]
        if changed:
            raise RescorerError(
                f"{cfg.work} was made with other settings ({', '.join(changed)}): "
                "use a new --work folder or the same settings"
            )
    else:
        cfg.work.mkdir(parents=True, exist_ok=True)
        write_json(path, cfg.recorded())


def absolute(cfg: Table1Config) -> Table1Config:
    from dataclasses import replace

    return replace(
        cfg,
        system=cfg.system.resolve(),
        work=cfg.work.resolve(),
        moses=cfg.moses.resolve(),
        model=cfg.model.resolve() if cfg.model is not None else None,
    )
