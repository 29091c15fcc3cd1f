"""Issue 24, item 1: an inverse-direction model, p(source | target), trained on the same
table's pairs; its direction in config.json and ``rescorer info``; old directories read as
forward; an unknown direction refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from conftest import GOLDEN, TINY_SYSTEM

from rescorer.cli import cli
from rescorer.constants import CONFIG_FILE, TRAIN_STATE_FILE
from rescorer.errors import RescorerError
from rescorer.io.table import read_table
from rescorer.model.checkpoint import describe_model_dir, load_model_dir
from rescorer.model.encdec import ModelConfig
from rescorer.train.config import TrainConfig
from rescorer.train.loop import train

TINY = ModelConfig(
    src_vocab_size=150, tgt_vocab_size=120, hidden_size=10, embed_size=6, maxout_units=5
)
FAST = TrainConfig(
    batch_size=16,
    device="cpu",
    precision="fp32",
    quiet=True,
    valid_fraction=0.1,
    valid_every=3,
    max_updates=3,
)


def weights(out: Path) -> dict[str, torch.Tensor]:
    return torch.load(out / TRAIN_STATE_FILE, weights_only=True)["model"]


def test_inverse_is_forward_training_on_the_swapped_pairs(tmp_path: Path) -> None:
    """The inverse model of a table is, weight for weight, the forward model of the same pairs
    with the sides swapped (same held-out split, shortlists and order): the encoder reads the
    target phrase, the decoder predicts the source phrase. The same with --pairs."""
    table = TINY_SYSTEM / "phrase-table.gz"
    entries = list(read_table(str(table)))
    src, tgt = tmp_path / "src.txt", tmp_path / "tgt.txt"
    src.write_text("".join(e.src + "\n" for e in entries), encoding="utf-8")
    tgt.write_text("".join(e.tgt + "\n" for e in entries), encoding="utf-8")
    inverse = TrainConfig(**{**FAST.to_dict(), "direction": "inverse"})
    a = train(str(table), tmp_path / "inv", TINY, inverse)
    b = train((str(tgt), str(src)), tmp_path / "fwd-swapped", TINY, FAST)
    train((str(src), str(tgt)), tmp_path / "inv-pairs", TINY, inverse)
    assert (a.train_pairs, a.valid_pairs) == (b.train_pairs, b.valid_pairs)
    wa, wb = weights(tmp_path / "inv"), weights(tmp_path / "fwd-swapped")
    wc = weights(tmp_path / "inv-pairs")
    assert all(torch.equal(wa[k], wb[k]) and torch.equal(wa[k], wc[k]) for k in wa)
    train(str(table), tmp_path / "fwd", TINY, FAST)  # a forward model is another model
    assert not all(torch.equal(wa[k], weights(tmp_path / "fwd")[k]) for k in wa)
    # The shortlists swap sides: the inverse model's source words are the table's target words.
    inv = load_model_dir(tmp_path / "inv")
    assert inv.direction == "inverse"
    assert inv.src_vocab.words == load_model_dir(tmp_path / "fwd-swapped").src_vocab.words
    assert set(inv.src_vocab.words) <= {w for e in entries for w in e.tgt_tokens}
    assert load_model_dir(tmp_path / "fwd").direction == "forward"


def test_cli_inverse_model_config_and_info(tiny_inverse_model_dir: Path) -> None:
    data = json.loads((tiny_inverse_model_dir / CONFIG_FILE).read_text())
    assert data["direction"] == "inverse" and data["train"]["direction"] == "inverse"
    info = CliRunner().invoke(cli, ["info", str(tiny_inverse_model_dir)])
    assert info.exit_code == 0, info.output
    assert "direction: inverse (p(source | target))" in info.output
    assert "source (the table's target phrases): shortlist 200" in info.output


def test_a_directory_without_direction_reads_as_forward() -> None:
    """The committed 0.1.0 golden model has no "direction": it is a forward model."""
    model = GOLDEN / "model"
    assert "direction" not in json.loads((model / CONFIG_FILE).read_text())
    assert load_model_dir(model).direction == "forward"
    assert "direction: forward (p(target | source))" in describe_model_dir(model)


def test_an_unknown_direction_is_refused(tmp_path: Path, tiny_model_dir: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    for path in tiny_model_dir.iterdir():
        if path.is_file():
            (model / path.name).write_bytes(path.read_bytes())
    data = json.loads((model / CONFIG_FILE).read_text())
    (model / CONFIG_FILE).write_text(json.dumps({**data, "direction": "sideways"}))
    expected = (
        f"{model / CONFIG_FILE}: unknown model direction 'sideways': expected forward or inverse"
    )
    with pytest.raises(RescorerError, match="unknown model direction 'sideways'"):
        load_model_dir(model)
    runner = CliRunner()
    for args in (["info", str(model)], ["score", str(GOLDEN / "pairs.phrase-table"), "-m",
                 str(model), "-o", str(tmp_path / "out")]):  # fmt: skip
        result = runner.invoke(cli, args)
        assert result.exit_code == 1, result.output
        assert expected in result.output and "Traceback" not in result.output
    assert not (tmp_path / "out").exists()
    bad = runner.invoke(cli, ["train", "x", "-o", str(tmp_path / "y"), "--direction", "up"])
    assert bad.exit_code == 2 and "'up' is not one of 'forward', 'inverse'" in bad.output


def test_resume_keeps_the_direction(tmp_path: Path, sample_table: Path) -> None:
    out = tmp_path / "m"
    train(str(sample_table), out, TINY, FAST)
    result = CliRunner().invoke(
        cli, ["train", str(sample_table), "-o", str(out), "--resume", "--direction", "inverse"]
    )
    assert result.exit_code == 1
    assert "--direction inverse differs from the saved run's forward" in result.output
