"""The two sides of the gated unit (docs/model.md §1.2) that the encoder and the decoder of
:class:`rescorer.model.encdec.EncoderDecoder` are made of: the input side of all steps, one
product before the recurrence (:class:`GatedEmbeddingInput`), and the recurrent side, two
products a step (:class:`GatedRecurrence`). The equations are in encdec.py's docstring."""

from __future__ import annotations

import torch
from torch import Tensor, nn


class GatedEmbeddingInput(nn.Module):
    """Embedding with a learned bias and the input side of a gated unit: one (E, 3H) product.

    Output columns are ``[W_r e ; W_u e ; W e + b]`` (docs/model.md §1.2, encdec.py:569-607).
    """

    def __init__(self, num_rows: int, embed_size: int, hidden_size: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(num_rows, embed_size)  # E_x or E_y
        self.embed_bias = nn.Parameter(torch.zeros(embed_size))  # b_e or b_f
        self.input_proj = nn.Linear(embed_size, 3 * hidden_size, bias=False)  # [W_r; W_u; W]
        self.cand_bias = nn.Parameter(torch.zeros(hidden_size))  # b (candidate only)
        self.hidden_size = hidden_size

    def embed_ids(self, ids: Tensor) -> Tensor:
        """ids (B,L) long -> e (B,L,E)."""
        return self.embed(ids) + self.embed_bias

    def project(self, emb: Tensor, extra: Tensor | None = None) -> Tensor:
        """emb (B,L,E) or (B,E) -> x (B,L,3H) or (B,3H) fp32: [W_r e ; W_u e ; W e + b], plus
        ``extra`` (B,3H) at every position if given (the decoder's context terms).

        The product's output is converted and the biases added in one pass (bf16 + fp32
        gives fp32), not a copy to fp32 and then one addition each."""
        terms = torch.cat([self.cand_bias.new_zeros(2 * self.hidden_size), self.cand_bias])
        terms = terms.float()  # (3H,)
        if extra is not None:
            terms = extra.float() + terms  # (B,3H)
            if emb.dim() == 3:
                terms = terms.unsqueeze(1)  # (B,1,3H)
        return torch.add(self.input_proj(emb), terms)  # fp32


class GatedRecurrence(nn.Module):
    """The recurrent side of the gated unit: ``[U_r; U_u]`` and ``U``, no biases."""

    def __init__(self, hidden_size: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(hidden_size, 2 * hidden_size, bias=False)  # [U_r; U_u]
        self.cand_proj = nn.Linear(hidden_size, hidden_size, bias=False)  # U
        self.hidden_size = hidden_size

    def step(self, x: Tensor, h: Tensor) -> Tensor:
        """One step of the unit (rec_layers.py:1018-1095).

        x: (B,3H) fp32 input side [W_r e ; W_u e ; W e + b] (+ the decoder's context terms);
        h: (B,H) fp32 previous state. Returns the new state (B,H) fp32.
        """
        H = self.hidden_size
        gates = torch.sigmoid(x[:, : 2 * H] + self.gate_proj(h))  # (B,2H)
        r, u = gates[:, :H], gates[:, H:]  # (B,H) each
        cand = torch.tanh(x[:, 2 * H :] + self.cand_proj(r * h))  # (B,H): reset before U
        return torch.lerp(h, cand, u)  # u ⊙ h~ + (1 - u) ⊙ h
