"""Shared fixtures: tiny real data (tests/data) and tiny seeded models."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from rescorer.model.encdec import EncoderDecoder, ModelConfig, init_weights_

DATA_DIR = Path(__file__).parent / "data"
SAMPLE_TABLE = DATA_DIR / "en-fr.sample.phrase-table"  # 200 real lines, 20 blocks of 10


@pytest.fixture
def sample_table() -> Path:
    """200 real en-fr phrase-table lines (see tests/data/README.md)."""
    return SAMPLE_TABLE


@pytest.fixture
def tiny_config() -> ModelConfig:
    """A model small enough to run in milliseconds, with distinct sizes to catch shape mix-ups."""
    return ModelConfig(
        src_vocab_size=30, tgt_vocab_size=40, hidden_size=8, embed_size=6, maxout_units=5
    )


@pytest.fixture
def tiny_model(tiny_config: ModelConfig) -> EncoderDecoder:
    """The tiny model with GroundHog's initialisation, seed 0."""
    torch.manual_seed(0)
    model = EncoderDecoder(tiny_config)
    init_weights_(model, torch.Generator().manual_seed(0))
    return model
