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
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rescorer import __version__
from rescorer.batching import PairArrays, PairBatch, epoch_batches
from rescorer.device import autocast, bound_kernel_caches, resolve_device, resolve_precision
from rescorer.errors import RescorerError, check
from rescorer.io.progress import Progress
from rescorer.model.checkpoint import ModelDir
from rescorer.model.encdec import (
    EncoderDecoder,
    Kernels,
    ModelConfig,
    compile_kernels,
    init_weights_,
    sequence_logprobs,
)
from rescorer.train.config import TrainConfig, TrainResult
from rescorer.train.data import (
    Source,
    build_training_vocabs,
    fingerprint,
    read_training_data,
    unigram_logprob_sum,
)
from rescorer.train.distributed import World
from rescorer.train.state import RunState, load_state, save_state


def batch_loss(
    model: torch.nn.Module, batch: PairBatch, kernels: Kernels | None = None
) -> torch.Tensor:
    """The training loss: minus the summed log-probabilities of the batch's tokens (fp32),
    through the compiled ``kernels`` if given."""
    token_logp = model(*batch, kernels=kernels)  # (B,T) fp32
    return -sequence_logprobs(token_logp).sum()


def train_step(
    model: torch.nn.Module,
    optim: torch.optim.Optimizer,
    batch: PairBatch,
    precision: str,
    clip_norm: float,
    loss_scale: float = 1.0,
    kernels: Kernels | None = None,
) -> float:
    """One update: loss (bf16 autocast if asked), backward, global-norm clip, optimiser step.

    ``model`` may be a DistributedDataParallel wrapper; ``loss_scale`` multiplies the loss before
    the backward pass (the world size there: distributed.py). Returns the batch's summed NLL.
    A non-finite gradient norm skips the step (GroundHog instead replaced the gradient by
    0.1 * the parameters; docs/model.md §2).
    """
    with autocast(batch.src_ids.device, precision):
        loss = batch_loss(model, batch, kernels)
    optim.zero_grad(set_to_none=True)
    (loss * loss_scale if loss_scale != 1.0 else loss).backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), clip_norm)
    if torch.isfinite(norm):
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


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


class _Trainer:
    """One invocation of a training run: setup, the update loop, checkpoints."""

    def __init__(
        self,
        source: Source,
        out: Path,
        model_cfg: ModelConfig,
        cfg: TrainConfig,
        resume: bool,
        command_line: list[str] | None,
        echo: Callable[[str], None] | None,
    ) -> None:
        self.started = time.monotonic()
        self.cfg, self.out = cfg, out
        self.world = World()
        self.say = echo or (lambda msg: print(msg, file=sys.stderr, flush=True))
        if cfg.quiet or not self.world.is_main:
            self.say = lambda msg: None
        check(not out.exists() or out.is_dir(), f"{out}: exists and is not a folder")
        self.model_dir = ModelDir(out)
        self.state_path = self.model_dir.state_path
        if resume:
            check(self.state_path.is_file(), f"{self.state_path}: missing: nothing to resume")
        else:
            check(
                not self.model_dir.has_weights() and not self.state_path.exists(),
                f"{out}: already holds a model; use --resume or a new directory",
            )
        self.device = resolve_device(self.world.device_name(cfg.device))
        self.precision = resolve_precision(cfg.precision, self.device)
        bound_kernel_caches()
        self.world.start(self.device)
        self._load_data(source, model_cfg, resume)

        self.model = EncoderDecoder(model_cfg)
        init_weights_(self.model, torch.Generator().manual_seed(cfg.seed))
        self.model.to(self.device).train()
        # Compiled steps and readout (forward and backward), the scorer's kernels.
        compiled = cfg.wants_compile(len(self.data.train))
        self.kernels = compile_kernels(self.model) if compiled else None
        self.trained: torch.nn.Module = self.model  # what the updates run through
        if self.world.distributed:
            ids = [self.device.index] if self.device.type == "cuda" else None
            self.trained = torch.nn.parallel.DistributedDataParallel(self.model, device_ids=ids)
        self.optim = torch.optim.Adadelta(
            self.model.parameters(), lr=cfg.learning_rate, rho=cfg.rho, eps=cfg.eps
        )
        self.run_state = RunState()
        self.saved_update = 0  # the update of the training state on disk
        if resume:
            saved = load_state(self.state_path, self.device)
            self.model.load_state_dict(saved["model"])
            self.optim.load_state_dict(saved["optimizer"])
            self.run_state = RunState(**saved["run"])
            self.saved_update = self.run_state.update
            self.provenance = self.model_dir.read_provenance()
            resumed = {"date": _now(), "update": self.run_state.update}
            if self.world.distributed:
                resumed["world_size"] = self.world.size
            self.provenance.setdefault("resumed", []).append(resumed)
            if self.world.is_main:
                self.model_dir.update_provenance(self.provenance)
                self.model_dir.update_train_config(cfg.to_dict())
            self.say(
                f"rescorer train: resuming at update {self.run_state.update:,}"
                f" (epoch {self.run_state.epoch + 1})"
            )
        else:
            self.provenance = {
                "data": self.fingerprint,
                "train_pairs": len(self.data.train),
                "valid_pairs_heldout": self.data.heldout_pairs,
                "valid_pairs_scored": len(self.data.valid),
                "rescorer_version": __version__,
                "torch_version": torch.__version__,
                "python_version": sys.version.split()[0],
                "date": _now(),
                "command_line": command_line if command_line is not None else sys.argv,
            }
            if self.world.distributed:
                self.provenance["world_size"] = self.world.size
            self.world.barrier()  # every rank has checked the folder before rank 0 fills it
            if self.world.is_main:  # no weights until the first checkpoint
                ModelDir.create(
                    out,
                    model_cfg,
                    self.src_vocab,
                    self.tgt_vocab,
                    self.provenance,
                    train_config=cfg.to_dict(),
                )

    def _load_data(self, source: Source, model_cfg: ModelConfig, resume: bool) -> None:
        cfg = self.cfg
        self.fingerprint = fingerprint(source)
        if resume:
            old = self.model_dir.read_provenance().get("data", {})
            check(
                [f["sha256"] for f in old.get("files", [])]
                == [f["sha256"] for f in self.fingerprint["files"]],
                f"--resume: the training data differ from the saved run's"
                f" ({self.model_dir.provenance_path})",
            )
            self.src_vocab, self.tgt_vocab = self.model_dir.load_vocabs()
        else:
            self.say("rescorer train: counting the vocabularies")
            self.src_vocab, self.tgt_vocab = build_training_vocabs(
                source, model_cfg, cfg, self.reading_progress("counting the vocabularies")
            )
        self.say("rescorer train: encoding the pairs")
        data = self.data = read_training_data(
            source, self.src_vocab, self.tgt_vocab, cfg, self.reading_progress("encoding")
        )
        self.fingerprint["lines"] = data.lines
        self.unigram_ppl = None
        if len(data.valid):
            logp = unigram_logprob_sum(data.train, data.valid, self.tgt_vocab)
            self.unigram_ppl = math.exp(-logp / len(data.valid.tgt))
        self.say(
            f"rescorer train: {data.lines:,} lines, {len(data.train):,} training pairs,"
            f" {data.heldout_pairs:,} held out ({data.heldout_sources:,} sources;"
            f" {len(data.valid):,} scored); device {self.device}"
            + (f" x {self.world.size} ranks" if self.world.distributed else "")
            + f", precision {self.precision}"
            + (", compiled steps" if cfg.wants_compile(len(data.train)) else "")
            + (f"; unigram validation perplexity {self.unigram_ppl:.2f}" if len(data.valid) else "")
        )

    # ----------------------------------------------------------------------- pieces
    @property
    def epochs(self) -> float:
        return self.run_state.pairs_seen / len(self.data.train)

    def reading_progress(self, what: str) -> Progress:
        """Progress lines of one pass over the data (off with --quiet, on ranks > 0)."""
        return Progress(
            f"rescorer train: {what}",
            "lines",
            every=self.cfg.progress_every,
            enabled=not self.cfg.quiet and self.world.is_main,
        )

    def budget(self) -> str:
        """How much of --max-updates/--max-time is used, and the time left by the nearer one
        (a run may stop earlier on --patience)."""
        cfg, run = self.cfg, self.run_state
        shares: list[tuple[float, float | None]] = []  # (share used, seconds left)
        if cfg.max_time:
            used = self.elapsed() / cfg.max_time
            shares.append((used, max(cfg.max_time - self.elapsed(), 0.0)))
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
        batch = self.data.train.batch(index, self.device)
        loss = train_step(
            self.trained,
            self.optim,
            batch,
            self.precision,
            self.cfg.clip_norm,
            loss_scale=float(self.world.size),
            kernels=self.kernels,
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
        if cfg.max_time is not None and self.elapsed() >= cfg.max_time:
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
        stopped_by = ""
        with _StopFlag() as stop:
            for index in self.batches():
                stopped_by = self.world.stop_reason(self.stop_reason(stop), self.device)
                if stopped_by:
                    break
                t0 = time.monotonic()
                n_pairs, n_tokens, loss = self.step(index)
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
        self.say(
            f"rescorer train: stopped ({stopped_by}) after {run.update:,} updates,"
            f" {self.epochs:.2f} epochs, {_fmt_time(seconds)}"
            + (
                f"; best validation perplexity {run.best_valid_ppl:.2f}"
                if run.best_valid_ppl is not None
                else ""
            )
            + ("; continue with --resume" if stopped_by == "interrupted" else "")
        )
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
