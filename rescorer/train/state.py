"""The resume state of a training run (everything besides weights and optimiser that a resumed
run needs to continue exactly).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from rescorer.errors import RescorerError
from rescorer.io.outputs import atomic_path, open_writable
from rescorer.model.encdec import EncoderDecoder

STATE_FORMAT = "rescorer-train-state-1"


# --------------------------------------------------------------------------------- run state
@dataclass
class RunState:
    """Everything besides model and optimiser that a resumed run needs to continue exactly."""

    update: int = 0
    epoch: int = 0
    batch_in_epoch: int = 0  # batches of ``epoch`` already trained on
    pairs_seen: int = 0
    best_valid_ppl: float | None = None
    bad_validations: int = 0
    train_seconds: float = 0.0
    order: str = ""  # the batches: "" a permutation cut in order, "buckets" by length (capture)
    train_pairs: int = 0  # the training set's size, so --resume names the epoch before reading it


def save_state(
    path: Path, model: EncoderDecoder, optim: torch.optim.Optimizer, run: RunState
) -> None:
    # torch.save into our own file object: a full disk is a WriteError naming the file, not
    # torch's "unexpected pos" RuntimeError.
    with atomic_path(path) as tmp, open_writable(tmp, shown=str(path)) as f:
        torch.save(
            {
                "format": STATE_FORMAT,
                "model": {k: v.detach().cpu() for k, v in model.state_dict().items()},
                "optimizer": optim.state_dict(),
                "run": asdict(run),
            },
            f,
        )


def load_state(path: Path, device: torch.device) -> dict[str, Any]:
    try:
        state = torch.load(path, map_location=device, weights_only=True)
    except FileNotFoundError as exc:
        raise RescorerError(f"{path}: missing: nothing to resume") from exc
    except Exception as exc:  # any unreadable file is a user-facing error here
        raise RescorerError(f"{path}: cannot read training state: {exc}") from exc
    if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
        raise RescorerError(f"{path}: not a rescorer training state ({STATE_FORMAT})")
    return state
