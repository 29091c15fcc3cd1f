"""One training update and the validation pass of ``rescorer train`` (the loop: loop.py)."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager

import numpy as np
import torch

from rescorer.batching import PairArrays, PairBatch
from rescorer.device import autocast
from rescorer.model.encdec import EncoderDecoder, Kernels, sequence_logprobs
from rescorer.phases import nothing
from rescorer.train.optim import ClippedAdadelta
from rescorer.train.profile import embedding_timed


def batch_loss(
    model: torch.nn.Module,
    batch: PairBatch,
    kernels: Kernels | None = None,
    phase: Callable[[str], AbstractContextManager[None]] = nothing,
) -> torch.Tensor:
    """The training loss: minus the summed log-probabilities of the batch's tokens (fp32),
    through the compiled ``kernels`` if given. With a ``phase`` timer (``--profile``; the bare
    model, not a DDP wrapper) the forward pass runs piece by piece, each piece timed: the same
    calls ``EncoderDecoder.forward`` makes, in the same order."""
    if phase is nothing:
        token_logp = model(*batch, kernels=kernels)  # (B,T) fp32
        return -sequence_logprobs(token_logp).sum()
    assert isinstance(model, EncoderDecoder), "--profile times the bare model"
    src_ids, src_lens, tgt_ids, tgt_lens = batch
    with embedding_timed(model, phase):
        with phase("encoder"):
            c = model.encode(src_ids, src_lens, kernels)  # (B,H)
        with phase("decoder"):
            ctx = model.decoder_context(c)
            states = model.decoder_states(ctx, tgt_ids, kernels, tgt_lens)  # (B,T,H), (B,T,E)
        with phase("readout"):
            token_logp = model.packed_readout(ctx, tgt_ids, tgt_lens, states, kernels)  # (B,T)
            return -sequence_logprobs(token_logp).sum()


def train_step(
    model: torch.nn.Module,
    optim: torch.optim.Optimizer | ClippedAdadelta,
    batch: PairBatch,
    precision: str,
    clip_norm: float,
    loss_scale: float = 1.0,
    kernels: Kernels | None = None,
    phase: Callable[[str], AbstractContextManager[None]] = nothing,
) -> float:
    """One update: loss (bf16 autocast if asked), backward, global-norm clip, optimiser step.

    ``model`` may be a DistributedDataParallel wrapper; ``loss_scale`` multiplies the loss before
    the backward pass (the world size there: distributed.py). Returns the batch's summed NLL.
    A non-finite gradient norm skips the step (GroundHog instead replaced the gradient by
    0.1 * the parameters; docs/model.md §2). ``optim``: a torch optimiser (clipped with
    ``clip_grad_norm_``), or a :class:`ClippedAdadelta`, which clips and steps in one pass
    (the loop's). ``phase``: a timer of rescorer/train/profile.py.
    """
    with autocast(batch.src_ids.device, precision):
        loss = batch_loss(model, batch, kernels, phase)
    torch_optim = optim.optim if isinstance(optim, ClippedAdadelta) else optim
    with phase("backward"):
        torch_optim.zero_grad(set_to_none=True)
        (loss * loss_scale if loss_scale != 1.0 else loss).backward()
    if isinstance(optim, ClippedAdadelta):  # clip and step in one pass (train/optim.py)
        with phase("optimizer"):
            optim.step(clip_norm)
        return float(loss.detach())
    with phase("clip"):
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), clip_norm)
        finite = bool(torch.isfinite(norm))
    with phase("optimizer"):
        if finite:
            optim.step()
    return float(loss.detach())


@torch.no_grad()
def evaluate(
    model: EncoderDecoder, pairs: PairArrays, device: torch.device, precision: str
) -> tuple[float, int]:
    """(sum of ln p over all target tokens incl. EOS, number of those tokens) of ``pairs``."""
    was_training = model.training
    model.eval()
    order = np.argsort(np.maximum(pairs.src_lens, pairs.tgt_lens), kind="stable")
    total, tokens = 0.0, 0
    with autocast(device, precision):
        for start in range(0, len(order), 256):
            batch = pairs.batch(order[start : start + 256], device)
            total += float(sequence_logprobs(model(*batch)).double().sum())
            tokens += batch.num_tokens
    model.train(was_training)
    return total, tokens
