"""The gated unit over whole sequences for training: forward and backward written out, padding
skipped, the recurrent weights' gradients as one matrix product.

Autograd through :meth:`GatedRecurrence.step` (model/gated.py) pays, at every time step of the
backward pass, two weight-gradient products whose inner dimension is the batch (64 rows: the
CPU's least efficient shape) and an addition of each (H, H) gradient into its accumulator; and
it steps every row to the batch's longest sequence, padding included. :class:`GatedSequence`
computes the same function and the same gradients (docs/model.md §1.2):

- rows are taken longest first, and step t runs on the rows still going (a prefix), so no
  padded position is computed (their states were never read: the encoder keeps each row's
  state at its own last step, the decoder's readout reads real positions only);
- the backward pass carries dh back through the steps and keeps each step's gate and
  candidate pre-activation gradients; the gradients of [U_r; U_u] and U are then one product
  each over all steps' rows: dU_g = Σ_t dg_tᵀ h_{t-1}, dU = Σ_t dc_tᵀ (r_t ⊙ h_{t-1}).

Under bf16 autocast the recurrent products run in bf16 (inputs cast, output back to fp32), as
autocast runs them; the state and every elementwise step stay fp32. The results equal
autograd's through the per-step code to float rounding (tests/model/test_recurrence.py).

Notation: B rows, L steps, H hidden; x (B,L,3H) is the input side [W_r e ; W_u e ; W e + b]
(+ the decoder's context terms), h0 (B,H) the state before the first step.
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


class GatedSequence(torch.autograd.Function):
    """states (B,L,H) fp32 of the gated unit run over x from h0, row b for its first lens[b]
    steps (0.0 after them); see the module docstring."""

    @staticmethod
    def forward(
        ctx: Any, x: Tensor, h0: Tensor, lens: Tensor, u_gates: Tensor, u_cand: Tensor
    ) -> Tensor:
        """x (B,L,3H) fp32, h0 (B,H) fp32, lens (B,) long in [0, L], u_gates (2H,H) [U_r; U_u],
        u_cand (H,H) U."""
        B, L, H3 = x.shape
        H = H3 // 3
        mm = _matmul_dtype(x)
        dt = x.dtype  # fp32 (fp64 in gradcheck)
        with torch.autocast(x.device.type, enabled=False):
            lens = lens.to(x.device)
            order = torch.argsort(lens, descending=True, stable=True)  # (B,) longest first
            going = lens.unsqueeze(0) > torch.arange(L, device=x.device).unsqueeze(1)  # (L,B)
            counts = going.sum(dim=1).tolist()  # counts[t]: the rows with more than t steps
            steps = sum(1 for n in counts if n)
            offsets = [0]
            for n in counts[:steps]:
                offsets.append(offsets[-1] + n)
            total = offsets[-1]
            xs = x.index_select(0, order)  # (B,L,3H) sorted
            wg, wc = u_gates.to(mm), u_cand.to(mm)  # (2H,H), (H,H)
            # Saved per row-step (packed: step t's n_t rows at offsets[t]).
            h_prev = x.new_empty(total, H)  # h_{t-1}
            gates = x.new_empty(total, 2 * H)  # [r ; u]
            cand = x.new_empty(total, H)  # h~
            states = x.new_zeros(B, L, H)  # sorted rows
            h = h0.to(dt).index_select(0, order)  # (B,H)
            for t in range(steps):
                n, a, b = counts[t], offsets[t], offsets[t + 1]
                hp = h[:n]  # (n,H)
                h_prev[a:b] = hp
                g = torch.sigmoid(xs[:n, t, : 2 * H] + (hp.to(mm) @ wg.t()).to(dt))  # (n,2H)
                gates[a:b] = g
                r, u = g[:, :H], g[:, H:]
                c = torch.tanh(xs[:n, t, 2 * H :] + ((r * hp).to(mm) @ wc.t()).to(dt))  # (n,H)
                cand[a:b] = c
                h = torch.cat([torch.lerp(hp, c, u), h[n:]])  # (B,H)
                states[:n, t] = h[:n]
            out = torch.empty_like(states).index_copy_(0, order, states)  # (B,L,H) unsorted
        ctx.save_for_backward(order, h_prev, gates, cand, wg, wc)
        ctx.layout = (B, L, H, counts[:steps], offsets, mm, h0.dtype, u_gates.dtype)
        return out

    @staticmethod
    def backward(ctx: Any, grad_states: Tensor) -> tuple[Tensor, Tensor, None, Tensor, Tensor]:
        order, h_prev, gates, cand, wg, wc = ctx.saved_tensors
        B, L, H, counts, offsets, mm, h0_dtype, w_dtype = ctx.layout
        total = offsets[-1]
        gs = grad_states.to(h_prev.dtype).index_select(0, order)  # (B,L,H) sorted
        dx = gs.new_zeros(B, L, 3 * H)  # sorted
        d_pre = gs.new_empty(total, 3 * H)  # [dg ; dc] per row-step, packed as the forward
        dh = gs.new_zeros(B, H)  # d loss / d h_t, carried back
        for t in reversed(range(len(counts))):
            n, a, b = counts[t], offsets[t], offsets[t + 1]
            hp, c = h_prev[a:b], cand[a:b]  # (n,H)
            r, u = gates[a:b, :H], gates[a:b, H:]  # (n,H)
            dhn = dh[:n] + gs[:n, t]  # (n,H): h_t feeds step t+1 and the output
            dc = dhn * u * (1 - c * c)  # (n,H) through tanh
            du = dhn * (c - hp)
            d_rh = (dc.to(mm) @ wc).to(gs.dtype)  # (n,H) = dc U
            dr = d_rh * hp
            dg = torch.cat([dr * r * (1 - r), du * u * (1 - u)], dim=1)  # (n,2H) through σ
            d_pre[a:b, : 2 * H] = dg
            d_pre[a:b, 2 * H :] = dc
            dx[:n, t] = d_pre[a:b]
            dh_prev = dhn * (1 - u) + d_rh * r + (dg.to(mm) @ wg).to(gs.dtype)  # (n,H)
            dh = torch.cat([dh_prev, dh[n:]])  # rows past their end carry dh unchanged
        # The recurrent weights' gradients: one product each over every row-step.
        r_all = gates[:, :H]  # (total,H)
        d_ug = (d_pre[:, : 2 * H].t().to(mm) @ h_prev.to(mm)).to(w_dtype)  # (2H,H)
        d_uc = (d_pre[:, 2 * H :].t().to(mm) @ (r_all * h_prev).to(mm)).to(w_dtype)  # (H,H)
        dx_out = torch.empty_like(dx).index_copy_(0, order, dx)  # (B,L,3H) unsorted
        dh0 = torch.empty_like(dh).index_copy_(0, order, dh).to(h0_dtype)  # (B,H)
        return dx_out, dh0, None, d_ug, d_uc


def gated_sequence(x: Tensor, h0: Tensor, lens: Tensor, u_gates: Tensor, u_cand: Tensor) -> Tensor:
    """states (B,L,H) fp32: the gated unit over x (B,L,3H) from h0 (B,H), row b for its first
    lens[b] steps (zeros after). u_gates (2H,H) is [U_r; U_u], u_cand (H,H) U."""
    out: Tensor = GatedSequence.apply(x, h0, lens, u_gates, u_cand)
    return out
