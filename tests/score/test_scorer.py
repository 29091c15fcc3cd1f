"""The model side of scoring: what ``Scorer`` does to the process beyond computing scores."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from conftest import SLICE

from rescorer.io.table import read_table
from rescorer.model.encdec import EncoderDecoder, ModelConfig, init_weights_
from rescorer.score.pairs import encode_pairs, prefix_tree
from rescorer.score.scorer import Scorer
from rescorer.vocab import build_vocabs

# 40 bf16 products of distinct row counts, twice; oneDNN reports each kernel creation as a hit
# or a miss of its per-shape cache (ONEDNN_VERBOSE=all). With ``make_scorer`` a Scorer is built
# first, as ``rescorer score`` does.
PROBE = """
import sys, torch
if sys.argv[1] == "make_scorer":
    from rescorer.model.encdec import EncoderDecoder, ModelConfig
    from rescorer.score.scorer import Scorer
    Scorer(EncoderDecoder(ModelConfig(16, 16, 8, 8, 8, 2)), "bf16")
w = torch.randn(64, 64)
for _ in range(2):
    for rows in range(2, 42):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            torch.nn.functional.linear(torch.randn(rows, 64), w)
"""
CACHE_VARS = ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "LRU_CACHE_CAPACITY")


def cache_events(mode: str, **extra: str) -> tuple[int, int]:
    """(hits, misses) of oneDNN's kernel cache in a fresh process running PROBE."""
    env = {k: v for k, v in os.environ.items() if k not in CACHE_VARS}
    env.update(ONEDNN_VERBOSE="all", OMP_NUM_THREADS="1", **extra)
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, mode],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    out = proc.stdout + proc.stderr
    return out.count("create:cache_hit"), out.count("create:cache_miss")


def test_bf16_scorer_bounds_the_per_shape_kernel_caches() -> None:
    """Issue 11 defect 7: under bf16 every new batch shape added a kernel to caches of 1,024
    entries, so memory grew with the table. After a Scorer is built, 40 shapes cycled twice
    through a bounded cache find nothing cached; a value the user set is kept."""
    hits, misses = cache_events("plain")
    if hits + misses == 0:
        pytest.skip("bf16 products do not run through oneDNN on this CPU")
    assert hits >= 40, "control: the unbounded cache should keep all 40 shapes"
    hits, misses = cache_events("make_scorer")
    assert (hits, misses) == (0, 80)
    hits, _ = cache_events("make_scorer", ONEDNN_PRIMITIVE_CACHE_CAPACITY="1024")
    assert hits >= 40


# ------------------------------------------------------------------ the prefix-shared encoder
def slice_pairs() -> list[tuple[str, str]]:
    return [(e.src, e.tgt) for e in read_table(str(SLICE))]


def test_the_prefix_tree_holds_each_distinct_prefix_once() -> None:

    pairs = slice_pairs()
    batch = encode_pairs(*build_vocabs(pairs, 300, 300), pairs)
    seqs = [tuple(batch.src_ids[a:b]) for a, b in itertools.pairwise(batch.src_off)]
    levels = prefix_tree(batch.src_ids, batch.src_off)
    prefixes = {s[: t + 1] for s in seqs for t in range(len(s))}
    assert sum(len(level.tokens) for level in levels) == len(prefixes) < len(batch.src_ids)
    # Walking back from each source's end node spells the source.
    for t, level in enumerate(levels):
        for source, node in zip(level.ending, level.ending_node, strict=True):
            spelled = []
            for depth in range(t, -1, -1):
                spelled.append(int(levels[depth].tokens[node]))
                node = levels[depth].parents[node]
            assert tuple(spelled[::-1]) == seqs[source] and node == -1
    assert sorted(np.concatenate([lv.ending for lv in levels]).tolist()) == list(range(len(seqs)))


def test_prefix_shared_scores_equal_the_per_source_encoder() -> None:
    """Issue 13: one encoder step per distinct prefix, same scores (fp32, 1e-5) on real pairs,
    and the scorer counts the work it did."""

    pairs = slice_pairs()
    src_vocab, tgt_vocab = build_vocabs(pairs, 300, 300)
    torch.manual_seed(0)
    model = EncoderDecoder(ModelConfig(300, 300, hidden_size=32, embed_size=8, maxout_units=16))
    init_weights_(model)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.2 * torch.randn_like(p))
    batch = encode_pairs(src_vocab, tgt_vocab, pairs)
    shared = Scorer(model, "fp32", share_targets=False)
    plain = Scorer(model, "fp32", share_prefixes=False, share_targets=False)
    a, b = shared.score(batch), plain.score(batch)
    np.testing.assert_allclose(a, b, rtol=0, atol=1e-5)
    assert plain.work.encoder_steps == plain.work.source_tokens == len(batch.src_ids)
    assert shared.work.source_tokens == len(batch.src_ids)
    assert 0 < shared.work.encoder_steps < 0.8 * shared.work.source_tokens
    assert shared.work.decoder_positions == plain.work.decoder_positions == len(batch.tgt_ids)


def perturbed_model(vocab_size: int) -> EncoderDecoder:
    """A small model whose weights are far from the initial ones (so scores differ a lot)."""
    torch.manual_seed(0)
    model = EncoderDecoder(
        ModelConfig(vocab_size, vocab_size, hidden_size=32, embed_size=8, maxout_units=16)
    )
    init_weights_(model)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.2 * torch.randn_like(p))
    return model.eval()


@pytest.mark.parametrize("compiled", [False, True])
def test_shared_target_prefixes_give_the_padded_decoder_scores(compiled: bool) -> None:
    """Issue 13: one decoder step and one softmax per distinct (source, target prefix); the
    scores equal the padded per-pair decoder's (fp32, 1e-5) on real pairs, with readout
    blocks smaller than a tree level, and the scorer counts the positions it ran."""
    pairs = slice_pairs()
    src_vocab, tgt_vocab = build_vocabs(pairs, 300, 300)
    model = perturbed_model(300)
    batch = encode_pairs(src_vocab, tgt_vocab, pairs)
    tree = Scorer(model, "fp32", compile=compiled)
    tree.readout_rows = 128  # several blocks per level
    padded = Scorer(model, "fp32", share_targets=False)
    a, b = tree.score(batch), padded.score(batch)
    np.testing.assert_allclose(a, b, rtol=0, atol=1e-5)
    assert np.ptp(a) > 10  # scores that differ, so the comparison means something
    # Positions run: each distinct (source, y_1..y_{t-1}) for t = 1..T once.
    nodes = {
        (int(batch.pair_src[j]), tuple(batch.tgt_ids[batch.tgt_off[j] : batch.tgt_off[j] + t]))
        for j in range(batch.num_pairs)
        for t in range(int(batch.tgt_off[j + 1] - batch.tgt_off[j]))
    }
    assert tree.work.decoder_positions == len(nodes) < 0.95 * len(batch.tgt_ids)
    assert padded.work.decoder_positions == len(batch.tgt_ids)
    # Any count of pairs (tree levels of any size; their rows are padded).
    for k in range(1, 40, 3):
        few = encode_pairs(src_vocab, tgt_vocab, pairs[100 : 100 + k])
        np.testing.assert_allclose(tree.score(few), padded.score(few), rtol=0, atol=1e-5)
