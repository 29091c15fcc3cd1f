"""Hostile model folders (issue 29 item 5): huge or malformed config values and vocabularies
that are not lists of strings give one clear line naming the file and exit 1, never a
traceback or a hang, in every command that opens a model (here ``score`` and ``info``).
Before the schemas (rescorer/model/checkpoint.py CONFIG_SCHEMA, rescorer/vocab.py
VOCAB_SCHEMA) most of these cases ended in a KeyError/TypeError/ValueError traceback, and a
huge hidden_size tried to allocate the model it described."""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from click.testing import CliRunner
from click.testing import Result as CliRunnerResult
from faults import run_unless_hung

from rescorer.cli import cli
from rescorer.model.checkpoint import load_model_dir, min_parameters, save_model_dir
from rescorer.model.encdec import EncoderDecoder, ModelConfig, count_parameters, init_weights_
from rescorer.vocab import Vocab

TABLE = "a b ||| x y ||| 0.5 0.25 0.5 0.125 ||| 0-0 1-1 ||| 2 4 1\n"  # a phrase table line
Edit = Callable[[Any], Any]


@pytest.fixture(scope="module")
def good_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.manual_seed(0)
    config = ModelConfig(6, 6, hidden_size=4, embed_size=3, maxout_units=2)
    model = EncoderDecoder(config)
    init_weights_(model)
    folder = tmp_path_factory.mktemp("good")
    save_model_dir(folder, model, Vocab(("a", "b"), 6), Vocab(("x", "y"), 6), {})
    return folder


def set_in(key: str, value: Any) -> Edit:
    def edit(data: Any) -> Any:
        data["model"][key] = value
        return data

    return edit


def vocab_set(key: str, value: Any) -> Edit:
    def edit(data: Any) -> Any:
        data[key] = value
        return data

    return edit


def without(key: str, inside: str | None = None) -> Edit:
    def edit(data: Any) -> Any:
        (data[inside] if inside else data).pop(key)
        return data

    return edit


# (file, edit, what the one line must say)
CASES: dict[str, tuple[str, Edit, str]] = {
    "hidden-huge": ("config.json", set_in("hidden_size", 10**12), "above the largest allowed"),
    "hidden-hang": ("config.json", set_in("hidden_size", 200_000), "need at least"),
    "tgt-size-huge": ("config.json", set_in("tgt_vocab_size", 10**30), "largest allowed"),
    "hidden-string": ("config.json", set_in("hidden_size", "4"), "expected integer, found a st"),
    "hidden-float": ("config.json", set_in("hidden_size", 4.5), "expected integer, found a num"),
    "hidden-bool": ("config.json", set_in("hidden_size", True), "expected integer"),
    "hidden-null": ("config.json", set_in("hidden_size", None), "expected integer, found null"),
    "hidden-zero": ("config.json", set_in("hidden_size", 0), "below the smallest allowed, 1"),
    "key-missing": ("config.json", without("embed_size", "model"), "'embed_size' is a required"),
    "key-extra": ("config.json", set_in("layers", 2), "Additional properties"),
    "model-list": ("config.json", vocab_set("model", [4, 3]), "model: expected object"),
    "model-missing": ("config.json", without("model"), "'model' is a required"),
    "config-list": ("config.json", lambda d: [d], "not a rescorer model config"),
    "train-string": ("config.json", vocab_set("train", "x"), "train: expected object"),
    "words-string": ("vocab.src.json", vocab_set("words", "ab"), "words: expected array"),
    "words-object": ("vocab.src.json", vocab_set("words", {"a": 1}), "words: expected array"),
    "words-ints": (
        "vocab.src.json",
        vocab_set("words", [1, 2]),
        "expected string, found an integer",
    ),
    "words-lists": (
        "vocab.tgt.json",
        vocab_set("words", [["x"]]),
        "words/0: expected string, found an array",
    ),
    "words-null": (
        "vocab.tgt.json",
        vocab_set("words", [None]),
        "words/0: expected string, found null",
    ),
    "words-empty": ("vocab.tgt.json", vocab_set("words", ["x", ""]), "words/1: '' is not allow"),
    "words-twice": ("vocab.tgt.json", vocab_set("words", ["x", "x"]), "words must be unique"),
    "words-too-many": ("vocab.src.json", vocab_set("words", list("abcdefg")), "do not fit"),
    "words-missing": ("vocab.src.json", without("words"), "'words' is a required"),
    "size-string": ("vocab.src.json", vocab_set("size", "6"), "size: expected integer"),
    "size-float": ("vocab.src.json", vocab_set("size", 6.5), "size: expected integer"),
    "size-huge": ("vocab.src.json", vocab_set("size", 10**30), "above the largest allowed"),
    "size-one": ("vocab.src.json", vocab_set("size", 1), "below the smallest allowed, 2"),
    "vocab-list": ("vocab.tgt.json", lambda d: [d], "not a rescorer vocabulary"),
}


def hostile(tmp_path: Path, good: Path, name: str) -> tuple[Path, str]:
    file, edit, said = CASES[name]
    folder = tmp_path / "model"
    shutil.copytree(good, folder)
    path = folder / file
    path.write_text(json.dumps(edit(json.loads(path.read_text()))))
    return folder, said


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("command", ["score", "info"])
def test_a_hostile_model_folder_gives_one_line(
    tmp_path: Path, good_model: Path, name: str, command: str
) -> None:
    folder, said = hostile(tmp_path, good_model, name)
    if command == "info" and name == "hidden-hang":
        pytest.skip("info builds the model on the meta device: no memory, no weights read")
    table = tmp_path / "pt.txt"
    table.write_text(TABLE)
    args = ["info", str(folder)]
    if command == "score":
        args = ["score", str(table), "-m", str(folder), "-o", str(tmp_path / "o.txt"),
                "--device", "cpu", "-q"]  # fmt: skip
    t0 = time.monotonic()
    result = CliRunner().invoke(cli, args)
    assert time.monotonic() - t0 < 60
    assert result.exit_code == 1, (result.output, result.exception)
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    assert said in lines[0] and str(folder) in lines[0], lines[0]
    assert not (tmp_path / "o.txt").exists()


def test_the_good_model_loads(good_model: Path) -> None:
    loaded = load_model_dir(good_model)
    assert loaded.src_vocab.words == ("a", "b")


@pytest.mark.parametrize(
    "config",
    [
        ModelConfig(6, 6, hidden_size=4, embed_size=3, maxout_units=2),
        ModelConfig(400, 300, hidden_size=24, embed_size=8, maxout_units=12, maxout_pool=3),
        ModelConfig(),
    ],
)
def test_min_parameters_is_a_lower_bound(config: ModelConfig) -> None:
    with torch.device("meta"):
        assert min_parameters(config) <= count_parameters(EncoderDecoder(config))


# --------------------------------------------------------------- issue 38, item 13
def score_output(tmp_path: Path, folder: Path, out_name: str = "out.txt") -> CliRunnerResult:
    table = tmp_path / "pt.txt"
    table.write_text(TABLE)
    out = tmp_path / out_name
    args = ["score", str(table), "-m", str(folder), "-o", str(out), "--device", "cpu", "-q",
            "--column", "logp", "--precision", "fp32"]  # fmt: skip
    return CliRunner().invoke(cli, args)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16])
def test_weights_saved_in_another_float_type_load_as_fp32(
    tmp_path: Path, good_model: Path, dtype: torch.dtype
) -> None:
    """float64 and float16 weights (another tool's safetensors) gave a dtype-mismatch
    traceback when the model ran; they load converted to fp32, and score as the fp32 weights
    they hold."""
    from safetensors.torch import load_file, save_file

    folder = tmp_path / "other"
    shutil.copytree(good_model, folder)
    weights = load_file(good_model / "model.safetensors")
    save_file({k: v.to(dtype) for k, v in weights.items()}, folder / "model.safetensors")
    loaded = load_model_dir(folder)
    assert {p.dtype for p in loaded.model.parameters()} == {torch.float32}
    for name, value in loaded.model.state_dict().items():
        assert torch.equal(value, weights[name].to(dtype).float()), name
    same = score_output(tmp_path, good_model, "fp32.txt")
    converted = score_output(tmp_path, folder, "other.txt")
    assert converted.exit_code == 0, converted.output
    ours = (tmp_path / "other.txt").read_text().split(" ||| ")[2].split()[-1]
    theirs = (tmp_path / "fp32.txt").read_text().split(" ||| ")[2].split()[-1]
    assert same.exit_code == 0
    if dtype == torch.float64:  # fp32 -> fp64 -> fp32 loses nothing
        assert ours == theirs
    else:
        assert float(ours) == pytest.approx(float(theirs), abs=0.05)


def test_integer_weights_are_refused_in_one_line(tmp_path: Path, good_model: Path) -> None:
    from safetensors.torch import load_file, save_file

    folder = tmp_path / "ints"
    shutil.copytree(good_model, folder)
    weights = load_file(good_model / "model.safetensors")
    save_file({k: v.to(torch.int32) for k, v in weights.items()}, folder / "model.safetensors")
    result = score_output(tmp_path, folder)
    assert result.exit_code == 1, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "is int32, expected floating-point weights" in lines[0], lines


@pytest.mark.parametrize(
    ("key", "value", "says"),
    [
        ("batch_size", "64", "train/batch_size: expected integer, found a string"),
        ("max_updates", [1], "train/max_updates: expected integer or null, found an array"),
        ("rho", "0.95", "train/rho: expected number, found a string"),
        ("quiet", 1, "train/quiet: expected boolean, found an integer"),
    ],
)
def test_a_training_config_of_the_wrong_types_names_the_field_and_the_type(
    tmp_path: Path, good_model: Path, key: str, value: Any, says: str
) -> None:
    """``"batch_size": "64"`` in config.json gave a TypeError traceback on train --resume."""
    folder = tmp_path / "model"
    shutil.copytree(good_model, folder)
    config = folder / "config.json"
    data = json.loads(config.read_text())
    data["train"] = {"batch_size": 16, key: value}
    config.write_text(json.dumps(data))
    table = tmp_path / "pt.txt"
    table.write_text(TABLE)
    result = CliRunner().invoke(cli, ["train", str(table), "-o", str(folder), "--resume"])
    assert result.exit_code == 1, (result.output, result.exception)
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and str(config) in lines[0] and says in lines[0], lines


@pytest.mark.parametrize("file", ["config.json", "vocab.tgt.json"])
@pytest.mark.parametrize("command", ["info", "score"])
def test_a_model_file_that_is_a_fifo_is_refused_not_waited_on(
    tmp_path: Path, good_model: Path, file: str, command: str
) -> None:
    """``info`` hung when config.json was a FIFO (open waits for a writer): only regular files
    are opened. A real process, so that a hang is caught (faults.run_unless_hung: blocked
    without CPU time, however slow the machine)."""
    folder = tmp_path / "model"
    shutil.copytree(good_model, folder)
    (folder / file).unlink()
    os.mkfifo(folder / file)
    table, out = tmp_path / "pt.txt", tmp_path / "out.txt"
    table.write_text(TABLE)
    args = ["info", str(folder)]
    if command == "score":
        args = ["score", str(table), "-m", str(folder), "-o", str(out), "--device", "cpu"]
    done = run_unless_hung(args)
    assert done.returncode == 1, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and f"{folder / file}: not a regular file" in lines[0], lines
    assert not out.exists()
