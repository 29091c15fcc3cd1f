"""The model's sizes (ModelConfig): torch-free, so the command line reads its defaults cheaply."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any


@dataclass(frozen=True)
class ModelConfig:
    """Sizes of the model; the defaults are the paper's (docs/model.md §1, state.py)."""

    src_vocab_size: int = 15000  # source shortlist incl. ids 0 (reserved) and 1 (UNK); EOS = size
    tgt_vocab_size: int = 15000  # target shortlist, likewise; the softmax has size + 1 classes
    hidden_size: int = 1000  # H: encoder and decoder state
    embed_size: int = 100  # E: rank of the factorised input and output matrices
    maxout_units: int = 500  # M: units of the deep output layer
    maxout_pool: int = 2  # P: pieces pooled by each maxout unit

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"ModelConfig.{f.name} must be a positive integer, got {value!r}")
        if self.src_vocab_size < 2 or self.tgt_vocab_size < 2:
            raise ValueError("vocabulary sizes must be at least 2 (ids 0 and 1 are reserved)")

    @property
    def src_rows(self) -> int:
        """Rows of the source embedding: the shortlist plus EOS."""
        return self.src_vocab_size + 1

    @property
    def tgt_rows(self) -> int:
        """Rows of the target embedding and classes of the softmax: the shortlist plus EOS."""
        return self.tgt_vocab_size + 1

    def to_dict(self) -> dict[str, int]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown model config keys: {', '.join(unknown)}")
        return cls(**data)
