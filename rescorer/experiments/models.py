"""What a Table 1 run reads from a rescorer model directory, and what it warns about.

The file names are the model directory's own (:mod:`rescorer.constants`, the names
:class:`rescorer.model.checkpoint.ModelDir` writes); they are read here with :mod:`rescorer.io`'s
readers rather than through ``ModelDir``, which imports torch: this package stays torch-free.

A model is recorded by the sha256 of its weights file, with what it says of its training:
updates, epochs, the best validation perplexity and the unigram model's on the same held-out
pairs (``provenance.json``, else the training log), the training time to the saved weights, and
the files it trained on (their sha256 from ``provenance.json``).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rescorer.constants import CONFIG_FILE, PROVENANCE_FILE, TRAIN_LOG_FILE, WEIGHTS_FILE
from rescorer.errors import InputError, RescorerError
from rescorer.io.inputs import open_text
from rescorer.io.jsonfiles import read_json_object
from rescorer.verdict import LEARNED_RATIO

# A model has "clearly" learned when its best validation perplexity is at most half its unigram
# model's: at least ln 2 = 0.69 nats per predicted word better than word frequencies alone. The
# first edition's 1-hour model was at 6.6 against 323; a model at 425 against 303 cost 0.87 BLEU.
CLEARLY_BELOW = LEARNED_RATIO  # the verdict of train and info (rescorer/verdict.py)
DIRECTIONS = ("forward", "inverse")
# model_config's shapes besides the hidden size: how model_size names them, and the paper's
# values, rescorer.model.config.ModelConfig's defaults (this package may not import
# rescorer.model, tests/test_layout.py; tests/experiments/test_experiment_models.py checks the
# two agree)
SIZE_WORDS = {
    "embed_size": ("embeddings", 100),
    "maxout_units": ("maxout units", 500),
    "maxout_pool": ("maxout pieces", 2),
    "src_vocab_size": ("source shortlist", 15000),
    "tgt_vocab_size": ("target shortlist", 15000),
}


def model_size(model: dict[str, Any]) -> str:
    """A model record's size in words (results.json's ``models``): ``hidden 1000``, then every
    other shape that is not the paper's (``SIZE_WORDS``), e.g. ``hidden 256, target shortlist
    30,000``; "" when the record has no ``model_config`` (a results.json of an older
    table1.py)."""
    config = model.get("model_config")
    if not isinstance(config, dict) or "hidden_size" not in config:
        return ""
    words = [f"hidden {config['hidden_size']}"]
    for key, (name, paper) in SIZE_WORDS.items():
        value = config.get(key, paper)
        if value != paper:
            words.append(f"{name} {value:,}")
    return ", ".join(words)


def sha256_file(path: Path) -> str:
    """The sha256 of a file's bytes (hex)."""
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    except OSError as exc:
        raise RescorerError(f"{path}: cannot read: {exc.strerror}") from exc
    return digest.hexdigest()


def read_train_log(model: Path) -> list[dict[str, Any]]:
    """The records of a model directory's training log, oldest first (none without a log)."""
    path = model / TRAIN_LOG_FILE
    if not path.is_file():
        return []
    records = []
    with open_text(str(path)) as lines:
        for lineno, line in enumerate(lines, start=1):
            try:
                record = json.loads(line)
            except ValueError as exc:
                raise InputError(str(path), lineno, f"not a JSON record: {exc}") from None
            if not isinstance(record, dict):
                raise InputError(str(path), lineno, "expected a JSON object per line")
            records.append(record)
    return records


def train_seconds(records: list[dict[str, Any]], update: int | None) -> tuple[float | None, float]:
    """Training time in a log: (to the checkpoint of ``update``, of every session).

    ``time`` restarts in each session (``--resume``): a record whose time or update goes back
    starts a new one (a progress record and a checkpoint share their update and time). Every
    session counts up to its last checkpoint (a record with ``best``; the next session resumes
    from there, what came after it was done again); the total counts every session to its last
    record. Both include each session's start (reading the data)
    and its validations, as the log's times do.
    """
    sessions: list[list[dict[str, Any]]] = []
    last_time, last_update = None, None
    for record in records:
        t, u = record.get("time"), record.get("update")
        if not isinstance(t, (int, float)) or not isinstance(u, int):
            continue
        if last_time is None or t < last_time or (last_update is not None and u < last_update):
            sessions.append([])
        sessions[-1].append(record)
        last_time, last_update = t, u
    to_update, done = None, 0.0
    for session in sessions:
        checkpoints = [r for r in session if "best" in r]
        hits = [r for r in checkpoints if r["update"] == update]
        if hits:
            to_update = done + float(hits[-1]["time"])
        done += float(checkpoints[-1]["time"]) if checkpoints else 0.0
    return to_update, sum(float(s[-1]["time"]) for s in sessions)


def _direction(config: dict[str, Any], path: Path) -> str:
    """The model's direction: config.json's ``direction`` (top level, or in its ``model`` or
    ``train`` part), forward when absent (directories made before there was a choice)."""
    found = [
        part["direction"]
        for part in (config, config.get("model"), config.get("train"))
        if isinstance(part, dict) and "direction" in part
    ]
    direction = found[0] if found else "forward"
    if direction not in DIRECTIONS:
        raise RescorerError(
            f"{path}: direction {direction!r}, expected one of {', '.join(DIRECTIONS)}"
        )
    return str(direction)


@dataclass(frozen=True)
class ModelInfo:
    """A model directory as the experiment records it."""

    path: str
    weights_sha256: str
    direction: str
    model_config: dict[str, Any] | None
    updates: int | None  # of the saved (best) weights
    epochs: float | None
    valid_ppl: float | None  # the best validation perplexity: the saved weights'
    unigram_ppl: float | None  # a unigram model's on the same held-out pairs
    train_seconds: float | None  # training time to the saved weights (train_seconds)
    train_seconds_total: float | None  # every session, to its end
    training_files: tuple[tuple[str, str], ...]  # (path, sha256) of what it trained on

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["training_files"] = [{"path": p, "sha256": s} for p, s in self.training_files]
        data["train_hours"] = None if self.train_seconds is None else self.train_seconds / 3600
        return data


def read_model(model: Path) -> ModelInfo:
    """What a model directory says of itself; an error when it is not one."""
    config_path, weights = model / CONFIG_FILE, model / WEIGHTS_FILE
    if not config_path.is_file():
        raise RescorerError(f"{model}: not a rescorer model directory (no {CONFIG_FILE})")
    if not weights.is_file():
        raise RescorerError(f"{model}: no {WEIGHTS_FILE} (training has not saved a model yet?)")
    config = read_json_object(config_path, what="a model's config")
    provenance_path = model / PROVENANCE_FILE
    provenance = (
        read_json_object(provenance_path, what="a model's provenance")
        if provenance_path.is_file()
        else {}
    )
    records = read_train_log(model)
    training = provenance.get("training") or {}
    valid = [r for r in records if isinstance(r.get("valid_ppl"), (int, float))]
    best = min(valid, key=lambda r: r["valid_ppl"]) if valid else {}
    updates = training.get("updates", best.get("update"))
    files = (provenance.get("data") or {}).get("files") or []
    to_weights, total = train_seconds(records, updates)
    return ModelInfo(
        path=str(model),
        weights_sha256=sha256_file(weights),
        direction=_direction(config, config_path),
        model_config=config.get("model"),
        updates=updates,
        epochs=training.get("epochs", best.get("epoch")),
        valid_ppl=training.get("valid_ppl", best.get("valid_ppl")),
        unigram_ppl=training.get("unigram_ppl", best.get("unigram_ppl")),
        train_seconds=to_weights,
        train_seconds_total=total if records else None,
        training_files=tuple(
            (str(f.get("path")), str(f.get("sha256"))) for f in files if isinstance(f, dict)
        ),
    )


def model_warnings(info: ModelInfo, table: Path, table_sha256: str) -> list[str]:
    """Why a model may not help the system whose phrase table is ``table``: it has not clearly
    learned (CLEARLY_BELOW), or it was trained on another table."""
    warnings = []
    if info.valid_ppl is None or info.unigram_ppl is None:
        warnings.append(
            f"model {info.path}: no validation perplexity recorded (trained without held-out "
            "pairs?): nothing says that it learned"
        )
    elif info.valid_ppl > CLEARLY_BELOW * info.unigram_ppl:
        warnings.append(
            f"model {info.path}: best validation perplexity {info.valid_ppl:.2f} is not clearly "
            f"below its unigram model's {info.unigram_ppl:.2f} (clearly: at most "
            f"{CLEARLY_BELOW:g} x, here {CLEARLY_BELOW * info.unigram_ppl:.2f}); a model that "
            "has not learned can cost BLEU (train it longer, or check its data)"
        )
    if not info.training_files:
        warnings.append(f"model {info.path}: its provenance names no training data")
    elif table_sha256 not in {sha for _, sha in info.training_files}:
        trained = ", ".join(f"{p} (sha256 {s[:12]})" for p, s in info.training_files)
        warnings.append(
            f"model {info.path} was trained on {trained}, not on the system's phrase table "
            f"{table} (sha256 {table_sha256[:12]}): its vocabularies and scores may not fit"
        )
    return warnings
