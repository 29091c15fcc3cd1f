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
        with torch.no_grad():
            self.update(
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
