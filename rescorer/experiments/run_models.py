"""The models of a Table 1 run or plan: each --model and --inverse-model folder read and
checked (its direction, the weights the work folder knew under its label), the warnings
before the long steps, and the best model (the lowest validation perplexity). A plan waits
for a model still training (:func:`add_planned_model`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from rescorer.constants import CONFIG_FILE, WEIGHTS_FILE
from rescorer.durations import parse_duration
from rescorer.errors import RescorerError
from rescorer.experiments.config import check_work_dir, model_label
from rescorer.experiments.layout import Context
from rescorer.experiments.models import ModelInfo, model_warnings, read_model, sha256_file
from rescorer.experiments.systems import Model


class HasModels(Protocol):
    models: dict[str, Model]  # by label
    infos: dict[str, ModelInfo]  # what each says of itself


@dataclass
class PlanModels:
    """The models of a plan (a run's are in its Context)."""

    models: dict[str, Model] = field(default_factory=dict)
    infos: dict[str, ModelInfo] = field(default_factory=dict)


def add_model(
    ctx: HasModels, path: Path, direction: str, option: str, label: str | None = None
) -> None:
    """Read a model directory (refused when it is none, or of the other direction)."""
    try:
        info = read_model(path)
    except RescorerError as exc:
        raise RescorerError(f"{option} {path}: {exc}") from None
    if info.direction != direction:
        article = {"forward": "a forward", "inverse": "an inverse"}
        how = "--direction inverse" if direction == "inverse" else "without --direction"
        raise RescorerError(
            f"{option} {path}: {article[info.direction]}-direction model; expected "
            f"{article[direction]} one (rescorer train {how})"
        )
    label = label or model_label(path)
    ctx.models[label] = Model(label, path, direction)
    ctx.infos[label] = info


def add_models(ctx: Context, *, record_new: bool) -> None:
    """The --model and --inverse-model folders of ``ctx.cfg``, checked against the weights the
    work folder knew under their labels (new labels recorded when ``record_new``)."""
    cfg = ctx.cfg
    for path in cfg.models:
        add_model(ctx, path, "forward", "--model")
    if cfg.inverse_model is not None:
        add_model(ctx, cfg.inverse_model, "inverse", "--inverse-model")
    weights = {label: info.weights_sha256 for label, info in ctx.infos.items()}
    check_work_dir(cfg, weights, record_new=record_new)


def warn_about_models(ctx: Context) -> None:
    """Warn, before the long steps, when a model may not help this system."""
    table = ctx.records["filter"]
    sha = table.get("phrase_table_sha256") or sha256_file(Path(table["phrase_table"]))
    for info in ctx.infos.values():
        for warning in model_warnings(info, Path(table["phrase_table"]), sha):
            ctx.warnings.append(warning)
            ctx.work.say(f"table1: warning: {warning}")


def best_model(ctx: HasModels) -> str:
    """The forward model of the lowest validation perplexity (the last one given on a tie)."""
    forward = [label for label, m in ctx.models.items() if m.direction == "forward"]

    def ppl(label: str) -> float:
        value = ctx.infos[label].valid_ppl
        return math.inf if value is None else value

    return min(reversed(forward), key=ppl)


def add_planned_model(
    ctx: PlanModels, path: Path, direction: str, option: str, waiting: list[Path]
) -> None:
    """:func:`add_model` for a plan. A model still training is waited for: a folder without
    a config or weights yet (``rescorer train -o`` made it), or an absent ``NAME@LABEL`` whose
    training folder ``NAME`` is beside it (a snapshot scripts/train_snapshots.py has not
    copied yet). Anything else absent is refused, so a mistyped path is not planned as a
    model to come."""
    if not (path / CONFIG_FILE).is_file() or not (path / WEIGHTS_FILE).is_file():
        if path.exists() and not path.is_dir():
            raise RescorerError(f"{option} {path}: a file, not a model folder")
        if not path.is_dir():
            _check_snapshot_to_come(path, option)
        waiting.append(path)
        ctx.models[model_label(path)] = Model(model_label(path), path, direction)
        return
    add_model(ctx, path, direction, option)


def _check_snapshot_to_come(path: Path, option: str) -> None:
    """Refuse an absent ``path`` unless it names a snapshot ``NAME@LABEL`` that
    scripts/train_snapshots.py will copy from the training folder ``NAME`` beside it, LABEL a
    duration (its ``--snapshot``)."""
    name, at, label = path.name.rpartition("@")
    why = "no such model folder"
    if at and name:
        try:
            parse_duration(label)
        except RescorerError as exc:
            why += f", and {label!r} after the @ is not a snapshot's duration ({exc})"
        else:
            if path.with_name(name).is_dir():
                return
            why += f", and no training folder {path.with_name(name)} beside it"
    raise RescorerError(
        f"{option} {path}: {why} (a model still training is planned by its folder, or a "
        "snapshot NAME@LABEL by its training folder NAME)"
    )
