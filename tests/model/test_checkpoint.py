"""The model directory: round trip, a fresh process with no flags, safe formats, errors."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from rescorer.batching import pad_batch
from rescorer.constants import CONFIG_FILE, PROVENANCE_FILE, SRC_VOCAB_FILE, WEIGHTS_FILE
from rescorer.errors import RescorerError
from rescorer.model.checkpoint import describe_model_dir, load_model_dir, save_model_dir
from rescorer.model.encdec import EncoderDecoder, ModelConfig, sequence_logprobs
from rescorer.vocab import Vocab

SRC = ["the", "house", "of", "a"]
TGT = ["la", "maison", "de", "une"]


def write_dir(folder: Path, model: EncoderDecoder) -> tuple[Vocab, Vocab]:
    cfg = model.config
    src_vocab = Vocab(words=tuple(SRC), size=cfg.src_vocab_size)
    tgt_vocab = Vocab(words=tuple(TGT), size=cfg.tgt_vocab_size)
    save_model_dir(
        folder, model, src_vocab, tgt_vocab, {"data": {"lines": 7}}, train_config={"seed": 1}
    )
    return src_vocab, tgt_vocab


def score(model: EncoderDecoder, src_vocab: Vocab, tgt_vocab: Vocab) -> list[float]:
    src = pad_batch([src_vocab.encode_eos(["the", "house"]), src_vocab.encode_eos(["zzz"])])
    tgt = pad_batch([tgt_vocab.encode_eos(["la", "maison"]), tgt_vocab.encode_eos(["de", "x"])])
    with torch.no_grad():
        return sequence_logprobs(model(*src, *tgt)).tolist()


def test_round_trip(tmp_path: Path, tiny_model: EncoderDecoder) -> None:
    src_vocab, tgt_vocab = write_dir(tmp_path, tiny_model)
    loaded = load_model_dir(tmp_path)
    assert loaded.config == tiny_model.config
    assert loaded.src_vocab == src_vocab and loaded.tgt_vocab == tgt_vocab
    assert loaded.provenance == {"data": {"lines": 7}}
    assert not loaded.model.training
    for (name, a), (_, b) in zip(
        tiny_model.state_dict().items(), loaded.model.state_dict().items(), strict=True
    ):
        assert torch.equal(a, b), name
    assert score(loaded.model, src_vocab, tgt_vocab) == score(tiny_model, src_vocab, tgt_vocab)
    assert not list(tmp_path.glob("*.tmp"))  # atomic writes leave nothing behind


@pytest.mark.slow
def test_loads_in_a_fresh_process_with_no_flags(tmp_path: Path, tiny_model: EncoderDecoder) -> None:
    src_vocab, tgt_vocab = write_dir(tmp_path, tiny_model)
    expected = score(tiny_model, src_vocab, tgt_vocab)
    code = (
        "import json, sys, torch\n"
        "from rescorer.model.checkpoint import load_model_dir\n"
        "from rescorer.batching import pad_batch\n"
        "from rescorer.model.encdec import sequence_logprobs\n"
        "m = load_model_dir(sys.argv[1])\n"
        "sv, tv = m.src_vocab, m.tgt_vocab\n"
        "s = pad_batch([sv.encode_eos(['the', 'house']), sv.encode_eos(['zzz'])])\n"
        "t = pad_batch([tv.encode_eos(['la', 'maison']), tv.encode_eos(['de', 'x'])])\n"
        "with torch.no_grad():\n"
        "    print(json.dumps(sequence_logprobs(m.model(*s, *t)).tolist()))\n"
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, env=env
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == pytest.approx(expected, abs=1e-6)


def test_weights_are_plain_safetensors(tmp_path: Path, tiny_model: EncoderDecoder) -> None:
    write_dir(tmp_path, tiny_model)
    raw = (tmp_path / WEIGHTS_FILE).read_bytes()
    (header_len,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + header_len])
    assert header["__metadata__"]["format"] == "pt"
    tensors = {k: v for k, v in header.items() if k != "__metadata__"}
    assert set(tensors) == set(tiny_model.state_dict())
    assert {v["dtype"] for v in tensors.values()} == {"F32"}
    config = json.loads((tmp_path / CONFIG_FILE).read_text())
    assert config["model"] == tiny_model.config.to_dict() and config["train"] == {"seed": 1}


def test_describe(tmp_path: Path, tiny_model: EncoderDecoder) -> None:
    write_dir(tmp_path, tiny_model)
    text = describe_model_dir(tmp_path)
    n_params = sum(p.numel() for p in tiny_model.parameters())
    assert f"parameters: {n_params:,}" in text
    assert "source: shortlist 30 (4 words" in text and "EOS id 40" in text
    assert "lines: 7" in text and "seed: 1" in text


def test_errors_name_the_file(tmp_path: Path, tiny_model: EncoderDecoder) -> None:
    with pytest.raises(RescorerError, match="no such model directory"):
        load_model_dir(tmp_path / "nope")
    write_dir(tmp_path, tiny_model)
    (tmp_path / SRC_VOCAB_FILE).write_text("{}")
    with pytest.raises(RescorerError, match=SRC_VOCAB_FILE):
        load_model_dir(tmp_path)
    write_dir(tmp_path, tiny_model)
    bigger = ModelConfig.from_dict({**tiny_model.config.to_dict(), "hidden_size": 9})
    config = json.loads((tmp_path / CONFIG_FILE).read_text())
    config["model"] = bigger.to_dict()
    (tmp_path / CONFIG_FILE).write_text(json.dumps(config))
    with pytest.raises(RescorerError, match="do not fit"):
        load_model_dir(tmp_path)
    write_dir(tmp_path, tiny_model)
    (tmp_path / WEIGHTS_FILE).write_bytes(b"not safetensors")
    with pytest.raises(RescorerError, match=WEIGHTS_FILE):
        load_model_dir(tmp_path)
    (tmp_path / WEIGHTS_FILE).unlink()
    with pytest.raises(RescorerError, match="missing"):
        load_model_dir(tmp_path)
    (tmp_path / PROVENANCE_FILE).unlink()
    assert "provenance:" in describe_model_dir(tmp_path)
    with pytest.raises(RescorerError, match="differ from the model"):
        save_model_dir(tmp_path, tiny_model, Vocab((), 5), Vocab((), 40), {})


def test_a_diverged_model_is_refused(tmp_path: Path, tiny_model: EncoderDecoder) -> None:
    """A model with NaN weights used to write 'nan' into the table (issue 11, defect 6)."""
    with torch.no_grad():
        tiny_model.dec_rec.cand_proj.weight[0, 0] = float("nan")
    write_dir(tmp_path, tiny_model)
    with pytest.raises(RescorerError, match=r"tensor dec_rec\.cand_proj\.weight holds NaN"):
        load_model_dir(tmp_path)
