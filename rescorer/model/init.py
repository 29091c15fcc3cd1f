"""The model's initialisation (docs/model.md §2), apart from its layers (rescorer.model.encdec
re-exports it)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from rescorer.model.encdec import EncoderDecoder

__all__ = ["init_weights_"]


@torch.no_grad()
def init_weights_(model: EncoderDecoder, generator: torch.Generator | None = None) -> None:
    """GroundHog's initialisation (docs/model.md §2, utils.py:107-143), in place.

    Biases 0; every recurrent H x H block (U_r, U_u, U on both sides) is the matrix of left
    singular vectors of an N(0, 1) matrix (scale 1); every other weight is N(0, 0.01).
    Random numbers are drawn on the CPU so the result does not depend on the device.
    """
    recurrent = {id(p) for p in (model.enc_rec.gate_proj.weight, model.enc_rec.cand_proj.weight)}
    recurrent |= {id(p) for p in (model.dec_rec.gate_proj.weight, model.dec_rec.cand_proj.weight)}
    for name, param in model.named_parameters():
        if id(param) in recurrent:
            continue
        if name.endswith("bias"):
            param.zero_()
        else:
            draw = torch.randn(param.shape, generator=generator, dtype=torch.float32) * 0.01
            param.copy_(draw)
    for block in model.recurrent_matrices():
        gauss = torch.randn(block.shape, generator=generator, dtype=torch.float64)
        left, _, _ = torch.linalg.svd(gauss)
        block.copy_(left.to(torch.float32))
