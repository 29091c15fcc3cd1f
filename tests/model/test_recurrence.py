"""The whole-sequence gated unit (rescorer/model/recurrence.py) against autograd through the
per-step code: the same states where they are read, the same gradients."""

from __future__ import annotations

import pytest
import torch

from rescorer.model.encdec import EncoderDecoder, GatedRecurrence, ModelConfig, init_weights_
from rescorer.model.recurrence import gated_sequence

H = 6


def per_step(rec: GatedRecurrence, x: torch.Tensor, h0: torch.Tensor) -> torch.Tensor:
    """states (B,L,H): every row stepped L times, padding included (the straightforward way)."""
    h, states = h0, []
    for t in range(x.shape[1]):
        h = rec.step(x[:, t], h)
        states.append(h)
    return torch.stack(states, dim=1)


def test_gradcheck_in_fp64() -> None:
    """Finite differences agree with the hand-written backward (every input, fp64)."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 5, 3 * H, generator=g, dtype=torch.float64, requires_grad=True)
    h0 = torch.randn(4, H, generator=g, dtype=torch.float64, requires_grad=True)
    ug = torch.randn(2 * H, H, generator=g, dtype=torch.float64, requires_grad=True)
    uc = torch.randn(H, H, generator=g, dtype=torch.float64, requires_grad=True)
    lens = torch.tensor([5, 2, 0, 3])  # a row of no step too: its h0 gets no gradient
    assert torch.autograd.gradcheck(
        lambda *a: gated_sequence(a[0], a[1], lens, a[2], a[3]), (x, h0, ug, uc)
    )


def test_states_and_gradients_equal_the_per_step_autograd() -> None:
    g = torch.Generator().manual_seed(1)
    rec = GatedRecurrence(H)
    with torch.no_grad():
        for p in rec.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.5)
    lens = torch.tensor([3, 7, 1, 7, 4, 2])
    B, L = len(lens), 7
    x = torch.randn(B, L, 3 * H, generator=g, requires_grad=True)
    h0 = torch.randn(B, H, generator=g, requires_grad=True)
    weights = torch.randn(B, L, H, generator=g)  # a loss that reads the real positions only
    mask = (torch.arange(L) < lens.unsqueeze(1)).unsqueeze(2)  # (B,L,1)
    want_states = per_step(rec, x, h0)
    (want_states * weights * mask).sum().backward()
    want = [t.grad.clone() for t in (x, h0, rec.gate_proj.weight, rec.cand_proj.weight)]
    for t in (x, h0, rec.gate_proj.weight, rec.cand_proj.weight):
        t.grad = None
    got_states = gated_sequence(x, h0, lens, rec.gate_proj.weight, rec.cand_proj.weight)
    (got_states * weights).sum().backward()  # padding is zero: no mask needed
    torch.testing.assert_close(got_states * mask, want_states * mask)
    assert torch.count_nonzero(got_states * ~mask) == 0
    got = [t.grad for t in (x, h0, rec.gate_proj.weight, rec.cand_proj.weight)]
    for name, a, b in zip(("x", "h0", "U_g", "U"), got, want, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=name)


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_the_model_gives_the_per_step_loss_and_gradients(precision: str) -> None:
    """Training mode (whole sequences) against per_step_training (autograd through the steps),
    on a batch with source and target lengths from 1 up."""
    config = ModelConfig(
        src_vocab_size=50, tgt_vocab_size=50, hidden_size=16, embed_size=8, maxout_units=8
    )
    g = torch.Generator().manual_seed(2)
    src_lens = torch.tensor([1, 4, 2, 6, 3])
    tgt_lens = torch.tensor([2, 1, 5, 3, 5])
    src = torch.randint(4, 50, (5, 6), generator=g)
    tgt = torch.randint(4, 50, (5, 5), generator=g)
    grads = []
    losses = []
    for per_step_training in (True, False):
        model = EncoderDecoder(config)
        init_weights_(model, torch.Generator().manual_seed(0))
        model.train()
        model.per_step_training = per_step_training
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
            loss = -model(src, src_lens, tgt, tgt_lens).sum()
        loss.backward()
        losses.append(loss.detach())
        grads.append({n: p.grad.clone() for n, p in model.named_parameters()})
    tol = {"rtol": 1e-5, "atol": 1e-6} if precision == "fp32" else {"rtol": 2e-2, "atol": 2e-3}
    torch.testing.assert_close(losses[1], losses[0], **tol)
    for name, want in grads[0].items():
        torch.testing.assert_close(grads[1][name], want, **tol, msg=name)
