"""What a Table 1 run is: its settings, their validation, and the work folder's record of them.

A work folder remembers the settings that change results and the weights of every model it
scored with, by label (``config.json``). Going on in it with other settings, or with other
weights under a label it knows, is refused, so every step in one folder comes from one
experiment; new models (a later snapshot), more runs and new systems can be added to it.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from rescorer.errors import RescorerError
from rescorer.io.jsonfiles import read_json_object, write_json

LAYOUT = 2  # the second edition's work folder (one folder: snapshots, (c)-(e), two tuners)
TRAINED_LABEL = "train"  # the label of a model trained by the driver (--train)
LABEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@+-]*")
# Settings that change results: a work directory made with other values is refused.
RESULT_KEYS = (
    "system",
    "train_budget",
    "train_args",
    "score_args",
    "dev_lines",
    "max_iterations",
    "top_k",
    "new_weight",
    "seed",
    "src",
    "tgt",
    "feature_name",
    "extend_args",
    "start_weights",
)
# Result settings added after work folders were made with this layout: the value an older
# folder's config.json, which lacks them, was made with.
ADDED_KEYS: dict[str, Any] = {"extend_args": [], "start_weights": None}


@dataclass(frozen=True)
class Table1Config:
    """What ``scripts/table1.py`` runs; every field is recorded in results.json."""

    system: Path
    work: Path
    moses: Path
    models: tuple[Path, ...] = ()  # forward model directories: one system (b) each
    train_budget: str | None = None  # or train one: --max-time of `rescorer train`, e.g. 2h
    train_args: tuple[str, ...] = ()  # more `rescorer train` flags, e.g. --hidden-size 256
    best: str | None = None  # the label of the model for (c)-(f) and MIRA's (b)
    inverse_model: Path | None = None  # an inverse-direction model: system (e)
    score_args: tuple[str, ...] = ()  # more `rescorer score` flags, e.g. --precision fp32
    extend_args: tuple[str, ...] = ()  # more `rescorer extend` flags of (f), e.g. -n 10
    runs: int = 3  # K: tuning runs of (a), every (b) and (e)
    runs_c: int | None = None  # K of (c) and (d) (None: runs)
    runs_mira: int = 0  # K of (a) and the best (b) tuned by batch MIRA (0: none)
    runs_f: int = 0  # K of (f), the best model's table filled up by `rescorer extend` (0: none)
    # K of single systems by key, over the above (--runs-of KEY=K): more runs of one system,
    # e.g. where a rule written before tuning asks for them after the first K
    runs_of: tuple[tuple[str, int], ...] = ()
    dev_lines: int | None = None  # tune on the first N dev sentences (None: all)
    max_iterations: int = 10  # mert-moses.pl --maximum-iterations
    top_k: int = 5  # system (d): targets kept per source
    new_weight: float = 0.05  # every new column's starting weight (moses-ini --new-weight)
    # tune from this moses.ini's weights (e.g. train-model.perl's untuned one; None: the
    # system's own, tuned, weights)
    start_weights: Path | None = None
    threads: int = 2  # decoder threads
    jobs: int = 1  # tuning runs (each with its decoding) at once
    seed: int = 1  # run r of every system uses tuner seed seed * 1000 + r
    src: str = "en"
    tgt: str = "fr"
    feature_name: str | None = None  # the phrase-table feature when the ini has several
    trials: int = 10000  # randomisation and bootstrap trials

    @property
    def cd_runs(self) -> int:
        return self.runs if self.runs_c is None else self.runs_c

    def tuner_seed(self, run: int) -> int:
        return self.seed * 1000 + run

    def recorded(self) -> dict[str, Any]:
        """The settings that change results, as plain JSON values."""
        return {k: _plain(v) for k, v in asdict(self).items() if k in RESULT_KEYS}

    def settings(self) -> dict[str, Any]:
        """Every setting, as plain JSON values (results.json's config)."""
        return {k: _plain(v) for k, v in asdict(self).items()}


def _plain(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    return value


def model_label(path: Path) -> str:
    """A model's label in step names and tables: its folder's name (``fwd@3h``)."""
    return path.name


def check_config(cfg: Table1Config) -> None:
    if bool(cfg.models) == (cfg.train_budget is not None):
        raise RescorerError("give model directories (--model) or --train BUDGET, not both")
    if cfg.runs < 1:
        raise RescorerError(f"--runs {cfg.runs}: expected at least 1 tuning run per system")
    if not 0 <= cfg.cd_runs <= cfg.runs:
        raise RescorerError(
            f"--runs-c {cfg.cd_runs}: expected 0 to --runs ({cfg.runs}); system (d) decodes "
            "with the weights of (b)'s run of the same number"
        )
    if cfg.runs_mira < 0:
        raise RescorerError(f"--runs-mira {cfg.runs_mira}: expected 0 or more")
    if cfg.runs_f < 0:
        raise RescorerError(f"--runs-f {cfg.runs_f}: expected 0 or more")
    given: set[str] = set()
    for key, runs in cfg.runs_of:
        if runs < 1:
            raise RescorerError(f"--runs-of {key}={runs}: expected at least 1 tuning run")
        if key in given:
            raise RescorerError(f"--runs-of {key}: given twice")
        given.add(key)
    if cfg.dev_lines is not None and cfg.dev_lines < 1:
        raise RescorerError(f"--dev-lines {cfg.dev_lines}: expected a positive count")
    counts = {
        "--top-k": cfg.top_k,
        "--max-iterations": cfg.max_iterations,
        "--threads": cfg.threads,
        "--jobs": cfg.jobs,
        "--trials": cfg.trials,
    }
    for option, value in counts.items():
        if value < 1:
            raise RescorerError(f"{option} {value}: expected a positive count")
    models = [*cfg.models, *([cfg.inverse_model] if cfg.inverse_model else [])]
    labels: dict[str, Path] = {}
    for path in models:
        label = model_label(path)
        if not LABEL.fullmatch(label):
            raise RescorerError(
                f"{path}: a model folder's name labels its steps; expected letters, digits "
                "and . _ @ + - (e.g. fwd@3h)"
            )
        if label in labels:
            raise RescorerError(
                f"{path} and {labels[label]}: two models labelled {label} (their folders' "
                "names); give them folders of different names"
            )
        labels[label] = path
    forward = [model_label(p) for p in cfg.models] or [TRAINED_LABEL]
    if cfg.best is not None and cfg.best not in forward:
        raise RescorerError(f"--best {cfg.best}: expected one of the models' labels: {forward}")
    if not (cfg.system / "moses.ini").is_file():
        raise RescorerError(f"{cfg.system}: no moses.ini (expected a Moses system folder)")
    for part in ("dev", "test"):
        for lang in (cfg.src, cfg.tgt):
            path = cfg.system / f"{part}.{lang}"
            if not path.is_file():
                raise RescorerError(f"{cfg.system}: no {path.name} (expected dev/test source/ref)")


def check_work_dir(cfg: Table1Config, weights: dict[str, str], *, record_new: bool = True) -> None:
    """Refuse a work folder made with other settings, or that knew one of these labels with
    other weights (``weights``: label -> sha256); record new labels (unless not
    ``record_new``: then nothing is written)."""
    path = cfg.work / "config.json"
    record = {**cfg.recorded(), "layout": LAYOUT, "models": {}}
    if path.is_file():
        old = read_json_object(path, what="the work folder's settings")
        if old.get("layout") != LAYOUT:
            raise RescorerError(
                f"{cfg.work} was made by the first edition's driver (one model per folder): "
                "use a new --work folder"
            )
        changed = [k for k in RESULT_KEYS if old.get(k, ADDED_KEYS.get(k)) != record.get(k)]
        if changed:
            raise RescorerError(
                f"{cfg.work} was made with other settings ({', '.join(changed)}): "
                "use a new --work folder or the same settings"
            )
        record["models"] = dict(old.get("models") or {})
    for label, sha in weights.items():
        known = record["models"].get(label)
        if known is not None and known != sha:
            raise RescorerError(
                f"{cfg.work} scored with model {label} of weights sha256 {known[:12]}; this "
                f"{label} has {sha[:12]} (still training, or another model?): use a new "
                "--work folder, or a model folder of another name"
            )
        record["models"][label] = sha
    if not record_new:
        return
    cfg.work.mkdir(parents=True, exist_ok=True)
    if not path.is_file() or read_json_object(path) != record:
        write_json(path, record)


def absolute(cfg: Table1Config) -> Table1Config:
    return replace(
        cfg,
        system=cfg.system.resolve(),
        work=cfg.work.resolve(),
        moses=cfg.moses.resolve(),
        models=tuple(m.resolve() for m in cfg.models),
        inverse_model=cfg.inverse_model.resolve() if cfg.inverse_model else None,
        start_weights=cfg.start_weights.resolve() if cfg.start_weights else None,
    )
