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
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from rescorer.batching import bucket_of
from rescorer.errors import RescorerError
from rescorer.io.progress import COMPILE_TYPICAL, Heartbeat
from rescorer.model.encdec import ModelConfig
from rescorer.phases import nothing
from rescorer.train.budget import BudgetedRun
from rescorer.train.config import TrainConfig, TrainResult
from rescorer.train.data import Source
from rescorer.train.deadline import compile_give_up
from rescorer.train.profile import TrainPhases
from rescorer.train.state import save_state
from rescorer.train.step import batch_loss, evaluate, train_step
from rescorer.train.stop import StopFlag as _StopFlag
from rescorer.train.stop import fmt_time as _fmt_time
from rescorer.verdict import LEARNED_RATIO, Verdict

__all__ = ["batch_loss", "evaluate", "train", "train_step"]


def train(
    source: Source,
    out_dir: str | Path,
    model_cfg: ModelConfig,
    train_cfg: TrainConfig,
    *,
    resume: bool = False,
    command_line: list[str] | None = None,
    echo: Callable[[str], None] | None = None,
    started: float | None = None,
) -> TrainResult:
    """Train on a phrase table (or parallel phrase files) into the model directory ``out_dir``.

    Progress goes to ``echo`` (default: stderr) unless ``train_cfg.quiet``. On SIGINT/SIGTERM the
    current update finishes, the state is saved and the result says ``interrupted``. ``started``:
    when the command started (time.monotonic(); default now), where --max-time counts from.
    """
    return _Trainer(
        source, Path(out_dir), model_cfg, train_cfg, resume, command_line, echo, started
    ).run()


class _Trainer(BudgetedRun):
    """One invocation of a training run: the update loop and checkpoints, on the pieces
    :class:`~rescorer.train.setup.RunSetup` built."""

    # ----------------------------------------------------------------------- pieces
    @property
    def epochs(self) -> float:
        return self.run_state.pairs_seen / len(self.data.train)

    def log(self, record: dict[str, Any]) -> None:
        if self.world.is_main:
            self.model_dir.append_log(record)

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def step(self, index: np.ndarray) -> tuple[int, int, float | None]:
        """One update on the pairs ``index`` (this rank's batch): (pairs, target tokens, summed
        NLL), summed over the ranks; the NLL None when the update is only queued on the device
        (--capture: report() reads the losses back)."""
        if self.static is not None:
            length = int(self.bounds[bucket_of(self.lengths[index].max(), self.bounds)])
            self.static(self.data.train, index, length)
            return len(index), int(self.tgt_lens[index].sum()), None
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
        if cfg.max_time is not None and self.out_of_time():
            return "max-time"
        if cfg.patience is not None and run.bad_validations >= cfg.patience:
            return "patience"
        return "interrupted" if stop.set else ""

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
        # Two windows: the log record's (every --log-every updates) and the progress line's
        # (also every --progress-every seconds). Each holds pairs, tokens, summed NLL and its
        # start; the time a validation takes is left out of both rates.
        self.log_w: list[float] = [0, 0, 0.0, time.monotonic()]
        self.line_w = list(self.log_w)
        self.loop_start = time.monotonic()
        self.first_update = run.update
        self.phases = TrainPhases(self.device) if cfg.profile else None
        self.static = self.make_static()
        self.steady, self.checkpoint_cost, self.gave_up = None, None, False
        self.checkpointed = run.update
        self.setup_warning()
        self.say(
            "rescorer train: starting the updates"
            + (
                f"; the first one compiles the steps and readout ({COMPILE_TYPICAL}; counted"
                f" in --max-time; --compile auto gives up after {_fmt_time(compile_give_up(None))}"
                " and trains without; --compile no skips it)"
                if self.kernels
                else ""
            )
            + (
                f"; {len(self.bounds)} shapes (padded lengths {', '.join(map(str, self.bounds))})"
                if self.static is not None
                else ""
            )
            + self.budget_note()
        )
        stopped_by = ""
        with _StopFlag() as stop:
            for index in self.batches():
                if self.reserve_to_measure():
                    self.timed_checkpoint()
                stopped_by = self.world.stop_reason(self.stop_reason(stop), self.device)
                if stopped_by:
                    break
                if not self.timed_update(index):
                    continue  # --max-time ran out while compiling: stop
                self.report()
                if run.update % cfg.valid_every == 0:
                    self.timed_checkpoint()
            if run.update > self.checkpointed or not self.model_dir.has_weights():
                self.checkpoint()
            elif self.world.is_main:
                save_state(self.state_path, self.model, self.optim, run)
            self.world.barrier()  # the model directory is complete for every rank
        self.world.stop()
        return self.finish(stopped_by, stop)

    def timed_checkpoint(self) -> None:
        """A checkpoint, its cost measured (the --max-time reserve) and left out of the rates."""
        t0 = time.monotonic()
        self.checkpoint()
        self.checkpointed = self.run_state.update
        spent = self.checkpoint_cost = time.monotonic() - t0
        self.log_w[3] += spent
        self.line_w[3] += spent
        self.leave_out(spent)

    def timed_update(self, index: np.ndarray) -> bool:
        """One update on ``index``, counted in the run state and both windows (the first one
        under a heartbeat while it compiles, and followed by what the setup cost); False when
        --max-time ran out in the first update's compile (nothing done)."""
        cfg, run = self.cfg, self.run_state
        t0 = time.monotonic()
        first = run.update == self.first_update
        if first and self.kernels is not None:
            with Heartbeat(
                self.say, "rescorer train: still compiling the first update",
                cfg.progress_every,
            ):  # fmt: skip
                done = self.first_compiled_step(index)
            self.compile_seconds = time.monotonic() - t0
            if done is None:
                return False
            n_pairs, n_tokens, loss = done
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
                + (" (compiling, counted in --max-time)" if self.kernels is not None else "")
            )
        run.update += 1
        run.batch_in_epoch += self.world.size
        run.pairs_seen += n_pairs
        run.train_seconds += time.monotonic() - t0
        for w in (self.log_w, self.line_w):
            w[0], w[1], w[2] = w[0] + n_pairs, w[1] + n_tokens, w[2] + (loss or 0.0)
        if first:
            self.steady_from_here()
        return True

    def report(self) -> None:
        """The progress line (every --log-every updates, and at least every --progress-every
        seconds) and the log record (every --log-every updates)."""
        cfg, run = self.cfg, self.run_state
        log_w, line_w = self.log_w, self.line_w
        logged = run.update % cfg.log_every == 0
        now = time.monotonic()
        shown = logged or (cfg.progress_every and now - line_w[3] >= cfg.progress_every)
        if shown and self.static is not None:  # the losses queued on the device, read back
            loss, bad, skipped = self.static.take()
            for w in (log_w, line_w):
                w[2] += loss
            if bad or skipped:
                self.say(
                    f"rescorer train: update {run.update:,}: {bad} non-finite losses and"
                    f" {skipped} skipped steps (non-finite gradients) since the last line"
                )
            now = time.monotonic()
        if shown:
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

    def finish(self, stopped_by: str, stop: _StopFlag) -> TrainResult:
        """The closing lines (why it stopped, --profile's phases, the verdict) and the result."""
        run = self.run_state
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
