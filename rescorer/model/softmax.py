"""The softmax layer's last product and the log-probability of each position's target, for
training: forward and backward written out, with as few passes over the (N, V) logits as the
eager operations allow.

At hidden 256 this (N, V) block is most of an update: V = 15,001 shortlist rows for each of
the batch's N target positions (about 350 at batch 64), 21 MB in fp32. Autograd through
``readout_logprobs`` (encdec.py) reads or writes it about fifteen times: the bias added into a
new tensor, ``logsumexp``'s max, difference, exponential and sum, then in the backward pass the
difference and exponential again, their product with the gradient, a zeroed tensor for
``gather``'s gradient, the sum of the two, the bias's column sums, and the two products.
:class:`PickedLogSoftmax` computes the same function and gradients (docs/model.md §1.7) with
the bias added in the product (fp32) or in its conversion (bf16), one ``log_softmax`` (a
max, a sum and a write per row, each row's 60 KB staying in the cache between them), and in
the backward pass one exponential in place over the saved log-probabilities: the gradient of
``ln p_t`` with respect to the logits is ``onehot(t) - p``, so with ``g`` the incoming gradient

    dW_2 = (p ⊙ -g)ᵀ x + Σ_i g_i onehot(t_i)ᵀ x_i = pᵀ (-g ⊙ x) + (rows t_i of g_i x_i)
    dx   = (p ⊙ -g) W_2 + g ⊙ W_2[t] = -g ⊙ (p W_2) + g ⊙ W_2[t]
    db   = (-g) p + (g at t)

where the scaling by ``-g`` lands on the small (N, E) operands, not on the (N, V) block.

Under bf16 autocast the two products run in bf16 (operands cast, as autocast casts them) and
the log-softmax, its gradient and the bias stay fp32, as in ``readout_logprobs``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor


def _matmul_dtype(x: Tensor) -> torch.dtype:
    """The dtype autocast gives matrix products here (x's own when autocast is off)."""
    if torch.is_autocast_enabled(x.device.type):
        return torch.get_autocast_dtype(x.device.type)
    return x.dtype


class PickedLogSoftmax(torch.autograd.Function):
    """ln p(targets) (N,) fp32 under softmax(x W_2ᵀ + b); see the module docstring. The
    saved log-probabilities are turned into probabilities in place by the backward pass:
    one backward pass per forward pass (no ``retain_graph``)."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, weight: Tensor, bias: Tensor, targets: Tensor) -> Tensor:
        """x (N,E) the rank layer's output m W_1, weight (V,E) W_2, bias (V,) b_out,
        targets (N,) long."""
        mm = _matmul_dtype(x)
        with torch.autocast(x.device.type, enabled=False):
            xm, wm = x.to(mm), weight.to(mm)  # (N,E), (V,E)
            if mm == bias.dtype:
                logits = torch.addmm(bias, xm, wm.t())  # (N,V)
            else:  # the bf16 product converted and the fp32 bias added in one pass
                logits = torch.add(xm @ wm.t(), bias)  # (N,V) fp32
            logp = torch.log_softmax(logits, dim=1)  # (N,V) fp32
            del logits
            picked = logp.gather(1, targets.unsqueeze(1)).squeeze(1)  # (N,)
        ctx.save_for_backward(logp, xm, wm, targets)
        ctx.dtypes = (x.dtype, weight.dtype, bias.dtype)
        return picked

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, Tensor, Tensor, None]:
        logp, xm, wm, targets = ctx.saved_tensors
        x_dtype, w_dtype, b_dtype = ctx.dtypes
        mm = xm.dtype
        with torch.autocast(logp.device.type, enabled=False):
            g = grad.to(logp.dtype)  # (N,)
            p = logp.exp_()  # (N,V) the softmax, in the saved tensor's memory
            pm = p if mm == p.dtype else p.to(mm)
            neg = (-g).unsqueeze(1)  # (N,1)
            x32 = xm.to(p.dtype)  # (N,E)
            w32 = wm.to(p.dtype)
            dx = (pm @ wm).to(p.dtype) * neg  # (N,E)
            dx += g.unsqueeze(1) * w32.index_select(0, targets)
            dw = (pm.t() @ (x32 * neg).to(mm)).to(p.dtype)  # (V,E)
            dw.index_add_(0, targets, g.unsqueeze(1) * x32)
            db = (-g) @ p  # (V,)
            db.index_add_(0, targets, g)
        return dx.to(x_dtype), dw.to(w_dtype), db.to(b_dtype), None


def picked_log_softmax(x: Tensor, weight: Tensor, bias: Tensor, targets: Tensor) -> Tensor:
    """ln p (N,) fp32 of ``targets`` (N,) long under softmax(x (N,E) weight (V,E)ᵀ + bias (V,)),
    for training (see :class:`PickedLogSoftmax`)."""
    out: Tensor = PickedLogSoftmax.apply(x, weight, bias, targets)
    return out
