"""What a ``rescorer train`` run builds before its first update: the model folder checked, the
device and precision, the distributed group, the data and vocabularies, the model (compiled
steps, DDP), the optimiser, the state of a resumed run and the provenance.

:class:`RunSetup` holds these pieces; the update loop (``loop.py``) runs on them.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rescorer import __version__
from rescorer.batching import PairArrays, bucketed_batches, epoch_batches, length_bounds
from rescorer.constants import UNK_ID
from rescorer.cpus import choose_threads
from rescorer.device import (
    CompileGuard,
    bound_kernel_caches,
    resolve_device,
    set_threads,
    training_shapes,
)
from rescorer.errors import RescorerError, check
from rescorer.io.progress import Progress
from rescorer.io.shared import keep_freed_memory
from rescorer.model.checkpoint import ModelDir
from rescorer.model.encdec import EncoderDecoder, ModelConfig, compile_kernels, init_weights_
from rescorer.train.capture import StaticUpdate, capture_mode, describe_mode
from rescorer.train.config import TrainConfig, auto_batch_size
from rescorer.train.data import (
    SHORTLIST_SETTINGS,
    Source,
    build_training_vocabs,
    fingerprint,
    read_training_data,
    unigram_logprob_sum,
)
from rescorer.train.deadline import Deadline, OutOfTime
from rescorer.train.distributed import World
from rescorer.train.optim import ClippedAdadelta
from rescorer.train.precision import choose_training_precision
from rescorer.train.state import RunState, load_state
from rescorer.train.stop import fmt_time
from rescorer.vocab import load_vocabs

#: Entries of oneDNN's per-shape kernel caches in training (its own default): an update runs
#: 89 matrix products of 60 distinct shapes (row counts of each step and of the weights'
#: gradients vary with the batch's lengths), 401 shapes in 300 updates at batch 64. Scoring's
#: 16 (rescorer.device.KERNEL_CACHE_CAPACITY) would rebuild most bf16 kernels every update.
TRAIN_KERNEL_CACHE_CAPACITY = 1024


def process_settings() -> None:
    """The process-wide settings ``rescorer train`` makes before its first matrix product
    (and scripts/bench_train.py, to time the same update): oneDNN's per-shape kernel caches
    sized for training's shapes (TRAIN_KERNEL_CACHE_CAPACITY; a value set in the environment
    is kept), and the memory an update frees kept for the next one
    (rescorer.io.shared.keep_freed_memory): by default glibc hands every block of 128 KiB and
    more back, and each update faulted its logits, gradients and temporaries in again (8,100
    page faults an update at hidden 256, batch 64, against 400 kept; 7% of the update's CPU
    time on a Zen 3 core)."""
    bound_kernel_caches(TRAIN_KERNEL_CACHE_CAPACITY)
    keep_freed_memory()


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


class RunSetup:
    """The pieces of one invocation of a training run, built in order (module docstring)."""

    compile_seconds = 0.0  # spent compiling (the first update's), counted in --max-time
    stage = "loading torch and choosing the device"  # what the setup is doing (said when
    # --max-time runs out in it)

    def __init__(
        self,
        source: Source,
        out: Path,
        model_cfg: ModelConfig,
        cfg: TrainConfig,
        resume: bool,
        command_line: list[str] | None,
        echo: Callable[[str], None] | None,
        started: float | None = None,
    ) -> None:
        self.started = time.monotonic() if started is None else started  # the command's start
        self.cfg, self.out = cfg, out
        self.world = World()
        self.say = echo or (lambda msg: print(msg, file=sys.stderr, flush=True))
        self.tell = self.say  # even with --quiet (rank 0): where an interrupted run's state is
        if not self.world.is_main:
            self.tell = lambda msg: None
        if cfg.quiet or not self.world.is_main:
            self.say = lambda msg: None
        self._check_folder(resume)
        self._choose_device(model_cfg, resume)
        saved = self._saved_state() if resume else None
        try:
            with Deadline(self.budget_left(), "setup"):
                self._load_data(source, model_cfg, resume)
                self._build_model(model_cfg)
        except OutOfTime:
            raise RescorerError(
                f"--max-time {fmt_time(cfg.max_time or 0)} ran out while {self.stage}"
                f" ({fmt_time(time.monotonic() - self.started)} in): nothing was trained or"
                " written. Give a longer --max-time (it counts the whole command: reading the"
                " table, counting, compiling, training, the final save); --vocab DIR"
                " (rescorer vocab) skips the counting pass"
            ) from None
        self.run_state = RunState()
        self.saved_update = 0  # the update of the training state on disk
        if saved is not None:
            self._resume(saved)
        else:
            self._create(model_cfg, command_line)
        self.run_state.train_pairs = len(self.data.train)

    def _check_folder(self, resume: bool) -> None:
        """The model folder can take this run (a new one, or the saved state to resume)."""
        cfg, out = self.cfg, self.out
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
        check(
            not (cfg.profile and self.world.distributed),
            "--profile: not under torchrun (profile one process: its phases are the same)",
        )
        check(
            not (cfg.capture in ("on", "compile") and self.world.distributed),
            f"--capture {cfg.capture}: not under torchrun (yet): --capture off",
        )

    def _choose_device(self, model_cfg: ModelConfig, resume: bool) -> None:
        """The device, threads, batch size, the update's mode and precision (every rank takes
        rank 0's measured one); the first line says the first four."""
        cfg = self.cfg
        self.device = resolve_device(self.world.device_name(cfg.device))
        self.threads = set_threads(choose_threads(cfg.threads))
        batch = f"batch {cfg.batch_size}"
        if cfg.batch_auto and not resume:  # a resumed run keeps its batch size
            size, why = auto_batch_size(self.device.type)
            self.cfg = cfg = replace(cfg, batch_size=size)
            batch = f"batch {size} ({why})"
        self.capture = capture_mode(cfg.capture, self.device)
        self.say(
            f"rescorer train: device {self.device}, {self.threads.describe()}; {batch};"
            f" {describe_mode(self.capture, cfg.capture, self.device)}"
        )
        shapes = training_shapes(
            model_cfg.hidden_size,
            model_cfg.embed_size,
            model_cfg.maxout_units * model_cfg.maxout_pool,
            model_cfg.tgt_vocab_size + 1,
            cfg.batch_size,
        )
        process_settings()  # before the first product: the precision's probe runs them
        precision = choose_training_precision(
            cfg.precision, self.device, model_cfg, cfg.batch_size, shapes
        )
        self.precision = precision.precision
        if precision.reason:
            self.say(f"rescorer train: {precision.reason}")
        self.world.start(self.device)
        if self.world.distributed and precision.reason:  # measured: every rank takes rank 0's
            main_bf16 = float(self.world.is_main and self.precision == "bf16")
            self.precision = "bf16" if self.world.sum([main_bf16], self.device)[0] else "fp32"

    def _build_model(self, model_cfg: ModelConfig) -> None:
        """The model (seeded initialisation), its compiled kernels, DDP and the optimiser."""
        cfg = self.cfg
        self.stage = "building the model"
        self.say(f"rescorer train: building the model and the optimiser{self.budget_note()}")
        self.model = EncoderDecoder(model_cfg)
        init_weights_(self.model, torch.Generator().manual_seed(cfg.seed))
        self.model.to(self.device).train()
        # Compiled steps and readout (forward and backward), the scorer's kernels.
        compiled = cfg.wants_compile(len(self.data.train))
        guard = CompileGuard()  # one compile failure: steps, readout and optimizer all eager
        self.kernels = compile_kernels(self.model, guard) if compiled else None
        self.trained: torch.nn.Module = self.model  # what the updates run through
        if self.world.distributed:
            ids = [self.device.index] if self.device.type == "cuda" else None
            self.trained = torch.nn.parallel.DistributedDataParallel(self.model, device_ids=ids)
        self.optim = torch.optim.Adadelta(
            self.model.parameters(), lr=cfg.learning_rate, rho=cfg.rho, eps=cfg.eps
        )
        # Clip and Adadelta's step in one pass per parameter, compiled with the steps.
        self.update = ClippedAdadelta(self.optim, compiled=compiled, guard=guard)

    def _saved_state(self) -> dict[str, Any]:
        """The state of the run to resume, said before the data are read (on a large table
        minutes before the first update)."""
        saved = load_state(self.state_path, self.device)
        run = RunState(**saved["run"])
        epoch = f"epoch {run.pairs_seen / run.train_pairs:.2f}, " if run.train_pairs else ""
        self.say(
            f"rescorer train: resuming at update {run.update:,}"
            f" ({epoch}{run.pairs_seen:,} pairs seen"
            + (
                f", best validation perplexity {run.best_valid_ppl:.2f}"
                if run.best_valid_ppl is not None
                else ""
            )
            + f") from {self.state_path}"
        )
        return saved

    def _resume(self, saved: dict[str, Any]) -> None:
        """The saved weights, optimiser and run state; the resumption in the provenance."""
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
            self.model_dir.update_train_config(self.cfg.to_dict())

    def _create(self, model_cfg: ModelConfig, command_line: list[str] | None) -> None:
        """A new run's provenance, and its model folder (no weights until the first
        checkpoint)."""
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
        if self.world.is_main:
            ModelDir.create(
                self.out,
                model_cfg,
                self.src_vocab,
                self.tgt_vocab,
                self.provenance,
                train_config=self.cfg.to_dict(),
            )

    def _load_data(self, source: Source, model_cfg: ModelConfig, resume: bool) -> None:
        cfg = self.cfg
        self.stage = "reading the data for its fingerprint"
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
        elif cfg.vocab is not None:
            self.src_vocab, self.tgt_vocab, settings = load_vocabs(cfg.vocab)
            differ = [
                f"--{key.replace('_', '-')} {settings[key]} (this run: {getattr(cfg, key)})"
                for key in SHORTLIST_SETTINGS
                if key in settings and settings[key] != getattr(cfg, key)
            ]
            self.say(
                f"rescorer train: the shortlists of {cfg.vocab} ({len(self.src_vocab.words):,}"
                f" source and {len(self.tgt_vocab.words):,} target words)"
                + (f"; warning: they were built with {', '.join(differ)}" if differ else "")
            )
        else:
            self.stage = "counting the vocabularies"
            self.say(f"rescorer train: counting the vocabularies{self.budget_note()}")
            self.src_vocab, self.tgt_vocab = build_training_vocabs(
                source, model_cfg, cfg, self.reading_progress("counting the vocabularies")
            )
        self.stage = "encoding the pairs"
        self.say(f"rescorer train: encoding the pairs{self.budget_note()}")
        data = self.data = read_training_data(
            source, self.src_vocab, self.tgt_vocab, cfg, self.reading_progress("encoding")
        )
        self.fingerprint["lines"] = data.lines
        self.shortlist_coverage = shortlist_coverage(data.train)
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

    def budget_elapsed(self) -> float:
        """Seconds of this command charged to --max-time: all of them (issue 59)."""
        return time.monotonic() - self.started

    def budget_left(self) -> float | None:
        """Seconds left of --max-time (None: no --max-time)."""
        if self.cfg.max_time is None:
            return None
        return self.cfg.max_time - self.budget_elapsed()

    def budget_note(self) -> str:
        """`` (1m05s in, 22% of the --max-time budget)``: what the setup before the first
        update has cost so far (reading, vocabularies, encoding, compiling)."""
        minutes, seconds = divmod(int(time.monotonic() - self.started), 60)
        note = f"{minutes}m{seconds:02d}s in"
        if self.cfg.max_time:
            share = self.budget_elapsed() / self.cfg.max_time
            note += f", {100 * min(share, 1.0):.0f}% of the --max-time budget"
        return f" ({note})"

    def reading_progress(self, what: str) -> Progress:
        """Progress lines of one pass over the data (off with --quiet, on ranks > 0)."""
        return Progress(
            f"rescorer train: {what}",
            "lines",
            every=self.cfg.progress_every,
            enabled=not self.cfg.quiet and self.world.is_main,
        )

    def batches(self) -> Iterator[np.ndarray]:
        """This rank's remaining batches, epoch after epoch (advances the epoch counters): of each
        group of W consecutive batches of the epoch, the rank-th (distributed.py)."""
        lengths, run = self.lengths, self.run_state
        size, rank = self.world.size, self.world.rank
        while True:
            if run.order == "buckets":
                batches = bucketed_batches(
                    lengths, self.cfg.batch_size, self.cfg.seed, run.epoch, self.bounds
                )
            else:
                batches = epoch_batches(
                    lengths, self.cfg.batch_size, self.cfg.seed, run.epoch, self.cfg.sort_batches
                )
            for first in range(run.batch_in_epoch, len(batches) - size + 1, size):
                yield batches[first + rank]
            run.epoch += 1
            run.batch_in_epoch = 0

    def make_static(self) -> StaticUpdate | None:
        """The fixed-shape update of --capture (None: today's eager one), on the weights and
        the optimiser state as they are now (a resumed run's loaded); a new run's batches
        bucketed by length (a resumed run keeps the order it started with)."""
        self.lengths = np.maximum(self.data.train.src_lens, self.data.train.tgt_lens)  # (n,)
        self.tgt_lens = self.data.train.tgt_lens  # (n,)
        self.bounds = length_bounds(self.lengths)
        if not self.capture:
            return None
        if self.run_state.update == 0:
            self.run_state.order = "buckets"
        return StaticUpdate(
            self.model,
            self.optim,
            self.cfg.clip_norm,
            self.precision,
            self.cfg.batch_size,
            mode=self.capture,
            kernels=self.kernels,
        )


def shortlist_coverage(pairs: PairArrays) -> float | None:
    """The share of ``pairs`` with every word of both phrases inside the shortlists."""
    if len(pairs) == 0:
        return None
    # every sequence ends with EOS, so no segment is empty
    src_unk = np.add.reduceat(pairs.src == UNK_ID, pairs.src_offsets[:-1])  # (n,)
    tgt_unk = np.add.reduceat(pairs.tgt == UNK_ID, pairs.tgt_offsets[:-1])  # (n,)
    return float(np.mean((src_unk == 0) & (tgt_unk == 0)))
