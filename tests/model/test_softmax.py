"""The training softmax's written-out forward and backward (rescorer/model/softmax.py) against
autograd through readout_logprobs' operations: the same log-probabilities and gradients."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from rescorer.model.softmax import picked_log_softmax


def reference(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """readout_logprobs' last steps: the product, the fp32 bias, gather minus logsumexp (in
    fp64 for fp64 inputs)."""
    logits = F.linear(x, w)
    if logits.dtype == torch.bfloat16:
        logits = logits.float()
    logits = logits + b
    return logits.gather(1, t.unsqueeze(1)).squeeze(1) - torch.logsumexp(logits, dim=1)


def inputs(dtype: torch.dtype, n: int = 37, e: int = 6, v: int = 53) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, e, generator=g, dtype=dtype).requires_grad_()
    w = torch.randn(v, e, generator=g, dtype=dtype).requires_grad_()
    b = torch.randn(v, generator=g, dtype=dtype).requires_grad_()
    t = torch.randint(0, v, (n,), generator=g)
    t[:5] = 7  # a word picked at several positions: its gradient rows add up
    return [x, w, b, t]


@pytest.mark.parametrize("dtype, tol", [(torch.float64, 1e-12), (torch.float32, 1e-5)])
def test_the_same_log_probabilities_and_gradients(dtype: torch.dtype, tol: float) -> None:
    x, w, b, t = inputs(dtype)
    grad = torch.randn(len(t), dtype=dtype, generator=torch.Generator().manual_seed(1))
    grad[-3:] = 0.0  # the readout's padding rows: dropped, so no gradient
    want = reference(x, w, b, t)
    want_grads = torch.autograd.grad(want, (x, w, b), grad)
    got = picked_log_softmax(x, w, b, t)
    got_grads = torch.autograd.grad(got, (x, w, b), grad)
    torch.testing.assert_close(got, want, rtol=tol, atol=tol)
    for name, g_got, g_want in zip("xwb", got_grads, want_grads, strict=True):
        assert g_got.dtype == dtype, name
        torch.testing.assert_close(g_got, g_want, rtol=tol, atol=tol, msg=name)


def test_under_bf16_autocast_the_products_run_in_bf16() -> None:
    """As autocast runs readout_logprobs: bf16 products, an fp32 log-softmax and bias; the
    gradients come back in each input's dtype, within bf16's rounding of autograd's."""
    x, w, b, t = inputs(torch.float32, n=64, e=16, v=300)
    grad = torch.randn(len(t), generator=torch.Generator().manual_seed(1))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        xb = x.to(torch.bfloat16)  # the rank layer's output is bf16 under autocast
        want = reference(xb, w, b, t)
        got = picked_log_softmax(xb, w, b, t)
    assert got.dtype == want.dtype == torch.float32
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-4)
    want_grads = torch.autograd.grad(want, (x, w, b), grad)
    got_grads = torch.autograd.grad(got, (x, w, b), grad)
    for name, g_got, g_want in zip("xwb", got_grads, want_grads, strict=True):
        assert g_got.dtype == torch.float32, name
        scale = float(g_want.abs().max())
        torch.testing.assert_close(g_got, g_want, rtol=0.02, atol=0.02 * scale, msg=name)
