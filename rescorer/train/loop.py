"""``rescorer train``: the paper's training procedure (docs/model.md §2, docs/contracts.md §2).

One example per table line (unique pairs, counts ignored), a fresh seeded permutation each epoch,
batches of 64, loss = the SUM of token NLLs over the batch (encdec.py), Adadelta (rho 0.95,
eps 1e-6, lr 1), global gradient-norm clip 1. A validation slice is held out by source phrase;
its per-token perplexity (EOS counted) is reported beside a unigram model's, and the best
weights are kept in MODEL_DIR. ``resume=True`` continues a run exactly from TRAIN_STATE_FILE.
"""

from __future__ import annotations

import math
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rescorer.batching import PairArrays, PairBatch, epoch_batches
from rescorer.device import autocast
from rescorer.errors import RescorerError
from rescorer.io.progress import COMPILE_TYPICAL, Heartbeat
from rescorer.model.encdec import EncoderDecoder, Kernels, ModelConfig, sequence_logprobs
from rescorer.phases import nothing
from rescorer.train.config import TrainConfig, TrainResult
from rescorer.train.data import Source
from rescorer.train.optim import ClippedAdadelta
from rescorer.train.profile import TrainPhases, embedding_timed
from rescorer.train.setup import RunSetup
from rescorer.train.state import save_state
from rescorer.verdict import LEARNED_RATIO, Verdict


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


class _StopFlag:
    """Set by SIGINT/SIGTERM: the loop finishes its update, saves and stops (a second ^C kills)."""

    def __init__(self) -> None:
        self.set = False
        self.signum = 0  # the signal that set it
        self._old: dict[int, Any] = {}

    def __enter__(self) -> _StopFlag:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._old[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, frame: object) -> None:
        self.set = True
        self.signum = self.signum or signum
        signal.signal(signum, self._old.get(signum, signal.SIG_DFL))

    def __exit__(self, *exc: object) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)


def _fmt_time(seconds: float) -> str:
    m, s = divmod(int(seconds), 60)
    h, m = divmod(m, 60)
    return f"{h}h{m:02d}m{s:02d}s" if h else f"{m}m{s:02d}s"


def train(
    source: Source,
    out_dir: str | Path,
    model_cfg: ModelConfig,
    train_cfg: TrainConfig,
    *,
    resume: bool = False,
    command_line: list[str] | None = None,
    echo: Callable[[str], None] | None = None,
) -> TrainResult:
    """Train on a phrase table (or parallel phrase files) into the model directory ``out_dir``.

    Progress goes to ``echo`` (default: stderr) unless ``train_cfg.quiet``. On SIGINT/SIGTERM the
    current update finishes, the state is saved and the result says ``interrupted``.
    """
    return _Trainer(source, Path(out_dir), model_cfg, train_cfg, resume, command_line, echo).run()


class _Trainer(RunSetup):
    """One invocation of a training run: the update loop and checkpoints, on the pieces
    :class:`~rescorer.train.setup.RunSetup` built."""

    # ----------------------------------------------------------------------- pieces
    @property
    def epochs(self) -> float:
        return self.run_state.pairs_seen / len(self.data.train)

    def budget(self) -> str:
        """How much of --max-updates/--max-time is used, and the time left by the nearer one
        (a run may stop earlier on --patience)."""
        cfg, run = self.cfg, self.run_state
        shares: list[tuple[float, float | None]] = []  # (share used, seconds left)
        if cfg.max_time:
            used = self.budget_elapsed() / cfg.max_time
            shares.append((used, max(cfg.max_time - self.budget_elapsed(), 0.0)))
        if cfg.max_updates:
            done_here = run.update - self.first_update
            rate = done_here / max(time.monotonic() - self.loop_start, 1e-9)
            left = (cfg.max_updates - run.update) / rate if done_here else None
            shares.append((run.update / cfg.max_updates, left))
        if not shares:
            return ""
        used, left = max(shares, key=lambda s: s[0])
        text = f" | {100 * min(used, 1.0):.0f}% of the budget"
        return text + (f", ETA {_fmt_time(left)}" if left is not None else "")

    def log(self, record: dict[str, Any]) -> None:
        if self.world.is_main:
            self.model_dir.append_log(record)

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def step(self, index: np.ndarray) -> tuple[int, int, float]:
        """One update on the pairs ``index`` (this rank's batch): (pairs, target tokens, summed
        NLL), summed over the ranks."""
        timed = self.phases is not None and self.run_state.update > self.first_update
        phase = self.phases if timed and self.phases is not None else nothing
        with phase("data"):
            batch = self.data.train.batch(index, self.device)
        loss = train_step(
            self.trained,
            self.update,
            batch,
            self.precision,
            self.cfg.clip_norm,
            loss_scale=float(self.world.size),
            kernels=self.kernels,
            phase=phase,
        )
        pairs, tokens, loss = self.world.sum([batch.num_pairs, batch.num_tokens, loss], self.device)
        if not math.isfinite(loss):
            self.say(f"rescorer train: update {self.run_state.update + 1}: non-finite loss")
        return int(pairs), int(tokens), loss

    def checkpoint(self) -> None:
        """Validate, keep the best weights, count patience, save the training state (rank 0;
        the others go on to the next update and wait for it there)."""
        if not self.world.is_main:
            return
        run = self.run_state
        improved = True
        record: dict[str, Any] = {"update": run.update, "time": round(self.elapsed(), 1)}
        if len(self.data.valid):
            logp_sum, tokens = evaluate(self.model, self.data.valid, self.device, self.precision)
            ppl = math.exp(-logp_sum / tokens)
            improved = run.best_valid_ppl is None or ppl < run.best_valid_ppl
            record |= {
                "epoch": round(self.epochs, 4),
                "valid_ppl": ppl,
                "unigram_ppl": self.unigram_ppl,
            }
            self.say(
                f"rescorer train: update {run.update:,}: validation perplexity {ppl:.2f}"
                f" (unigram {self.unigram_ppl:.2f}){' best' if improved else ''}"
            )
        if improved:
            run.best_valid_ppl = record.get("valid_ppl")
            run.bad_validations = 0
            self.model_dir.save_weights(self.model)
            self.provenance["training"] = {
                "updates": run.update,
                "epochs": round(self.epochs, 4),
                "valid_ppl": run.best_valid_ppl,
                "unigram_ppl": self.unigram_ppl,
                "shortlist_coverage": self.shortlist_coverage,
            }
            self.model_dir.update_provenance(self.provenance)
        else:
            run.bad_validations += 1
        record["best"] = improved
        self.log(record)
        save_state(self.state_path, self.model, self.optim, run)
        self.saved_update = run.update

    def stop_reason(self, stop: _StopFlag) -> str:
        cfg, run = self.cfg, self.run_state
        if cfg.max_updates is not None and run.update >= cfg.max_updates:
            return "max-updates"
        if cfg.max_time is not None and self.budget_elapsed() >= cfg.max_time:
            return "max-time"
        if cfg.patience is not None and run.bad_validations >= cfg.patience:
            return "patience"
        return "interrupted" if stop.set else ""

    def batches(self) -> Iterator[np.ndarray]:
        """This rank's remaining batches, epoch after epoch (advances the epoch counters): of each
        group of W consecutive batches of the epoch, the rank-th (distributed.py)."""
        lengths = np.maximum(self.data.train.src_lens, self.data.train.tgt_lens)
        run = self.run_state
        size, rank = self.world.size, self.world.rank
        while True:
            batches = epoch_batches(
                lengths, self.cfg.batch_size, self.cfg.seed, run.epoch, self.cfg.sort_batches
            )
            for first in range(run.batch_in_epoch, len(batches) - size + 1, size):
                yield batches[first + rank]
            run.epoch += 1
            run.batch_in_epoch = 0

    # ----------------------------------------------------------------------- loop
    def run(self) -> TrainResult:
        """The update loop; under torchrun a failed collective (another rank died) ends this rank
        with one line that says how to continue."""
        try:
            return self._run()
        except RuntimeError as exc:
            if not self.world.distributed:
                raise
            text = str(exc).strip()
            first = text.splitlines()[0][:300] if text else type(exc).__name__
            raise RescorerError(
                f"rank {self.world.rank} of {self.world.size}: update "
                f"{self.run_state.update + 1} failed, most likely because another rank died "
                f"(torchrun's report names it): {first}. The state saved at update "
                f"{self.saved_update:,} in {self.out} continues with --resume"
            ) from None

    def _run(self) -> TrainResult:
        cfg, run = self.cfg, self.run_state
        last_checkpoint = run.update
        # Two windows: the log record's (every --log-every updates) and the progress line's
        # (also every --progress-every seconds). Each holds pairs, tokens, summed NLL and its
        # start; the time a validation takes is left out of both rates.
        log_w = [0, 0, 0.0, time.monotonic()]
        line_w = list(log_w)
        self.loop_start = time.monotonic()
        self.first_update = run.update
        self.phases = TrainPhases(self.device) if cfg.profile else None
        self.say(
            "rescorer train: starting the updates"
            + (
                f"; the first one compiles the steps and readout ({COMPILE_TYPICAL}; not"
                " charged to --max-time; --compile no skips it)"
                if self.kernels
                else ""
            )
            + self.budget_note()
        )
        stopped_by = ""
        with _StopFlag() as stop:
            for index in self.batches():
                stopped_by = self.world.stop_reason(self.stop_reason(stop), self.device)
                if stopped_by:
                    break
                t0 = time.monotonic()
                first = run.update == self.first_update
                if first and self.kernels is not None:
                    with Heartbeat(
                        self.say, "rescorer train: still compiling the first update",
                        cfg.progress_every,
                    ):  # fmt: skip
                        n_pairs, n_tokens, loss = self.step(index)
                    self.compile_seconds = time.monotonic() - t0
                else:
                    n_pairs, n_tokens, loss = self.step(index)
                if self.phases is not None and not first:  # --profile: the first one compiles
                    self.phases.updates += 1
                    self.phases.wall += time.monotonic() - t0
                if first:  # what the budget went on until now
                    self.say(
                        f"rescorer train: first update done{self.budget_note()}: setup"
                        f" {_fmt_time(t0 - self.started)}, first update"
                        f" {_fmt_time(time.monotonic() - t0)}"
                        + (
                            " (compiling, not charged to --max-time)"
                            if self.kernels is not None
                            else ""
                        )
                    )
                run.update += 1
                run.batch_in_epoch += self.world.size
                run.pairs_seen += n_pairs
                run.train_seconds += time.monotonic() - t0
                for w in (log_w, line_w):
                    w[0], w[1], w[2] = w[0] + n_pairs, w[1] + n_tokens, w[2] + loss
                logged = run.update % cfg.log_every == 0
                now = time.monotonic()
                if logged or (cfg.progress_every and now - line_w[3] >= cfg.progress_every):
                    # Every --log-every updates, and at least every --progress-every seconds.
                    rate = line_w[0] / max(now - line_w[3], 1e-9)
                    ppl = math.exp(min(line_w[2] / line_w[1], 50))
                    self.say(
                        f"rescorer train: update {run.update:,} epoch {self.epochs:.2f}"
                        f" | {rate:,.0f} pairs/s | train ppl {ppl:.2f}"
                        f" | {_fmt_time(self.elapsed())}{self.budget()}"
                    )
                    line_w[:] = [0, 0, 0.0, now]
                if logged:
                    self.log(
                        {
                            "update": run.update,
                            "time": round(self.elapsed(), 1),
                            "epoch": round(self.epochs, 4),
                            "pairs_per_s": round(log_w[0] / max(now - log_w[3], 1e-9), 1),
                            "train_loss": log_w[2] / log_w[1],
                        }
                    )
                    log_w[:] = [0, 0, 0.0, now]
                if run.update % cfg.valid_every == 0:
                    t_valid = time.monotonic()
                    self.checkpoint()
                    last_checkpoint = run.update
                    spent = time.monotonic() - t_valid
                    log_w[3] += spent
                    line_w[3] += spent
            if run.update > last_checkpoint or not self.model_dir.has_weights():
                self.checkpoint()
            elif self.world.is_main:
                save_state(self.state_path, self.model, self.optim, run)
            self.world.barrier()  # the model directory is complete for every rank
        self.world.stop()
        seconds = self.elapsed()
        (self.tell if stopped_by == "interrupted" else self.say)(  # -q: this line still shows
            f"rescorer train: stopped ({stopped_by}) after {run.update:,} updates,"
            f" {self.epochs:.2f} epochs, {_fmt_time(seconds)}"
            + (
                f"; best validation perplexity {run.best_valid_ppl:.2f}"
                if run.best_valid_ppl is not None
                else ""
            )
            + (
                f"; the state is saved in {self.out}: continue with --resume"
                if stopped_by == "interrupted"
                else ""
            )
        )
        if self.phases is not None:
            self.say(
                f"rescorer train: where the time of {self.phases.updates:,} updates went"
                " (the first, which compiles, left out):"
            )
            for line in self.phases.report(self.phases.wall):
                self.say("  " + line)
        if run.best_valid_ppl is not None and self.unigram_ppl:
            verdict = Verdict(
                run.best_valid_ppl < LEARNED_RATIO * self.unigram_ppl,
                run.best_valid_ppl,
                self.unigram_ppl,
            )
            self.say(f"rescorer train: verdict: {verdict.sentence}")
        return TrainResult(
            out_dir=str(self.out),
            updates=run.update,
            epochs_done=self.epochs,
            stopped_by=stopped_by,
            best_valid_ppl=run.best_valid_ppl,
            unigram_ppl=self.unigram_ppl,
            train_pairs=len(self.data.train),
            valid_pairs=len(self.data.valid),
            seconds=seconds,
            # under torchrun another rank may have been the one signalled: count it as SIGTERM
            signal=(stop.signum or signal.SIGTERM) if stopped_by == "interrupted" else 0,
        )
