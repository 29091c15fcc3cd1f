"""The update after the backward pass: torch's global-norm clip and torch's Adadelta, computed
in one pass over each parameter.

``clip_grad_norm_`` then ``Adadelta.step`` read and write every parameter's gradient and
state about a dozen times (each in-place operation is its own pass over memory: at hidden 256
most of the 6 million parameters are the embeddings and the softmax rows, and the update is
memory-bound). :func:`clipped_adadelta_step` computes the same numbers: the same total norm
(torch's), the same clip coefficient, and per parameter exactly the operations of torch's
single-tensor Adadelta on the clipped gradient, written as one function that
``torch.compile`` fuses into one loop per parameter. The state lives in the
``torch.optim.Adadelta`` object as always (its ``state_dict`` is what a resumed run loads).

Not compiled, on a CPU, the same operations run on one slice of CHUNK elements of every
parameter after the other (:func:`_chunked_adadelta_update`): a slice's gradient, parameter,
accumulators and temporaries (6 MiB) stay in the last-level cache through its dozen
operations, so memory sees each array about once instead of a dozen times (issue 66: at the
paper's size 84 against 145 ms an update on one Zen 3 core, the floor of 32 bytes a parameter
at its bandwidth about 70). Elementwise operations on slices give the very same numbers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from rescorer.device import CompileGuard, soft_compile


def _adadelta_update(
    params: list[Tensor],
    grads: list[Tensor],
    square_avgs: list[Tensor],
    acc_deltas: list[Tensor],
    coef: Tensor,
    lr: float,
    rho: float,
    eps: float,
) -> None:
    """torch.optim.adadelta._single_tensor_adadelta (no weight decay, not maximising, real
    tensors) on the gradients times ``coef`` (the clip coefficient, a 0-d tensor)."""
    for param, grad, square_avg, acc_delta in zip(
        params, grads, square_avgs, acc_deltas, strict=True
    ):
        grad = grad * coef  # clip_grad_norm_'s in-place scaling
        square_avg.mul_(rho).addcmul_(grad, grad, value=1 - rho)
        std = square_avg.add(eps).sqrt_()
        delta = acc_delta.add(eps).sqrt_()
        delta.div_(std).mul_(grad)
        acc_delta.mul_(rho).addcmul_(delta, delta, value=1 - rho)
        param.add_(delta, alpha=-lr)


#: Elements of each slice of the eager CPU update: 1 MiB per fp32 array. Smaller slices fit
#: a core's own cache but pay a dozen operation calls each (16,384: 2.3x slower than this).
CHUNK = 1 << 18


def _chunked_adadelta_update(
    params: list[Tensor],
    grads: list[Tensor],
    square_avgs: list[Tensor],
    acc_deltas: list[Tensor],
    coef: Tensor,
    lr: float,
    rho: float,
    eps: float,
) -> None:
    """:func:`_adadelta_update`'s operations, slice by slice (CHUNK elements) of contiguous
    parameters and states, the temporaries in three reused buffers."""
    if not params:
        return
    n = min(CHUNK, max(p.numel() for p in params))
    buffers = torch.empty(3, n, dtype=params[0].dtype, device=params[0].device)
    for param, grad, square_avg, acc_delta in zip(
        params, grads, square_avgs, acc_deltas, strict=True
    ):
        flat = [t.view(-1) for t in (param, grad, square_avg, acc_delta)]
        for lo in range(0, param.numel(), n):
            p, g, sq, acc = (t[lo : lo + n] for t in flat)
            k = len(p)
            g = torch.mul(g, coef, out=buffers[0, :k])  # clip_grad_norm_'s scaling
            sq.mul_(rho).addcmul_(g, g, value=1 - rho)
            std = torch.add(sq, eps, out=buffers[1, :k]).sqrt_()
            delta = torch.add(acc, eps, out=buffers[2, :k]).sqrt_()
            delta.div_(std).mul_(g)
            acc.mul_(rho).addcmul_(delta, delta, value=1 - rho)
            p.add_(delta, alpha=-lr)


def _sliceable(tensors: list[Tensor]) -> bool:
    """Whether :func:`_chunked_adadelta_update` can take these: contiguous, on the CPU."""
    return all(t.is_contiguous() and t.device.type == "cpu" for t in tensors)


class ClippedAdadelta:
    """Clip and step for one ``torch.optim.Adadelta`` (one parameter group, its default
    options but lr, rho and eps); ``compiled``: through ``torch.compile`` (eager if compiling
    fails, with one warning for the whole ``guard``'s group: rescorer/device.py)."""

    def __init__(
        self, optim: torch.optim.Adadelta, compiled: bool, guard: CompileGuard | None = None
    ) -> None:
        group = optim.param_groups
        if len(group) != 1 or group[0]["weight_decay"] or group[0]["maximize"]:
            raise ValueError("ClippedAdadelta: one parameter group, no weight decay, minimising")
        self.optim = optim
        self.update: Callable[..., None] = _adadelta_update
        if compiled:
            self.update = soft_compile(
                _adadelta_update, guard=guard or CompileGuard(), dynamic=False
            )

    def step(self, clip_norm: float) -> bool:
        """Clip the gradients' global norm to ``clip_norm`` and take Adadelta's step; False (and
        nothing changed) when the norm is not finite."""
        group: dict[str, Any] = self.optim.param_groups[0]
        params = [p for p in group["params"] if p.grad is not None]
        grads = [p.grad for p in params]
        if not params:
            return True
        total = torch.nn.utils.get_total_norm(grads, 2.0)  # clip_grad_norm_'s
        if not bool(torch.isfinite(total)):
            return False
        coef = torch.clamp(clip_norm / (total + 1e-6), max=1.0)
        square_avgs, acc_deltas = [], []
        for p in params:
            state = self.optim.state[p]
            if not state:  # as Adadelta.step initialises it
                state["step"] = torch.tensor(0.0, dtype=torch.float32)
                state["square_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                state["acc_delta"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            state["step"] += 1
            square_avgs.append(state["square_avg"])
            acc_deltas.append(state["acc_delta"])
        update = self.update
        if update is _adadelta_update and _sliceable(params + grads + square_avgs + acc_deltas):
            update = _chunked_adadelta_update
        with torch.no_grad():
            update(
                params,
                grads,
                square_avgs,
                acc_deltas,
                coef.to(params[0].device),
                float(group["lr"]),
                float(group["rho"]),
                float(group["eps"]),
            )
        return True
