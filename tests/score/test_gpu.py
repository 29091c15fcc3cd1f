"""GPU checks (skipped on machines without CUDA): the same scores and training on the device."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import SLICE

from rescorer.io.table import read_table
from rescorer.model.encdec import EncoderDecoder, ModelConfig, init_weights_
from rescorer.score.pairs import encode_pairs
from rescorer.score.scorer import Scorer, score_pairs, score_pairs_straightforward
from rescorer.vocab import Vocab, build_vocabs

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


def tiny_model() -> tuple[EncoderDecoder, list[tuple[str, str]], Vocab, Vocab]:
    pairs = [(e.src, e.tgt) for e in read_table(str(SLICE))]
    src_vocab, tgt_vocab = build_vocabs(pairs, 400, 400)
    torch.manual_seed(0)
    model = EncoderDecoder(ModelConfig(400, 400, hidden_size=64, embed_size=16, maxout_units=32))
    init_weights_(model)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.2 * torch.randn_like(p))
    return model, pairs, src_vocab, tgt_vocab


def test_gpu_scores_equal_cpu_scores() -> None:
    model, pairs, src_vocab, tgt_vocab = tiny_model()
    cpu = score_pairs_straightforward(model, src_vocab, tgt_vocab, pairs)
    cuda = torch.device("cuda")
    model = model.to(cuda)  # the scorer uses a model where it is
    fp32 = score_pairs(model, src_vocab, tgt_vocab, pairs)
    np.testing.assert_allclose(fp32, cpu, atol=1e-4)
    if torch.cuda.is_bf16_supported():
        bf16 = score_pairs(
            model,
            src_vocab,
            tgt_vocab,
            pairs,
            precision="bf16",
        )
        # bf16 is held to the bound the README states for it (0.117 nats at the 99th percentile,
        # 0.227 at most, on a trained model; rounded up here to 0.12 and 0.25), not fp32's: on
        # the H100 this tiny model's bf16 scores were 0.056 nats off at most. And it must really
        # be bf16, not fp32 again.
        error = np.abs(bf16 - cpu)
        assert np.percentile(error, 99) < 0.12, np.percentile(error, 99)
        assert error.max() < 0.25, error.max()
        assert np.abs(bf16 - fp32).max() > 1e-4


def test_gpu_training_step_lowers_the_loss() -> None:
    from rescorer.batching import pad_batch

    model, pairs, src_vocab, tgt_vocab = tiny_model()
    model = model.cuda()
    batch = pairs[:64]
    src = pad_batch([src_vocab.encode_eos(s.split()) for s, _ in batch], "cuda")
    tgt = pad_batch([tgt_vocab.encode_eos(t.split()) for _, t in batch], "cuda")
    opt = torch.optim.Adadelta(model.parameters(), lr=1.0, rho=0.95, eps=1e-6)
    losses = []
    for _ in range(20):
        loss = -model(*src, *tgt).sum()
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(float(loss))
    assert losses[-1] < losses[0]


def test_gpu_profile_and_auto_workers(tmp_path: pytest.TempPathFactory) -> None:
    """--profile on the device: every phase is timed (with a synchronisation each) and the
    output equals the unprofiled run's; --workers auto starts parse/format processes."""
    from pathlib import Path

    from rescorer.model.checkpoint import save_model_dir
    from rescorer.score.config import ScoreConfig
    from rescorer.score.pipeline import score_table

    model, _, src_vocab, tgt_vocab = tiny_model()
    folder = Path(str(tmp_path)) / "model"
    save_model_dir(folder, model, src_vocab, tgt_vocab, {"made_by": "test_gpu.py"})
    plain, profiled = Path(str(tmp_path)) / "a.gz", Path(str(tmp_path)) / "b.gz"
    score_table(str(SLICE), str(folder), str(plain), ScoreConfig(device="cuda", quiet=True))
    config = ScoreConfig(device="cuda", quiet=True, profile=True, workers="auto")
    stats = score_table(str(SLICE), str(folder), str(profiled), config)
    assert plain.read_bytes() == profiled.read_bytes()
    assert stats.phases is not None
    assert all(stats.phases.seconds[p] > 0 for p in ("encoder", "decoder", "readout", "d2h"))


@pytest.mark.parametrize("compiled", [False, True])
def test_gpu_scorer_queues_a_chunk_without_waiting_for_the_device(compiled: bool) -> None:
    """Issue 13, item 3 and issue 25, items 1 and 3: the default path (shared prefixes) copies
    a chunk's index arrays in one copy from its pinned staging buffer and never synchronises
    inside a chunk; two chunks can be submitted before either is collected, and only
    ``result()`` waits (scorer.py's synchronisation points)."""
    model, pairs, src_vocab, tgt_vocab = tiny_model()
    cuda = torch.device("cuda")
    scorer = Scorer(model.to(cuda), "fp32", compile=compiled)
    batch = encode_pairs(src_vocab, tgt_vocab, pairs)
    other = encode_pairs(src_vocab, tgt_vocab, pairs[: len(pairs) // 2])
    expected = scorer.score(batch)  # warm-up: compilation and allocations may wait
    expected_other = scorer.score(other)
    scorer.score(batch)  # both staging buffers at their size
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:  # raises on any synchronising operation
        first = scorer.submit(batch)
        second = scorer.submit(other)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    np.testing.assert_array_equal(second.result(), expected_other)  # in any order
    np.testing.assert_array_equal(first.result(), expected)
    torch.cuda.set_sync_debug_mode("error")
    try:
        logp = scorer.logprobs(batch)  # the scores left on the device
    finally:
        torch.cuda.set_sync_debug_mode("default")
    np.testing.assert_allclose(logp.double().cpu().numpy(), expected, rtol=0, atol=1e-6)
    # More chunks in flight than staging buffers: the oldest is collected first, not lost.
    many = [scorer.submit(b) for b in (batch, other, batch, other)]
    for got, want in zip(many, (expected, expected_other) * 2, strict=True):
        np.testing.assert_array_equal(got.result(), want)


def test_gpu_profile_counts_the_copies() -> None:
    """--profile on the device puts the chunk's one upload under h2d and the scores' copy
    under d2h (issue 25, item 3), the trees under trees."""
    from rescorer.score.profile import Phases

    model, pairs, src_vocab, tgt_vocab = tiny_model()
    cuda = torch.device("cuda")
    scorer = Scorer(model.to(cuda), "fp32")
    scorer.phase = phases = Phases(cuda)
    scorer.score(encode_pairs(src_vocab, tgt_vocab, pairs))
    assert all(phases.seconds[p] > 0 for p in ("trees", "h2d", "encoder", "readout", "d2h"))


def test_gpu_precisions_set_tf32_as_they_say() -> None:
    """fp32 is IEEE fp32 on the GPU (an identity product keeps 1024.25 and 1024.75, which
    TF32's 10-bit mantissa cannot hold); tf32, auto's choice for scoring where the GPU has
    TF32, moves them; its scores stay within 0.02 nats of fp32's on the tiny model."""
    from rescorer.device import autocast, has_tf32, resolve_precision

    cuda = torch.device("cuda")
    values = torch.tensor([1024.25, 1024.75], device=cuda).repeat(64, 32)  # (64,64)
    eye = torch.eye(64, device=cuda)
    with autocast(cuda, "fp32"):
        assert torch.equal(eye @ values, values)
    if not has_tf32(cuda):
        assert resolve_precision("auto", cuda, "score") == "fp32"
        pytest.skip("this GPU has no TF32")
    assert resolve_precision("auto", cuda, "score") == "tf32"
    with autocast(cuda, "tf32"):
        assert not torch.equal(eye @ values, values)
    with autocast(cuda, "fp32"):  # and off again
        assert torch.equal(eye @ values, values)
    model, pairs, src_vocab, tgt_vocab = tiny_model()
    model = model.to(cuda)
    fp32 = score_pairs(model, src_vocab, tgt_vocab, pairs)
    tf32 = score_pairs(model, src_vocab, tgt_vocab, pairs, precision="tf32")
    assert 0 < np.abs(tf32 - fp32).max() < 0.02


def test_gpu_batches_sized_by_memory_score_as_the_fixed_ones() -> None:
    """Issue 57, item 3: on a GPU the default readout block is sized by the device's memory
    (more pairs per launch); the scores are those of the old fixed 65,536 within fp32's 1e-4,
    and of the CPU's."""
    from rescorer.score.config import GPU_BATCH_TOKENS, batch_tokens_for

    model, pairs, src_vocab, tgt_vocab = tiny_model()
    cpu = score_pairs(model, src_vocab, tgt_vocab, pairs)
    cuda = torch.device("cuda")
    memory = torch.cuda.get_device_properties(cuda).total_memory
    sized = batch_tokens_for(None, cuda, memory, model.config.tgt_rows)
    assert sized >= GPU_BATCH_TOKENS
    model = model.to(cuda)
    by_memory = score_pairs(model, src_vocab, tgt_vocab, pairs, batch_tokens=sized)
    fixed = score_pairs(model, src_vocab, tgt_vocab, pairs, batch_tokens=GPU_BATCH_TOKENS)
    np.testing.assert_allclose(by_memory, fixed, atol=1e-4)
    np.testing.assert_allclose(by_memory, cpu, atol=1e-4)


@pytest.mark.parametrize("precision", ["fp32", "tf32", "bf16"])
def test_gpu_captured_steps_score_as_the_eager_ones_without_waiting(precision: str) -> None:
    """Issue 57, item 3: each level and readout block at a bucketed row count, captured once
    as a CUDA graph and replayed (score --capture, the default on a GPU), scores as the exact
    eager path: fp32 and TF32 within 1e-4 nats, bf16 within the bound docs/score.md states
    (against the CPU's fp32, as above); replaying waits for nothing (scorer.py's
    synchronisation points), and replays give the first run's scores to the bit."""
    if precision == "bf16" and not torch.cuda.is_bf16_supported():
        pytest.skip("no bf16 on this GPU")
    model, pairs, src_vocab, tgt_vocab = tiny_model()
    cpu = score_pairs_straightforward(model, src_vocab, tgt_vocab, pairs)
    cuda = torch.device("cuda")
    model = model.to(cuda)
    batch = encode_pairs(src_vocab, tgt_vocab, pairs)
    other = encode_pairs(src_vocab, tgt_vocab, pairs[: len(pairs) // 3])
    eager = Scorer(model, precision, capture="off")
    captured = Scorer(model, precision, capture="on")
    assert Scorer(model, precision).capture == "graph"  # auto on a GPU
    for scorer in (eager, captured):
        scorer.readout_rows = 256  # several readout blocks per level
    want, got = eager.score(batch), captured.score(batch)  # the first run captures
    assert captured.steps is not None and captured.steps.mode == "graph"
    assert {key[0] for key in captured.steps.graphs} == {"encoder", "decoder", "readout"}
    if precision == "bf16":
        for error in (np.abs(got - cpu), np.abs(got - want)):
            assert np.percentile(error, 99) < 0.12, np.percentile(error, 99)
            assert error.max() < 0.25, error.max()
    else:
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-4)
        np.testing.assert_allclose(got, cpu, rtol=0, atol=1e-4 if precision == "fp32" else 0.02)
    got_other = captured.score(other)  # its shapes captured too
    graphs = len(captured.steps.graphs)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:  # raises on any synchronising operation
        first = captured.submit(batch)
        second = captured.submit(other)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    np.testing.assert_array_equal(first.result(), got)
    np.testing.assert_array_equal(second.result(), got_other)
    assert len(captured.steps.graphs) == graphs  # nothing captured again
