"""The self-contained model directory (docs/contracts.md §3).

``config.json`` (model and training configs, and the direction: ``forward`` p(target | source)
or ``inverse`` p(source | target); a directory without it is forward), ``vocab.src.json``,
``vocab.tgt.json``, ``model.safetensors`` (tensors only: loading it cannot run code),
``provenance.json`` (training file, its line count and sha256, versions, date, command line),
the training log ``train.log.jsonl`` and, while a run can be resumed, ``train-state.pt``.
:class:`ModelDir` is the one owner of these files. Every file is written to a temporary name
in the same folder and renamed into place, so a reader never sees half a file.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any, NamedTuple

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from rescorer.constants import (
    CONFIG_FILE,
    DIRECTIONS,
    FORWARD,
    PROVENANCE_FILE,
    SRC_VOCAB_FILE,
    TGT_VOCAB_FILE,
    TRAIN_LOG_FILE,
    TRAIN_STATE_FILE,
    WEIGHTS_FILE,
)
from rescorer.errors import RescorerError
from rescorer.io import jsonfiles
from rescorer.io.jsonfiles import read_json_object, write_json
from rescorer.io.outputs import atomic_path, make_dir, open_writable, write_error
from rescorer.io.schema import schema_problem
from rescorer.model.encdec import EncoderDecoder, ModelConfig, count_parameters
from rescorer.verdict import training_verdict
from rescorer.vocab import Vocab

__all__ = [
    "LoadedModel",
    "ModelDir",
    "describe_model_dir",
    "load_model_dir",
    "model_direction",
    "read_json",
    "save_model_dir",
    "save_weights",
    "write_json",
]

CONFIG_FORMAT = "rescorer-model-1"


class LoadedModel(NamedTuple):
    model: EncoderDecoder  # in eval mode, on the requested device
    config: ModelConfig
    src_vocab: Vocab
    tgt_vocab: Vocab
    provenance: dict[str, Any]
    direction: str = FORWARD  # forward: p(target | source); inverse: p(source | target)


def read_json(path: str | Path) -> Any:
    """A JSON file of a model directory."""
    return jsonfiles.read_json(path, what="not a complete rescorer model directory?")


def save_weights(path: str | Path, model: EncoderDecoder) -> None:
    """The model's parameters as safetensors (fp32, CPU), atomically."""
    state = model.state_dict()
    tensors = {k: v.detach().to("cpu", torch.float32).contiguous() for k, v in state.items()}
    with atomic_path(path) as tmp:  # safetensors writes 0600; atomic_path sets the usual mode
        try:
            save_file(tensors, tmp, metadata={"format": "pt", "config_format": CONFIG_FORMAT})
        except SafetensorError as exc:  # a full disk: one line naming the file
            on_disk = os.path.getsize(tmp) if os.path.exists(tmp) else None
            raise write_error(str(path), exc, on_disk) from exc


class ModelDir:
    """The one owner of a model directory's files.

    Everything that writes into a model directory goes through here: creating it without
    weights, saving weights, updating provenance and the training config, appending to the
    training log, and the resume state's path (which training writes with ``atomic_path``).
    So a data-parallel run needs one rank-0 check: around the calls to this object.
    """

    def __init__(self, folder: str | Path) -> None:
        self.path = Path(folder)
        self.config_path = self.path / CONFIG_FILE
        self.weights_path = self.path / WEIGHTS_FILE
        self.provenance_path = self.path / PROVENANCE_FILE
        self.log_path = self.path / TRAIN_LOG_FILE
        self.state_path = self.path / TRAIN_STATE_FILE
        self.src_vocab_path = self.path / SRC_VOCAB_FILE
        self.tgt_vocab_path = self.path / TGT_VOCAB_FILE

    @classmethod
    def create(
        cls,
        folder: str | Path,
        config: ModelConfig,
        src_vocab: Vocab,
        tgt_vocab: Vocab,
        provenance: dict[str, Any],
        *,
        train_config: dict[str, Any] | None = None,
        direction: str | None = None,
    ) -> ModelDir:
        """A new model directory with everything but weights (and no old training log). The
        direction is ``direction``, else the training config's, else forward."""
        if src_vocab.size != config.src_vocab_size or tgt_vocab.size != config.tgt_vocab_size:
            raise RescorerError(
                f"vocabulary sizes {src_vocab.size}/{tgt_vocab.size} differ from the model's "
                f"{config.src_vocab_size}/{config.tgt_vocab_size}"
            )
        model_dir = cls(folder)
        make_dir(model_dir.path)
        model_dir.log_path.unlink(missing_ok=True)
        if direction is None:
            direction = (train_config or {}).get("direction", FORWARD)
        if direction not in DIRECTIONS:
            raise RescorerError(f"direction {direction!r}: expected {' or '.join(DIRECTIONS)}")
        data: dict[str, Any] = {
            "format": CONFIG_FORMAT,
            "direction": direction,
            "model": config.to_dict(),
        }
        if train_config is not None:
            data["train"] = train_config
        write_json(model_dir.config_path, data)
        src_vocab.save(str(model_dir.src_vocab_path))
        tgt_vocab.save(str(model_dir.tgt_vocab_path))
        write_json(model_dir.provenance_path, provenance)
        return model_dir

    def has_weights(self) -> bool:
        return self.weights_path.exists()

    def save_weights(self, model: EncoderDecoder) -> None:
        save_weights(self.weights_path, model)

    def read_provenance(self) -> dict[str, Any]:
        return read_json_object(self.provenance_path, what="a model's provenance")

    def update_provenance(self, provenance: dict[str, Any]) -> None:
        write_json(self.provenance_path, provenance)

    def update_train_config(self, train_config: dict[str, Any]) -> None:
        write_json(self.config_path, {**read_json(self.config_path), "train": train_config})

    def load_vocabs(self) -> tuple[Vocab, Vocab]:
        return Vocab.load(str(self.src_vocab_path)), Vocab.load(str(self.tgt_vocab_path))

    def append_log(self, record: dict[str, Any]) -> None:
        """One JSON line in the training log."""
        with open_writable(str(self.log_path), "ab") as f:
            f.write((json.dumps(record) + "\n").encode("utf-8"))


def save_model_dir(
    folder: str | Path,
    model: EncoderDecoder,
    src_vocab: Vocab,
    tgt_vocab: Vocab,
    provenance: dict[str, Any],
    *,
    train_config: dict[str, Any] | None = None,
    direction: str | None = None,
) -> None:
    """Write a complete model directory, weights included (creating ``folder`` if needed)."""
    model_dir = ModelDir.create(
        folder,
        model.config,
        src_vocab,
        tgt_vocab,
        provenance,
        train_config=train_config,
        direction=direction,
    )
    model_dir.save_weights(model)


# What config.json must hold (checked before anything is built from it).
_SIZE = {"type": "integer", "minimum": 1, "maximum": 1 << 24}
CONFIG_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["format", "model"],
    "properties": {
        "format": {"const": CONFIG_FORMAT},
        "model": {
            "type": "object",
            "required": [f.name for f in dataclasses.fields(ModelConfig)],
            "additionalProperties": False,
            "properties": {f.name: _SIZE for f in dataclasses.fields(ModelConfig)},
        },
        "train": {"type": "object"},
    },
}


def min_parameters(config: ModelConfig) -> int:
    """A lower bound on the model's parameter count (embeddings, the softmax, the recurrent
    and output matrices: docs/model.md), cheap to compute before the model is built."""
    H, E = config.hidden_size, config.embed_size
    PM = config.maxout_pool * config.maxout_units
    return (config.src_rows + 2 * config.tgt_rows) * E + 7 * H * H + 2 * H * PM


def read_model_config(folder: str | Path) -> tuple[ModelConfig, dict[str, Any]]:
    """The ModelConfig and the whole config.json of a model directory (its direction checked:
    :func:`model_direction`)."""
    path = Path(folder) / CONFIG_FILE
    data = read_json(path)
    if not isinstance(data, dict) or data.get("format") != CONFIG_FORMAT:
        raise RescorerError(f"{path}: not a rescorer model config (format {CONFIG_FORMAT})")
    problem = schema_problem(data, CONFIG_SCHEMA)
    if problem:
        raise RescorerError(f"{path}: bad model config: {problem}")
    model_direction(data, path)
    try:
        return ModelConfig.from_dict(data["model"]), data
    except (KeyError, TypeError, ValueError) as exc:
        raise RescorerError(f"{path}: bad model config: {exc}") from exc


def model_direction(data: dict[str, Any], path: str | Path) -> str:
    """The direction of a config.json's ``data`` (absent: forward, as before 0.2); an unknown
    one is refused, naming the file."""
    direction = data.get("direction", FORWARD)
    if direction not in DIRECTIONS:
        raise RescorerError(
            f"{path}: unknown model direction {direction!r}: expected "
            f"{' or '.join(DIRECTIONS)} (a model from a newer rescorer?)"
        )
    return str(direction)


def load_model_dir(folder: str | Path, device: str | torch.device = "cpu") -> LoadedModel:
    """Load a model directory written by ``save_model_dir``; needs nothing but the folder."""
    folder = Path(folder)
    if not folder.is_dir():
        raise RescorerError(f"{folder}: no such model directory")
    config, data = read_model_config(folder)
    direction = model_direction(data, folder / CONFIG_FILE)
    src_vocab = Vocab.load(str(folder / SRC_VOCAB_FILE))
    tgt_vocab = Vocab.load(str(folder / TGT_VOCAB_FILE))
    if (src_vocab.size, tgt_vocab.size) != (config.src_vocab_size, config.tgt_vocab_size):
        raise RescorerError(f"{folder}: vocabulary sizes disagree with {CONFIG_FILE}")
    weights_path = folder / WEIGHTS_FILE
    if not weights_path.is_file():
        raise RescorerError(f"{weights_path}: missing (training has not saved a model yet?)")
    try:
        state = load_file(str(weights_path), device=str(torch.device(device)))
    except (SafetensorError, OSError) as exc:
        raise RescorerError(f"{weights_path}: cannot read weights: {exc}") from exc
    for name, tensor in state.items():
        if not tensor.is_floating_point():
            raise RescorerError(
                f"{weights_path}: tensor {name} is {str(tensor.dtype).removeprefix('torch.')}, "
                "expected floating-point weights"
            )
    # fp16, bf16 or fp64 (saved by another tool): the model computes in fp32
    state = {k: v if v.dtype == torch.float32 else v.float() for k, v in state.items()}
    held, least = sum(t.numel() for t in state.values()), min_parameters(config)
    if held < least:  # before building the model: a forged config.json must not allocate
        raise RescorerError(
            f"{folder / CONFIG_FILE}: its sizes need at least {least:,} parameters, but "
            f"{WEIGHTS_FILE} holds {held:,}: the config does not belong to these weights"
        )
    for name, tensor in state.items():
        if not bool(torch.isfinite(tensor).all()):
            raise RescorerError(
                f"{weights_path}: tensor {name} holds NaN or infinite values (or fp64 ones "
                "beyond fp32's range); a model that diverged cannot score (use an earlier "
                "checkpoint or retrain)"
            )
    # Built on the CPU (0.1 s at paper size): a first "meta" build in a process costs ~1.5 s
    # of kernel imports. describe_model_dir, which only counts parameters, pays that.
    model = EncoderDecoder(config)
    try:
        model.load_state_dict(state, strict=True, assign=True)
    except RuntimeError as exc:
        raise RescorerError(f"{weights_path}: weights do not fit {CONFIG_FILE}: {exc}") from exc
    provenance_path = folder / PROVENANCE_FILE
    provenance = (
        read_json_object(provenance_path, what="a model's provenance")
        if provenance_path.is_file()
        else {}
    )
    return LoadedModel(model.eval(), config, src_vocab, tgt_vocab, provenance, direction)


def describe_model_dir(folder: str | Path) -> str:
    """What ``rescorer info`` prints: configs, vocabulary sizes, parameter count, provenance."""
    folder = Path(folder)
    config, data = read_model_config(folder)
    src_vocab = Vocab.load(str(folder / SRC_VOCAB_FILE))
    tgt_vocab = Vocab.load(str(folder / TGT_VOCAB_FILE))
    with torch.device("meta"):
        num_params = count_parameters(EncoderDecoder(config))
    provenance_path = folder / PROVENANCE_FILE
    provenance = (
        read_json_object(provenance_path, what="a model's provenance")
        if provenance_path.is_file()
        else {}
    )
    direction = model_direction(data, folder / CONFIG_FILE)
    conditions = "p(target | source)" if direction == FORWARD else "p(source | target)"
    lines = [f"model directory: {folder}", f"direction: {direction} ({conditions})", "model:"]
    lines += [f"  {k}: {v}" for k, v in config.to_dict().items()]
    lines.append(f"  parameters: {num_params:,}")
    lines.append("vocabularies:")
    for side, vocab, other in (("source", src_vocab, "target"), ("target", tgt_vocab, "source")):
        if direction != FORWARD:  # the model's sides are the table's other ones
            side = f"{side} (the table's {other} phrases)"
        lines.append(
            f"  {side}: shortlist {vocab.size} ({len(vocab.words)} words + UNK + reserved id 0),"
            f" EOS id {vocab.eos_id}, {vocab.num_rows} rows"
        )
    if "train" in data:
        lines.append("training config:")
        lines += [f"  {k}: {v}" for k, v in data["train"].items()]
    lines.append("provenance:")
    lines += _flatten(provenance, indent=1)
    verdict = training_verdict(provenance)
    lines.append(f"verdict: {verdict.text if verdict else 'unknown (trained without validation)'}")
    weights = folder / WEIGHTS_FILE
    lines.append(f"weights: {weights.name} ({'present' if weights.is_file() else 'MISSING'})")
    return "\n".join(lines)


def _flatten(data: dict[str, Any], indent: int) -> list[str]:
    pad = "  " * indent
    out = []
    for key, value in data.items():
        if isinstance(value, dict):
            out.append(f"{pad}{key}:")
            out += _flatten(value, indent + 1)
        elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            out.append(f"{pad}{key}:")
            for i, item in enumerate(value, start=1):
                out.append(f"{pad}  [{i}]")
                out += _flatten(item, indent + 2)
        elif isinstance(value, list) and all(isinstance(v, str) for v in value):
            out.append(f"{pad}{key}: {' '.join(value)}")
        else:
            out.append(f"{pad}{key}: {value}")
    return out
