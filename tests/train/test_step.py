"""One training update: what today's fast step computes is what the straightforward step
computed (loss, gradients' effect on the weights), and ``--profile`` changes nothing."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from rescorer.batching import PairArrays, PairArraysBuilder, epoch_batches
from rescorer.io.table import read_table
from rescorer.model.encdec import EncoderDecoder, ModelConfig, init_weights_, sequence_logprobs
from rescorer.train.loop import train_step
from rescorer.train.optim import ClippedAdadelta
from rescorer.train.profile import PHASES, TrainPhases
from rescorer.vocab import build_vocabs

SMALL = ModelConfig(
    src_vocab_size=400, tgt_vocab_size=400, hidden_size=24, embed_size=10, maxout_units=12
)


def real_pairs(path: Path, n: int = 400) -> PairArrays:
    entries = list(read_table(str(path)))[:n]
    src_vocab, tgt_vocab = build_vocabs([(e.src, e.tgt) for e in entries], 400, 400)
    builder = PairArraysBuilder()
    for e in entries:
        builder.add(src_vocab.encode_eos(e.src_tokens), tgt_vocab.encode_eos(e.tgt_tokens))
    return builder.build()


def fresh_model(seed: int = 0) -> EncoderDecoder:
    model = EncoderDecoder(SMALL)
    init_weights_(model, torch.Generator().manual_seed(seed))
    return model.train()


def adadelta(model: torch.nn.Module) -> torch.optim.Optimizer:
    return torch.optim.Adadelta(model.parameters(), lr=1.0, rho=0.95, eps=1e-6)


def straightforward_step(
    model: EncoderDecoder, optim: torch.optim.Optimizer, batch: object, clip: float
) -> float:
    """The update as rescorer first wrote it (commit f587262's train_step, fp32): the whole
    forward pass with autograd through every step of the recurrences (padding included),
    backward, torch's global-norm clip, Adadelta's step."""
    model.per_step_training = True
    loss = -sequence_logprobs(model(*batch)).sum()  # type: ignore[misc]
    optim.zero_grad(set_to_none=True)
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    if torch.isfinite(norm):
        optim.step()
    return float(loss.detach())


@pytest.mark.parametrize(
    "clip, compiled",
    [
        (1.0, False),  # clipped at every update
        (1e6, False),  # never clipped
        # compiled, it is the same function (test_compiled_training_follows_the_eager_run
        # trains through it): not compiled again here, a compile costs CI half a minute
    ],
)
def test_the_update_is_the_straightforward_update(
    sample_table: Path, clip: float, compiled: bool
) -> None:
    """``rescorer train``'s update (whole-sequence recurrences, clip and Adadelta fused)
    against the straightforward one: the same losses, weights and Adadelta state."""
    pairs = real_pairs(sample_table)
    batches = epoch_batches(np.maximum(pairs.src_lens, pairs.tgt_lens), 32, seed=1, epoch=0)
    ref, new = fresh_model(), fresh_model()
    ref_optim, new_optim = adadelta(ref), adadelta(new)
    update = ClippedAdadelta(new_optim, compiled=compiled)
    for index in batches[:6]:
        batch = pairs.batch(index)
        want = straightforward_step(ref, ref_optim, batch, clip)
        got = train_step(new, update, batch, "fp32", clip)
        assert got == pytest.approx(want, rel=1e-5)
    moved = 0.0
    start = fresh_model().state_dict()
    for key, value in ref.state_dict().items():
        torch.testing.assert_close(new.state_dict()[key], value, rtol=1e-5, atol=1e-6, msg=key)
        moved = max(moved, float((value - start[key]).abs().max()))
    assert moved > 1e-3  # the updates did change the weights
    for key, state in ref_optim.state_dict()["state"].items():  # and Adadelta's accumulators
        for name, value in state.items():
            torch.testing.assert_close(
                new_optim.state_dict()["state"][key][name], value, rtol=1e-5, atol=1e-9
            )


def test_a_profiled_update_computes_the_same_and_times_every_phase(sample_table: Path) -> None:
    pairs = real_pairs(sample_table)
    batches = epoch_batches(np.maximum(pairs.src_lens, pairs.tgt_lens), 32, seed=1, epoch=0)
    plain, profiled = fresh_model(), fresh_model()
    plain_optim, profiled_optim = adadelta(plain), adadelta(profiled)  # clip, then step
    phases = TrainPhases()
    for index in batches[:3]:
        batch = pairs.batch(index)
        want = train_step(plain, plain_optim, batch, "fp32", 1.0)
        got = train_step(profiled, profiled_optim, batch, "fp32", 1.0, phase=phases)
        assert got == want
    for key, value in plain.state_dict().items():
        assert torch.equal(profiled.state_dict()[key], value), key
    timed = {name for name, sec in phases.seconds.items() if sec > 0}
    assert timed == set(PHASES) - {"data"}  # the loop times the data; train_step the rest
    assert not phases._open  # every phase closed, the hooks' too


def test_phases_nest_and_add_up() -> None:
    phases = TrainPhases()
    with phases("encoder"):
        with phases("embedding"):
            pass
        phases.start("embedding")
        phases.stop()
    assert set(phases.seconds) == set(PHASES)
    assert phases.seconds["encoder"] >= 0 and phases.seconds["embedding"] >= 0
    with pytest.raises(KeyError):
        phases.start("nonsense")


def test_train_profile_prints_every_phase(tmp_path: Path, sample_table: Path) -> None:
    from click.testing import CliRunner

    from rescorer.cli import cli

    out = tmp_path / "m"
    result = CliRunner().invoke(
        cli,
        [
            "train", str(sample_table), "-o", str(out), "--hidden-size", "12",
            "--embed-size", "8", "--maxout-units", "6", "--src-vocab-size", "200",
            "--tgt-vocab-size", "200", "--max-updates", "4", "--batch-size", "16",
            "--device", "cpu", "--compile", "no", "--profile",
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "where the time of 3 updates went" in result.output
    for name in PHASES:
        assert f"\n  {name} " in result.output, name
    assert result.output.count("  wall ") == 1


def test_the_sliced_optimizer_is_the_per_parameter_one_bit_for_bit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Eager on the CPU, ClippedAdadelta steps each parameter slice by slice (optim.CHUNK
    elements); elementwise operations on slices give the same bits as on whole tensors."""
    from rescorer.train import optim as optim_module

    monkeypatch.setattr(optim_module, "CHUNK", 96)  # SMALL's tables span many slices
    gen = torch.Generator().manual_seed(3)
    params = [torch.randn(s, generator=gen) for s in ((400, 10), (7,), (24, 72), (1000,))]
    grads = [torch.randn(p.shape, generator=gen) for p in params]
    states = [[torch.rand(p.shape, generator=gen) for p in params] for _ in range(2)]
    coef = torch.tensor(0.37)
    whole = [[t.clone() for t in ts] for ts in (params, *states)]
    optim_module._adadelta_update(whole[0], grads, whole[1], whole[2], coef, 1.0, 0.95, 1e-6)
    sliced = [[t.clone() for t in ts] for ts in (params, *states)]
    optim_module._chunked_adadelta_update(
        sliced[0], grads, sliced[1], sliced[2], coef, 1.0, 0.95, 1e-6
    )
    for want, got in zip(whole, sliced, strict=True):
        for a, b in zip(want, got, strict=True):
            assert torch.equal(a, b)
    assert not torch.equal(whole[0][0], params[0])  # the step moved the weights
