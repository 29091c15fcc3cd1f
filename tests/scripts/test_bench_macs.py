"""The benchmarks' model work (scripts/bench_score.py's model_macs, which bench_train.py uses too)
equals the matrix products the code runs, as torch's FLOP counter counts them, on real pairs
and a tiny model: the tree decoder, the padded decoder, and a training forward pass."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from conftest import ROOT, SAMPLE_TABLE, SLICE
from torch.utils.flop_counter import FlopCounterMode

import rescorer.model.encdec as encdec
import rescorer.score.trees as trees_module
from rescorer.batching import PairArraysBuilder
from rescorer.io.table import read_table, split_tokens
from rescorer.model.encdec import EncoderDecoder, ModelConfig, init_weights_
from rescorer.score.pairs import GroupedPairs, GroupedPairsBuilder
from rescorer.score.scorer import Scorer
from rescorer.vocab import build_vocabs

sys.path.insert(0, str(ROOT / "scripts"))
from bench_score import padded_contexts
from benchlib import model_macs

CONFIG = ModelConfig(
    src_vocab_size=50, tgt_vocab_size=60, hidden_size=12, embed_size=5, maxout_units=7
)


def flops(run: Callable[[], object]) -> int:
    counter = FlopCounterMode(display=False)
    with counter:
        run()
    return int(counter.get_total_flops())


@pytest.fixture
def unpadded(monkeypatch: pytest.MonkeyPatch) -> None:
    """No row padding in the scorer and the readout: every product has the counted rows."""
    monkeypatch.setattr(trees_module, "ROW_MULTIPLE", 1)
    monkeypatch.setattr(trees_module, "ROW_BUCKET", 1)
    monkeypatch.setattr(encdec, "ROW_BUCKET", 1)


@functools.cache
def same_lengths() -> list[tuple[str, str]]:
    """Real pairs whose sources have 2 words and targets 2 (no padding in a padded batch)."""
    return [
        (e.src, e.tgt)
        for e in read_table(str(SLICE))
        if len(split_tokens(e.src)) == 2 and len(split_tokens(e.tgt)) == 2
    ]


def model_and_pairs(pairs: list[tuple[str, str]]) -> tuple[EncoderDecoder, GroupedPairs]:
    src_vocab, tgt_vocab = build_vocabs(pairs, CONFIG.src_vocab_size, CONFIG.tgt_vocab_size)
    torch.manual_seed(0)
    model = EncoderDecoder(CONFIG).eval()
    init_weights_(model, torch.Generator().manual_seed(0))
    builder = GroupedPairsBuilder(src_vocab, tgt_vocab)
    for src, tgt in pairs:
        builder.add(src, split_tokens(tgt))
    return model, builder.build()


@pytest.mark.usefixtures("unpadded")
def test_tree_decoder_count_is_what_runs() -> None:
    """Any real pairs (targets share prefixes under a source; no padding to remove here)."""
    entries = list(read_table(str(SAMPLE_TABLE)))
    model, batch = model_and_pairs([(e.src, e.tgt) for e in entries])
    scorer = Scorer(model, "fp32", batch_tokens=4096)
    counted = flops(lambda: scorer.score(batch))
    sources = len(batch.src_off) - 1
    work = scorer.work
    assert work.decoder_positions < len(batch.tgt_ids)  # some target prefixes were shared
    macs = model_macs(
        CONFIG, work.encoder_steps, sources, work.decoder_positions, sources, tree=True
    )
    assert counted == 2 * macs
    # The count this replaces ran a full decoder step at every position, depth 0 too.
    H, E = CONFIG.hidden_size, CONFIG.embed_size
    assert 2 * (macs + sources * (E * 3 * H + 3 * H * H)) != counted


@pytest.mark.usefixtures("unpadded")
@pytest.mark.parametrize("share_prefixes", [False, True])
def test_padded_decoder_count_is_what_runs(share_prefixes: bool) -> None:
    model, batch = model_and_pairs(same_lengths())
    assert batch.num_pairs > 10 and len(batch.src_off) - 1 > 3
    # 7 pairs a batch: several batches, some sources in two of them.
    scorer = Scorer(model, "fp32", 21, share_prefixes=share_prefixes, share_targets=False)
    counted = flops(lambda: scorer.score(batch))
    contexts = padded_contexts([SimpleNamespace(pairs=batch)], 21)
    assert contexts > len(batch.src_off) - 1  # a source's terms computed in two batches
    work = scorer.work
    macs = model_macs(
        CONFIG, work.encoder_steps, contexts, work.decoder_positions, batch.num_pairs, tree=False
    )
    assert counted == 2 * macs


@pytest.mark.usefixtures("unpadded")
def test_training_forward_count_is_what_runs() -> None:
    """bench_train.py's count: model(*batch), one source row and one start per pair."""
    pairs = same_lengths()
    model, _ = model_and_pairs(pairs)
    src_vocab, tgt_vocab = build_vocabs(pairs, CONFIG.src_vocab_size, CONFIG.tgt_vocab_size)
    builder = PairArraysBuilder()
    for src, tgt in pairs:
        builder.add(
            src_vocab.encode_eos(split_tokens(src)), tgt_vocab.encode_eos(split_tokens(tgt))
        )
    arrays = builder.build()
    batch = arrays.batch(np.arange(len(pairs)), torch.device("cpu"))
    counted = flops(lambda: model(*batch))
    n_src, n_tgt = int(batch.src_lens.sum()), int(batch.tgt_lens.sum())
    macs = model_macs(CONFIG, n_src, len(pairs), n_tgt, len(pairs), tree=False)
    assert counted == 2 * macs
