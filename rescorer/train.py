"""``rescorer train``: the paper's training procedure (rnnenc-spec.md §2, design.md §2).

One example per table line (unique pairs, counts ignored), a fresh seeded permutation each epoch,
batches of 64, loss = the SUM of token NLLs over the batch (encdec.py), Adadelta (rho 0.95,
eps 1e-6, lr 1), global gradient-norm clip 1. A validation slice is held out by source phrase;
its per-token perplexity (EOS counted) is reported beside a unigram model's, and the best
weights are kept in MODEL_DIR. ``resume=True`` continues a run exactly from TRAIN_STATE_FILE.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, fields, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rescorer import __version__
from rescorer.batching import PairArrays, PairArraysBuilder, PairBatch, epoch_batches
from rescorer.checkpoint import (
    read_json,
    read_model_config,
    save_model_dir,
    save_weights,
    write_json,
)
from rescorer.constants import (
    CONFIG_FILE,
    PROVENANCE_FILE,
    SRC_VOCAB_FILE,
    TGT_VOCAB_FILE,
    TRAIN_LOG_FILE,
    TRAIN_STATE_FILE,
    WEIGHTS_FILE,
)
from rescorer.device import autocast, resolve_device, resolve_precision
from rescorer.errors import InputError, RescorerError, check
from rescorer.model import EncoderDecoder, ModelConfig, init_weights_, sequence_logprobs
from rescorer.phrase_table import TableReader, open_text, split_tokens
from rescorer.vocab import Vocab, build_vocabs

__all__ = [
    "TrainConfig",
    "TrainResult",
    "batch_loss",
    "parse_duration",
    "train",
    "train_step",
]

STATE_FORMAT = "rescorer-train-state-1"
Source = str | tuple[str, str]  # a phrase table, or parallel (source file, target file)


@dataclass(frozen=True)
class TrainConfig:
    """Training settings; field names match the ``rescorer train`` flags."""

    batch_size: int = 64  # pairs per update (paper)
    max_updates: int | None = None  # total updates of the run (resumes included)
    max_time: float | None = None  # seconds of this invocation (data loading included)
    valid_fraction: float = 0.01  # share of source phrases held out (all their pairs)
    valid_max_pairs: int = 5000  # validation pairs actually scored (a seeded subset)
    valid_every: int = 1000  # updates between validations (and train-state saves)
    patience: int | None = 10  # validations without improvement before stopping; None = off
    seed: int = 1  # data split, data order and initialisation
    sort_batches: int = 1  # >1: regroup windows of K batches by length (GroundHog sort_k_batches)
    learning_rate: float = 1.0  # Adadelta lr (Zeiler's Adadelta has none: 1)
    rho: float = 0.95
    eps: float = 1e-6
    clip_norm: float = 1.0  # global L2 norm of the gradient
    device: str = "auto"
    precision: str = "auto"  # auto | bf16 | fp32
    log_every: int = 100  # updates between progress lines
    quiet: bool = False
    skip_bad_lines: str | None = None

    # Fields that must not change when a run is resumed (they fix the data and the optimiser).
    IDENTITY = (
        "batch_size",
        "valid_fraction",
        "valid_max_pairs",
        "seed",
        "sort_batches",
        "learning_rate",
        "rho",
        "eps",
        "clip_norm",
    )

    def __post_init__(self) -> None:
        check(self.batch_size >= 1, "--batch-size must be at least 1")
        check(0.0 <= self.valid_fraction < 1.0, "--valid-fraction must be in [0, 1)")
        check(self.valid_every >= 1 and self.log_every >= 1, "intervals must be at least 1")
        check(self.max_updates is None or self.max_updates >= 0, "--max-updates must be >= 0")
        check(self.max_time is None or self.max_time >= 0, "--max-time must be >= 0")
        check(self.patience is None or self.patience >= 1, "--patience must be at least 1")
        check(self.sort_batches >= 1, "--sort-batches must be at least 1")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class TrainResult:
    out_dir: str
    updates: int
    epochs_done: float  # fractional epochs over the training pairs
    stopped_by: str  # max-updates | max-time | patience | interrupted
    best_valid_ppl: float | None
    unigram_ppl: float | None
    train_pairs: int
    valid_pairs: int
    seconds: float


def parse_duration(text: str) -> float:
    """Seconds of ``90m``, ``2h``, ``30s``, ``1h30m``, ``1.5h``, ``2d``; a bare number: seconds."""
    text = text.strip().lower()
    if re.fullmatch(r"\d+(\.\d*)?", text):
        return float(text)
    parts = re.findall(r"(\d+(?:\.\d*)?)([dhms])", text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise RescorerError(f"bad duration {text!r}: expected e.g. 30s, 90m, 2h or 1h30m")
    scale = {"d": 86400, "h": 3600, "m": 60, "s": 1}
    return sum(float(n) * scale[u] for n, u in parts)


def batch_loss(model: EncoderDecoder, batch: PairBatch) -> torch.Tensor:
    """The training loss: minus the summed log-probabilities of the batch's tokens (fp32)."""
    token_logp = model(*batch)  # (B,T) fp32
    return -sequence_logprobs(token_logp).sum()


def train_step(
    model: EncoderDecoder,
    optim: torch.optim.Optimizer,
    batch: PairBatch,
    precision: str,
    clip_norm: float,
) -> float:
    """One update: loss (bf16 autocast if asked), backward, global-norm clip, optimiser step.

    Returns the batch's summed NLL. A non-finite gradient norm skips the step (GroundHog instead
    replaced the gradient by 0.1 * the parameters; rnnenc-spec.md §2).
    """
    with autocast(batch.src_ids.device, precision):
        loss = batch_loss(model, batch)
    optim.zero_grad(set_to_none=True)
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), clip_norm)
    if torch.isfinite(norm):
        optim.step()
    return float(loss.detach())


# --------------------------------------------------------------------------------- data
def _heldout(src: str, seed: int, fraction: float) -> bool:
    """Whether source phrase ``src`` belongs to the validation slice (seeded, order-free)."""
    if fraction <= 0.0:
        return False
    digest = hashlib.blake2b(f"{seed}\t{src}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") < fraction * 2.0**64


def _iter_pairs(
    source: Source, skip_bad_lines: str | None, counter: list[int]
) -> Iterator[tuple[str, str]]:
    """(source phrase, target phrase) of every input line; counter[0] = lines read."""
    if isinstance(source, str):
        with TableReader(source, skip_bad_lines=skip_bad_lines) as reader:
            for entry in reader:
                yield entry.src, entry.tgt
            counter[0] = reader.stats.lines
        return
    src_path, tgt_path = source
    with open_text(src_path) as src_lines, open_text(tgt_path) as tgt_lines:
        lineno = 0
        for lineno, (src, tgt) in enumerate(zip(src_lines, tgt_lines), start=1):  # noqa: B905
            for path, phrase in ((src_path, src), (tgt_path, tgt)):
                if not split_tokens(phrase):
                    raise InputError(path, lineno, "empty phrase: expected one phrase per line")
            yield src, tgt
        for path, rest in ((src_path, src_lines), (tgt_path, tgt_lines)):
            if next(rest, None) is not None:
                raise InputError(path, lineno + 1, "more lines than the other --pairs file")
        counter[0] = lineno


def _fingerprint(source: Source) -> dict[str, Any]:
    paths = [source] if isinstance(source, str) else list(source)
    files = []
    for path in paths:
        digest = hashlib.sha256()
        try:
            with open(path, "rb") as f:
                for block in iter(lambda f=f: f.read(1 << 20), b""):
                    digest.update(block)
        except OSError as exc:
            raise RescorerError(f"{path}: cannot read: {exc.strerror}") from exc
        size = os.path.getsize(path)
        files.append({"path": os.path.abspath(path), "bytes": size, "sha256": digest.hexdigest()})
    return {"kind": "table" if isinstance(source, str) else "pairs", "files": files}


@dataclass(frozen=True)
class TrainingData:
    train: PairArrays
    valid: PairArrays  # the scored validation subset
    lines: int
    heldout_pairs: int  # every pair of a held-out source (excluded from training)
    heldout_sources: int


def read_training_data(
    source: Source, src_vocab: Vocab, tgt_vocab: Vocab, cfg: TrainConfig
) -> TrainingData:
    """Encode every pair (EOS appended on both sides) into the training or the validation split."""
    train, valid = PairArraysBuilder(), PairArraysBuilder()
    counter = [0]
    last_src, last_held, held_sources = None, False, 0
    for src, tgt in _iter_pairs(source, cfg.skip_bad_lines, counter):
        if src != last_src:
            last_src, last_held = src, _heldout(src, cfg.seed, cfg.valid_fraction)
            held_sources += last_held
        side = valid if last_held else train
        side.add(src_vocab.encode_eos(split_tokens(src)), tgt_vocab.encode_eos(split_tokens(tgt)))
    check(len(train) > 0, "no training pairs left (is --valid-fraction too large?)")
    heldout = valid.build()
    if len(heldout) > cfg.valid_max_pairs:
        rng = np.random.default_rng([cfg.seed, 1])
        pick = np.sort(rng.choice(len(heldout), size=cfg.valid_max_pairs, replace=False))
        scored = heldout.subset(pick)
    else:
        scored = heldout
    return TrainingData(train.build(), scored, counter[0], len(heldout), held_sources)


def _build_vocabs(source: Source, model_cfg: ModelConfig, cfg: TrainConfig) -> tuple[Vocab, Vocab]:
    """Shortlists counted over the training split only (validation sources excluded)."""
    counter = [0]
    pairs = (
        (s, t)
        for s, t in _iter_pairs(source, cfg.skip_bad_lines, counter)
        if not _heldout(s, cfg.seed, cfg.valid_fraction)
    )
    return build_vocabs(pairs, model_cfg.src_vocab_size, model_cfg.tgt_vocab_size)


def unigram_logprob_sum(train: PairArrays, valid: PairArrays, tgt_vocab: Vocab) -> float:
    """Sum over validation target tokens (EOS included) of ln p_unigram, fitted on the training
    targets with add-one smoothing over the target classes (UNK, the shortlist words, EOS)."""
    counts = np.bincount(train.tgt, minlength=tgt_vocab.num_rows).astype(np.float64)
    num_classes = len(tgt_vocab.words) + 2
    logp = np.log((counts + 1.0) / (counts.sum() + num_classes))
    return float(logp[valid.tgt].sum())


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


def _save_state(
    path: Path, model: EncoderDecoder, optim: torch.optim.Optimizer, run: RunState
) -> None:
    tmp = path.with_name(path.name + ".tmp")
    torch.save(
        {
            "format": STATE_FORMAT,
            "model": {k: v.detach().cpu() for k, v in model.state_dict().items()},
            "optimizer": optim.state_dict(),
            "run": asdict(run),
        },
        tmp,
    )
    os.replace(tmp, path)


def _load_state(path: Path, device: torch.device) -> dict[str, Any]:
    try:
        state = torch.load(path, map_location=device, weights_only=True)
    except FileNotFoundError as exc:
        raise RescorerError(f"{path}: missing: nothing to resume") from exc
    except Exception as exc:  # any unreadable file is a user-facing error here
        raise RescorerError(f"{path}: cannot read training state: {exc}") from exc
    if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
        raise RescorerError(f"{path}: not a rescorer training state ({STATE_FORMAT})")
    return state


class _StopFlag:
    """Set by SIGINT/SIGTERM: the loop finishes its update, saves and stops (a second ^C kills)."""

    def __init__(self) -> None:
        self.set = False
        self._old: dict[int, Any] = {}

    def __enter__(self) -> _StopFlag:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._old[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, frame: object) -> None:
        self.set = True
        signal.signal(signum, self._old.get(signum, signal.SIG_DFL))

    def __exit__(self, *exc: object) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)


def _fmt_time(seconds: float) -> str:
    m, s = divmod(int(seconds), 60)
    h, m = divmod(m, 60)
    return f"{h}h{m:02d}m{s:02d}s" if h else f"{m}m{s:02d}s"


# --------------------------------------------------------------------------------- train
def resume_configs(
    out_dir: str | Path, model_flags: dict[str, Any], train_flags: dict[str, Any]
) -> tuple[ModelConfig, TrainConfig]:
    """The configs of the run saved in ``out_dir``, with the flags given now applied on top.

    Flags that fix the model or the data order must agree with the saved run.
    """
    model_cfg, data = read_model_config(out_dir)
    known = {f.name for f in fields(TrainConfig)}
    train_cfg = TrainConfig(**{k: v for k, v in data.get("train", {}).items() if k in known})
    for cfg, flags, keys in (
        (model_cfg, model_flags, model_flags.keys()),
        (train_cfg, train_flags, TrainConfig.IDENTITY),
    ):
        for key in set(flags) & set(keys):
            check(
                getattr(cfg, key) == flags[key],
                f"--resume: --{key.replace('_', '-')} {flags[key]} differs from the saved "
                f"run's {getattr(cfg, key)}",
            )
    return model_cfg, replace(train_cfg, **train_flags)


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
        self.say = echo or (lambda msg: print(msg, file=sys.stderr, flush=True))
        if cfg.quiet:
            self.say = lambda msg: None
        self.state_path = out / TRAIN_STATE_FILE
        if resume:
            check(self.state_path.is_file(), f"{self.state_path}: missing: nothing to resume")
        else:
            check(
                not (out / WEIGHTS_FILE).exists() and not self.state_path.exists(),
                f"{out}: already holds a model; use --resume or a new directory",
            )
        self.device = resolve_device(cfg.device)
        self.precision = resolve_precision(cfg.precision, self.device)
        self._load_data(source, model_cfg, resume)

        self.model = EncoderDecoder(model_cfg)
        init_weights_(self.model, torch.Generator().manual_seed(cfg.seed))
        self.model.to(self.device).train()
        self.optim = torch.optim.Adadelta(
            self.model.parameters(), lr=cfg.learning_rate, rho=cfg.rho, eps=cfg.eps
        )
        self.run_state = RunState()
        if resume:
            saved = _load_state(self.state_path, self.device)
            self.model.load_state_dict(saved["model"])
            self.optim.load_state_dict(saved["optimizer"])
            self.run_state = RunState(**saved["run"])
            self.provenance = read_json(out / PROVENANCE_FILE)
            resumed = {"date": _now(), "update": self.run_state.update}
            self.provenance.setdefault("resumed", []).append(resumed)
            write_json(out / PROVENANCE_FILE, self.provenance)
            write_json(out / CONFIG_FILE, {**read_json(out / CONFIG_FILE), "train": cfg.to_dict()})
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
            out.mkdir(parents=True, exist_ok=True)
            (out / TRAIN_LOG_FILE).unlink(missing_ok=True)
            save_model_dir(
                out,
                self.model,
                self.src_vocab,
                self.tgt_vocab,
                self.provenance,
                train_config=cfg.to_dict(),
            )
            (out / WEIGHTS_FILE).unlink()  # no weights until the first checkpoint

    def _load_data(self, source: Source, model_cfg: ModelConfig, resume: bool) -> None:
        out, cfg = self.out, self.cfg
        self.fingerprint = _fingerprint(source)
        if resume:
            old = read_json(out / PROVENANCE_FILE).get("data", {})
            check(
                [f["sha256"] for f in old.get("files", [])]
                == [f["sha256"] for f in self.fingerprint["files"]],
                f"--resume: the training data differ from the saved run's"
                f" ({out / PROVENANCE_FILE})",
            )
            self.src_vocab = Vocab.load(str(out / SRC_VOCAB_FILE))
            self.tgt_vocab = Vocab.load(str(out / TGT_VOCAB_FILE))
        else:
            self.say("rescorer train: counting the vocabularies")
            self.src_vocab, self.tgt_vocab = _build_vocabs(source, model_cfg, cfg)
        self.say("rescorer train: encoding the pairs")
        data = self.data = read_training_data(source, self.src_vocab, self.tgt_vocab, cfg)
        self.fingerprint["lines"] = data.lines
        self.unigram_ppl = None
        if len(data.valid):
            logp = unigram_logprob_sum(data.train, data.valid, self.tgt_vocab)
            self.unigram_ppl = math.exp(-logp / len(data.valid.tgt))
        self.say(
            f"rescorer train: {data.lines:,} lines, {len(data.train):,} training pairs,"
            f" {data.heldout_pairs:,} held out ({data.heldout_sources:,} sources;"
            f" {len(data.valid):,} scored); device {self.device}, precision {self.precision}"
            + (f"; unigram validation perplexity {self.unigram_ppl:.2f}" if len(data.valid) else "")
        )

    # ----------------------------------------------------------------------- pieces
    @property
    def epochs(self) -> float:
        return self.run_state.pairs_seen / len(self.data.train)

    def log(self, record: dict[str, Any]) -> None:
        with open(self.out / TRAIN_LOG_FILE, "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def step(self, index: np.ndarray) -> tuple[int, int, float]:
        """One update on the pairs ``index``: (pairs, target tokens, summed NLL)."""
        batch = self.data.train.batch(index, self.device)
        loss = train_step(self.model, self.optim, batch, self.precision, self.cfg.clip_norm)
        if not math.isfinite(loss):
            self.say(f"rescorer train: update {self.run_state.update + 1}: non-finite loss")
        return batch.num_pairs, batch.num_tokens, loss

    def checkpoint(self) -> None:
        """Validate, keep the best weights, count patience, save the training state."""
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
            save_weights(self.out / WEIGHTS_FILE, self.model)
            self.provenance["training"] = {
                "updates": run.update,
                "epochs": round(self.epochs, 4),
                "valid_ppl": run.best_valid_ppl,
                "unigram_ppl": self.unigram_ppl,
            }
            write_json(self.out / PROVENANCE_FILE, self.provenance)
        else:
            run.bad_validations += 1
        record["best"] = improved
        self.log(record)
        _save_state(self.state_path, self.model, self.optim, run)

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
        """The remaining batches of the run, epoch after epoch (advances the epoch counters)."""
        lengths = np.maximum(self.data.train.src_lens, self.data.train.tgt_lens)
        run = self.run_state
        while True:
            batches = epoch_batches(
                lengths, self.cfg.batch_size, self.cfg.seed, run.epoch, self.cfg.sort_batches
            )
            yield from batches[run.batch_in_epoch :]
            run.epoch += 1
            run.batch_in_epoch = 0

    # ----------------------------------------------------------------------- loop
    def run(self) -> TrainResult:
        cfg, run = self.cfg, self.run_state
        last_checkpoint = run.update
        pairs = tokens = 0
        nll = 0.0
        window_start = time.monotonic()
        stopped_by = ""
        with _StopFlag() as stop:
            for index in self.batches():
                stopped_by = self.stop_reason(stop)
                if stopped_by:
                    break
                t0 = time.monotonic()
                n_pairs, n_tokens, loss = self.step(index)
                run.update += 1
                run.batch_in_epoch += 1
                run.pairs_seen += n_pairs
                run.train_seconds += time.monotonic() - t0
                pairs, tokens, nll = pairs + n_pairs, tokens + n_tokens, nll + loss
                if run.update % cfg.log_every == 0:
                    rate = pairs / max(time.monotonic() - window_start, 1e-9)
                    self.say(
                        f"rescorer train: update {run.update:,} epoch {self.epochs:.2f}"
                        f" | {rate:,.0f} pairs/s | train ppl {math.exp(min(nll / tokens, 50)):.2f}"
                        f" | {_fmt_time(self.elapsed())}"
                    )
                    self.log(
                        {
                            "update": run.update,
                            "time": round(self.elapsed(), 1),
                            "epoch": round(self.epochs, 4),
                            "pairs_per_s": round(rate, 1),
                            "train_loss": nll / tokens,
                        }
                    )
                    pairs = tokens = 0
                    nll = 0.0
                    window_start = time.monotonic()
                if run.update % cfg.valid_every == 0:
                    self.checkpoint()
                    last_checkpoint = run.update
                    window_start = time.monotonic()
            if run.update > last_checkpoint or not (self.out / WEIGHTS_FILE).exists():
                self.checkpoint()
            else:
                _save_state(self.state_path, self.model, self.optim, run)
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
        )


def configs_from_flags(
    flags: dict[str, Any], given: set[str], resume_dir: str | Path | None = None
) -> tuple[ModelConfig, TrainConfig]:
    """Configs from ``rescorer train``'s flags (``given``: those set on the command line).

    ``max_time`` may be a duration string ("90m"); ``patience`` 0 means off. With ``resume_dir``
    the saved run's configs are the base and only the given flags apply.
    """
    flags = dict(flags)
    if isinstance(flags.get("max_time"), str):
        flags["max_time"] = parse_duration(flags["max_time"])
    if flags.get("patience") == 0:
        flags["patience"] = None
    model_keys = {f.name for f in fields(ModelConfig)}
    train_keys = {f.name for f in fields(TrainConfig)}
    unknown = set(flags) - model_keys - train_keys
    check(not unknown, f"unknown training options: {', '.join(sorted(unknown))}")
    if resume_dir is not None:
        return resume_configs(
            resume_dir,
            {k: flags[k] for k in model_keys & given},
            {k: flags[k] for k in train_keys & given},
        )
    try:
        model_cfg = ModelConfig(**{k: v for k, v in flags.items() if k in model_keys})
    except ValueError as exc:
        raise RescorerError(str(exc)) from exc
    return model_cfg, TrainConfig(**{k: v for k, v in flags.items() if k in train_keys})
