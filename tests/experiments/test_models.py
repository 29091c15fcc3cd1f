"""What the experiment reads from a model directory: its training log and summary."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from rescorer.errors import InputError
from rescorer.experiments.models import model_summary, read_train_log


def test_the_summary_of_a_trained_model(tiny_model_dir: Path) -> None:
    records = read_train_log(tiny_model_dir)
    assert [r["update"] for r in records if "valid_ppl" in r] == [10, 20]
    summary = model_summary(tiny_model_dir)
    assert summary["updates"] == 20
    assert summary["model_config"]["hidden_size"] == 8
    best = min((r for r in records if "valid_ppl" in r), key=lambda r: r["valid_ppl"])
    assert summary["best_valid_ppl"] == best["valid_ppl"]
    assert summary["best_update"] == best["update"]


def test_a_damaged_training_log_names_the_file_and_line(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    model = tmp_path / "model"
    shutil.copytree(tiny_model_dir, model)
    log = model / "train.log.jsonl"
    lines = log.read_text().splitlines()
    lines[1] = lines[1][:10]
    log.write_text("\n".join(lines) + "\n")
    with pytest.raises(InputError, match=rf"{log}:2: not a JSON record"):
        model_summary(model)
    log.write_text(json.dumps([1, 2]) + "\n")
    with pytest.raises(InputError, match=rf"{log}:1: expected a JSON object"):
        read_train_log(model)
