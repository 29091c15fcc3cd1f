"""What a Table 1 run reads from a rescorer model directory."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def model_summary(model: Path) -> dict[str, Any]:
    """Size, updates, time and best validation perplexity of a model directory."""
    summary: dict[str, Any] = {}
    config_path = model / "config.json"
    if config_path.is_file():
        with open(config_path, encoding="utf-8") as f:
            summary["model_config"] = json.load(f).get("model")
    log = model / "train.log.jsonl"
    if log.is_file():
        best, last = None, None
        with open(log, encoding="utf-8") as f:
            for line in f:
                record = json.loads(line)
                last = record
                if "valid_ppl" in record and (
                    best is None or record["valid_ppl"] < best["valid_ppl"]
                ):
                    best = record
        if last is not None:
            summary["updates"] = last.get("update")
            summary["train_seconds"] = last.get("time")
        if best is not None:
            summary["best_valid_ppl"] = best["valid_ppl"]
            summary["unigram_ppl"] = best.get("unigram_ppl")
            summary["best_update"] = best["update"]
    return summary
