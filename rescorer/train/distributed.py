"""Data-parallel training under ``torchrun``: who this process is, and the few collectives the
training loop needs. Without torchrun (WORLD_SIZE unset or 1) every call is a no-op.

The division of work (docs/training.md, "Training on several processes"):

- every rank draws the same epoch permutation and batches (``epoch_batches``); update u of an
  epoch gives rank r batch ``W*u + r`` of it, so the ranks see disjoint parts of every epoch;
  a last group of fewer than W batches is left out of that epoch (the next epoch's permutation
  differs, so no pair is left out for good);
- each rank's loss is the sum over its batch, scaled by W so that DistributedDataParallel's
  mean of the gradients is their sum: one update is the single-process update on a batch of
  W x ``--batch-size`` pairs (the paper's 64 is ``--batch-size 64`` on one process, or
  ``--batch-size 16`` on 4);
- rank 0 alone validates and writes the model directory, the log and the training state;
  every rank stops at the same update (the stop reasons are reduced across ranks).
"""

from __future__ import annotations

import datetime
import os

import torch
import torch.distributed as dist

from rescorer.errors import RescorerError

# Why a run stops, ordered so that the largest code across ranks wins.
STOP_REASONS = ("", "interrupted", "patience", "max-time", "max-updates")


class World:
    """This process's place in a torchrun job (rank 0 of 1 without torchrun)."""

    def __init__(self) -> None:
        self.size = int(os.environ.get("WORLD_SIZE", "1"))
        self.rank = int(os.environ.get("RANK", "0"))
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        self.started = False

    @property
    def distributed(self) -> bool:
        return self.size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def device_name(self, requested: str) -> str:
        """The device of this rank: ``cuda:LOCAL_RANK`` for auto or cuda with several ranks."""
        if not self.distributed:
            return requested
        if requested == "cuda" or (requested == "auto" and torch.cuda.is_available()):
            return f"cuda:{self.local_rank}"
        return requested

    def start(self, device: torch.device) -> None:
        """Join the process group: nccl for CUDA devices, gloo for the CPU."""
        if not self.distributed or self.started:
            return
        if device.type == "cuda":
            torch.cuda.set_device(device)
        backend = "nccl" if device.type == "cuda" else "gloo"
        try:
            dist.init_process_group(backend, timeout=datetime.timedelta(minutes=30))
        except Exception as exc:  # a rendezvous that fails says why in one line
            message = f"torchrun: cannot join the process group ({backend}): {exc}"
            raise RescorerError(message) from exc
        self.started = True

    def stop(self) -> None:
        if self.started:
            dist.destroy_process_group()
            self.started = False

    def barrier(self) -> None:
        if self.started:
            dist.barrier()

    def sum(self, values: list[float], device: torch.device) -> list[float]:
        """Element-wise sum of ``values`` over the ranks."""
        if not self.started:
            return values
        t = torch.tensor(values, dtype=torch.float64, device=device)
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
        return t.tolist()

    def stop_reason(self, local: str, device: torch.device) -> str:
        """The reason to stop that wins across the ranks ('' when none has one)."""
        if not self.started:
            return local
        t = torch.tensor([STOP_REASONS.index(local)], dtype=torch.int64, device=device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return STOP_REASONS[int(t.item())]
