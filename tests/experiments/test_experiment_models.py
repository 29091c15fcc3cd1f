"""What the experiment reads from a model directory, and when it warns about a model."""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import SLICE, TINY_SYSTEM

from rescorer.errors import InputError, RescorerError
from rescorer.experiments.models import (
    SIZE_WORDS,
    model_size,
    model_warnings,
    read_model,
    read_train_log,
    sha256_file,
    train_seconds,
)
from rescorer.model.config import ModelConfig

SYSTEM_TABLE = TINY_SYSTEM / "phrase-table.gz"


def test_what_a_trained_model_says(tiny_model_dir: Path) -> None:
    info = read_model(tiny_model_dir)
    weights = (tiny_model_dir / "model.safetensors").read_bytes()
    assert info.weights_sha256 == hashlib.sha256(weights).hexdigest()
    assert info.direction == "forward"
    assert info.model_config is not None and info.model_config["hidden_size"] == 8
    records = read_train_log(tiny_model_dir)
    best = min((r for r in records if "valid_ppl" in r), key=lambda r: r["valid_ppl"])
    assert (info.updates, info.valid_ppl, info.unigram_ppl) == (
        best["update"],
        best["valid_ppl"],
        best["unigram_ppl"],
    )
    assert info.epochs == best["epoch"]
    assert info.train_seconds == best["time"]
    assert info.training_files == ((str(SYSTEM_TABLE), sha256_file(SYSTEM_TABLE)),)
    assert json.loads(json.dumps(info.to_json()))["weights_sha256"] == info.weights_sha256


def test_training_time_over_resumed_sessions() -> None:
    """Three sessions: the second was killed after its checkpoint at update 300 and resumed
    there; the best weights are from update 400, in the third."""
    log = [
        {"update": 100, "time": 50.0, "train_loss": 5.0},  # each checkpoint after its record
        {"update": 100, "time": 50.0, "best": True, "valid_ppl": 90.0},
        {"update": 200, "time": 100.0, "train_loss": 4.0},
        {"update": 200, "time": 100.0, "best": True, "valid_ppl": 80.0},
        {"update": 250, "time": 130.0},  # killed here: the next session resumes at 200
        {"update": 300, "time": 40.0, "best": True, "valid_ppl": 70.0},
        {"update": 350, "time": 60.0},  # killed: resumed at 300
        {"update": 400, "time": 30.0, "best": True, "valid_ppl": 60.0},
        {"update": 500, "time": 90.0, "best": False, "valid_ppl": 65.0},
    ]
    assert train_seconds(log, 400) == (100.0 + 40.0 + 30.0, 130.0 + 60.0 + 90.0)
    assert train_seconds(log, 200) == (100.0, 280.0)
    assert train_seconds(log, 999) == (None, 280.0)
    assert train_seconds([], None) == (None, 0.0)


@pytest.mark.parametrize(
    ("valid", "unigram", "warns"),
    [
        (6.62, 322.90, False),  # the first edition's 1-hour model
        (160.0, 322.90, False),  # just below half
        (207.48, 322.90, True),  # 4 minutes of training: learning, not yet clearly
        (425.0, 303.0, True),  # worse than a unigram: cost 0.87 BLEU
        (None, None, True),  # no validation at all
    ],
)
def test_a_model_not_clearly_below_its_unigram_is_warned_about(
    tiny_model_dir: Path, valid: float | None, unigram: float | None, warns: bool
) -> None:
    info = replace(read_model(tiny_model_dir), valid_ppl=valid, unigram_ppl=unigram)
    warnings = model_warnings(info, SYSTEM_TABLE, sha256_file(SYSTEM_TABLE))
    assert len(warnings) == warns
    if warns and valid is not None:
        assert f"best validation perplexity {valid:.2f} is not clearly below" in warnings[0]
        assert f"its unigram model's {unigram:.2f}" in warnings[0]


def test_a_model_trained_on_another_table_is_warned_about(tiny_model_dir: Path) -> None:
    info = replace(read_model(tiny_model_dir), valid_ppl=1.0)  # only the table can warn
    assert model_warnings(info, SYSTEM_TABLE, sha256_file(SYSTEM_TABLE)) == []
    (warning,) = model_warnings(info, SLICE, sha256_file(SLICE))
    assert warning.startswith(f"model {tiny_model_dir} was trained on {SYSTEM_TABLE} (sha256 ")
    assert f"not on the system's phrase table {SLICE} (sha256 {sha256_file(SLICE)[:12]})" in (
        warning
    )


def test_a_folder_that_is_no_model_is_refused(tmp_path: Path, tiny_model_dir: Path) -> None:
    with pytest.raises(RescorerError, match="not a rescorer model directory"):
        read_model(tmp_path)
    model = tmp_path / "model"
    shutil.copytree(tiny_model_dir, model)
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "direction": "sideways"}))
    with pytest.raises(RescorerError, match="direction 'sideways', expected one of forward"):
        read_model(model)
    (model / "model.safetensors").unlink()
    with pytest.raises(RescorerError, match=r"no model\.safetensors"):
        read_model(model)


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
        read_model(model)
    log.write_text(json.dumps([1, 2]) + "\n")
    with pytest.raises(InputError, match=rf"{log}:1: expected a JSON object"):
        read_train_log(model)


def test_a_models_size_in_words_names_what_differs_from_the_paper() -> None:
    paper = ModelConfig().to_dict()
    assert {key: value for key, (_, value) in SIZE_WORDS.items()} == {
        key: value for key, value in paper.items() if key != "hidden_size"
    }  # the paper's shapes, as the model's own config has them
    assert model_size({"model_config": paper}) == "hidden 1000"
    small = {**paper, "hidden_size": 256, "tgt_vocab_size": 30000, "maxout_pool": 3}
    assert model_size({"model_config": small}) == (
        "hidden 256, maxout pieces 3, target shortlist 30,000"
    )
    assert model_size({"model_config": {"hidden_size": 500}}) == "hidden 500"  # the rest default
    assert model_size({"label": "old"}) == ""  # a record of an older table1.py
