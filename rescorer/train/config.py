"""Training settings: TrainConfig, the result record, durations, the flag rules of a resumed run."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

from rescorer.constants import CONFIG_FILE, DIRECTIONS, FORWARD
from rescorer.durations import parse_duration
from rescorer.errors import RescorerError, check
from rescorer.io.schema import schema_problem
from rescorer.model.config import ModelConfig

COMPILE_MIN_PAIRS = 100_000  # --compile auto: the smallest training set that compiles

#: --batch-size auto on a CPU: the paper's 64 (Cho et al., 2014), measured against 256 by time
#: to quality (scripts/bench_time_to_quality.py; docs/training.md, "Batch size"). Batch 256 moves
#: more pairs a second but learns less from each: on help's table, hidden 256, 20 minutes per
#: run on an idle 2-core Zen 3, batch 64 reached validation perplexity 13.3 and 256 only 59.6,
#: which 64 had passed after 9.4 minutes. CPU_BATCH_WHY says it in train's first line.
CPU_BATCH_SIZE = 64
CPU_BATCH_WHY = (
    "the paper's; in 20 minutes at hidden 256 it reached validation perplexity 13.3, batch 256 "
    "59.6 (docs/training.md)"
)
#: --batch-size auto on a GPU, written here and nowhere else. Not yet measured on a GPU: the
#: paper's 64 until the time-to-quality runs (validation perplexity against wall time at batch
#: 64, 256, 1024 and 4096: scripts/gpu_check.sh's ttq section) name the winner; then this
#: constant and GPU_BATCH_WHY change together.
GPU_BATCH_SIZE = 64
GPU_BATCH_WHY = "not yet measured on a GPU: the paper's 64"
BATCH_AUTO_HELP = (
    f"auto: {CPU_BATCH_SIZE} on a CPU (the paper's, which learns faster there than 256); "
    f"on a GPU {GPU_BATCH_SIZE} ({GPU_BATCH_WHY})"
)


def auto_batch_size(device_type: str) -> tuple[int, str]:
    """--batch-size auto on a device of ``device_type``: (pairs per update, why)."""
    if device_type == "cuda":
        return GPU_BATCH_SIZE, f"--batch-size auto on a GPU: {GPU_BATCH_WHY}"
    return CPU_BATCH_SIZE, f"--batch-size auto on a CPU: {CPU_BATCH_WHY}"


@dataclass(frozen=True)
class TrainConfig:
    """Training settings; field names match the ``rescorer train`` flags."""

    batch_size: int = 64  # pairs per update (paper)
    batch_auto: bool = False  # batch_size chosen for the device (auto_batch_size) at the start
    max_updates: int | None = None  # total updates of the run (resumes included)
    max_time: float | None = None  # seconds of this run: loading in, first compile out
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
    threads: int | None = None  # compute threads; None: rescorer/cpus.py's rule (said at start)
    precision: str = "auto"  # auto | bf16 | fp32
    compile: str = "auto"  # torch.compile the steps and readout: yes | no | auto (big data)
    log_every: int = 100  # updates between progress lines
    progress_every: float = 30.0  # at most this many seconds between progress lines (0: off)
    quiet: bool = False
    skip_bad_lines: str | None = None
    direction: str = FORWARD  # forward: p(target | source); inverse: p(source | target)
    vocab: str | None = None  # a folder of ``rescorer vocab``: its shortlists, not counted again
    profile: bool = False  # time the updates' phases and print where the time went
    capture: str = "auto"  # the update at fixed shapes as a CUDA graph: auto (off) | on | off
    # | compile

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
        "direction",
    )

    def __post_init__(self) -> None:
        check(self.batch_size >= 1, "--batch-size must be at least 1")
        check(0.0 <= self.valid_fraction < 1.0, "--valid-fraction must be in [0, 1)")
        check(self.valid_every >= 1 and self.log_every >= 1, "intervals must be at least 1")
        check(self.max_updates is None or self.max_updates >= 0, "--max-updates must be >= 0")
        check(self.max_time is None or self.max_time >= 0, "--max-time must be >= 0")
        check(self.patience is None or self.patience >= 1, "--patience must be at least 1")
        check(self.sort_batches >= 1, "--sort-batches must be at least 1")
        check(self.threads is None or self.threads >= 1, "--threads must be at least 1")
        check(self.compile in ("auto", "yes", "no"), "--compile: expected auto, yes or no")
        check(
            self.capture in ("auto", "on", "off", "compile"),
            "--capture: expected auto, on, off or compile",
        )
        check(
            not (self.profile and self.capture in ("on", "compile")),
            "--profile times the eager update's phases: not with --capture on or compile",
        )
        check(
            self.direction in DIRECTIONS,
            f"--direction {self.direction!r}: expected {' or '.join(DIRECTIONS)}",
        )

    def wants_compile(self, train_pairs: int) -> bool:
        """``auto`` compiles for runs of at least COMPILE_MIN_PAIRS training pairs: compiling
        the steps and readout with their backward takes some 15-20 s once, and makes an update
        up to 1.46x faster (the eager gate arithmetic and softmax are most of a small model's
        time; BENCHMARKS.md); results agree with the eager ones to float rounding."""
        if self.compile != "auto":
            return self.compile == "yes"
        return train_pairs >= COMPILE_MIN_PAIRS

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


_JSON_TYPES = {"int": "integer", "float": "number", "str": "string", "bool": "boolean"}


def _json_type(annotation: str) -> str | list[str]:
    """The JSON Schema type of a TrainConfig field's annotation (``int | None``...)."""
    kinds = [
        "null" if t == "None" else _JSON_TYPES[t] for t in annotation.replace(" ", "").split("|")
    ]
    return kinds[0] if len(kinds) == 1 else kinds


# What config.json's "train" part may hold (a field it lacks takes its default; one it does
# not know, from another version, is left out), checked before TrainConfig is built from it.
TRAIN_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "train": {
            "type": "object",
            "properties": {f.name: {"type": _json_type(str(f.type))} for f in fields(TrainConfig)},
        }
    },
}


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
    signal: int = 0  # the signal that interrupted the run (SIGINT 2, SIGTERM 15), else 0


# --------------------------------------------------------------------------------- train
def resume_configs(
    out_dir: str | Path, model_flags: dict[str, Any], train_flags: dict[str, Any]
) -> tuple[ModelConfig, TrainConfig]:
    """The configs of the run saved in ``out_dir``, with the flags given now applied on top.

    Flags that fix the model or the data order must agree with the saved run.
    """
    from rescorer.model.checkpoint import read_model_config  # deferred: torch

    model_cfg, data = read_model_config(out_dir)
    problem = schema_problem(data, TRAIN_SCHEMA)
    if problem:
        raise RescorerError(f"{Path(out_dir) / CONFIG_FILE}: bad training config: {problem}")
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
    # the threads are this machine's: the saved run's count applies only when given again
    return model_cfg, replace(train_cfg, **{"threads": None, **train_flags})


def _sizes_from_vocab(flags: dict[str, Any], given: set[str]) -> None:
    """``--vocab DIR``: the shortlist sizes are DIR's (a size given as well must agree)."""
    from rescorer.vocab import load_vocabs

    src, tgt, _ = load_vocabs(str(flags["vocab"]))
    for side, vocab in (("src", src), ("tgt", tgt)):
        key = f"{side}_vocab_size"
        check(
            key not in given or flags[key] == vocab.size,
            f"--{side}-vocab-size {flags.get(key)} differs from --vocab {flags['vocab']}'s "
            f"{vocab.size}: give one or the other",
        )
        flags[key] = vocab.size


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
    if flags.get("vocab") is not None and resume_dir is None:
        _sizes_from_vocab(flags, given)
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
