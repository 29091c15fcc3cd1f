"""What a Table 1 run reads from a rescorer model directory.

The file names are the model directory's own (:mod:`rescorer.constants`, the names
:class:`rescorer.model.checkpoint.ModelDir` writes); they are read here with :mod:`rescorer.io`'s
readers rather than through ``ModelDir``, which imports torch: this package stays torch-free.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rescorer.constants import CONFIG_FILE, TRAIN_LOG_FILE
from rescorer.errors import InputError
from rescorer.io.files import open_text, read_json_object


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


def model_summary(model: Path) -> dict[str, Any]:
    """Size, updates, time and best validation perplexity of a model directory."""
    summary: dict[str, Any] = {}
    config_path = model / CONFIG_FILE
    if config_path.is_file():
        summary["model_config"] = read_json_object(config_path, what="a model's config").get(
            "model"
        )
    best, last = None, None
    for record in read_train_log(model):
        last = record
        if "valid_ppl" in record and (best is None or record["valid_ppl"] < best["valid_ppl"]):
            best = record
    if last is not None:
        summary["updates"] = last.get("update")
        summary["train_seconds"] = last.get("time")
    if best is not None:
        summary["best_valid_ppl"] = best["valid_ppl"]
        summary["unigram_ppl"] = best.get("unigram_ppl")
        summary["best_update"] = best["update"]
    return summary
