"""``rescorer score``'s options and run counts, and the policies that resolve its ``auto``
settings (worker processes, compilation). No torch here."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from rescorer.constants import DEFAULT_GZIP_LEVEL, GZIP_MAGIC
from rescorer.errors import RescorerError
from rescorer.io.outputs import GZIP_MEMBER_LEVELS
from rescorer.io.progress import DEFAULT_EVERY
from rescorer.job.stats import MAX_AHEAD_BYTES, NOT_IN_RUN_KEY, JobStats
from rescorer.score.profile import Phases, WallClock

__all__ = [
    "MAX_AHEAD_BYTES",
    "NOT_IN_RUN_KEY",
    "ScoreConfig",
    "ScoreStats",
    "batch_tokens_for",
    "choose_workers",
    "chunk_bytes_for",
    "input_chunks",
    "resolve_workers",
    "want_compile",
]

CAPTURE_CHOICES = ("auto", "on", "off")  # score --capture (rescorer/score/graphs.py's)
DEFAULT_CHUNK_BYTES = 1 << 20  # on a CPU
GPU_CHUNK_BYTES = 16 << 20  # on a GPU: enough work per chunk to hide the launches (see below)
DEFAULT_CHECKPOINT_EVERY = 10.0  # seconds between progress records (each with its fsyncs)


@dataclass(frozen=True)
class ScoreConfig:
    """Options of ``rescorer score`` (flag names match field names)."""

    column: str = "prob"  # "prob" (exp(log p), what Moses expects) or "logp"
    word_penalty: bool = False  # also append exp(#target words outside the shortlist)
    device: str = "auto"
    precision: str = "auto"
    threads: int | None = None  # compute threads; None: rescorer/cpus.py's rule (said at start)
    batch_tokens: int | None = None  # padded tokens per batch; None: batch_tokens_for
    chunk_bytes: int | None = None  # input bytes per chunk; None: by device (chunk_bytes_for)
    workers: int | str = 0  # parse/format worker processes; 0 = in the main process; "auto"
    compile: str = "auto"  # torch.compile the steps and readout: "yes", "no", "auto" (big tables)
    capture: str = "auto"  # the steps at bucketed shapes as CUDA graphs: "auto" (off, until the
    # GPU tests pass on a GPU), "on", "off" (rescorer/score/graphs.py; on a CPU "on" runs the
    # bucketed shapes eagerly)
    shard: tuple[int, int] | None = None  # (K, N): the K-th (1-based) of N shards
    resume: bool = False
    compresslevel: int = DEFAULT_GZIP_LEVEL
    skip_bad_lines: str | None = None
    quiet: bool = False
    progress_every: float = DEFAULT_EVERY  # seconds between progress lines off a terminal; 0: off
    profile: bool = False  # print where the time went (rescorer/score/profile.py)
    force: bool = False  # --resume may replace a complete OUT made with another model; and
    # without --resume, as restart: start over, discarding an interrupted run's OUT.partial
    restart: bool = False  # start over, discarding an interrupted run's OUT.partial
    ignore_coverage: bool = False  # score a table far outside the model's shortlists anyway
    checkpoint_every: float = DEFAULT_CHECKPOINT_EVERY  # seconds between progress records; 0:
    # after every chunk (a killed run redoes at most about this much with --resume)
    overlap: bool = True  # the device scores chunk k while the host prepares k+1 and formats
    # k-1; False (the benchmarks' comparison) waits for each chunk's scores before the next

    def __post_init__(self) -> None:
        """Out-of-range values are errors here too, not only on the command line."""
        if isinstance(self.workers, str) and self.workers != "auto":
            raise RescorerError(f"--workers {self.workers!r}: expected a count or auto")
        if self.capture not in CAPTURE_CHOICES:
            raise RescorerError(f"--capture {self.capture!r}: expected auto, on or off")
        for flag, value, low, high in (
            ("--chunk-bytes", self.chunk_bytes, 1, None),
            ("--workers", self.workers if isinstance(self.workers, int) else None, 0, None),
            ("--batch-tokens", self.batch_tokens, 1, None),
            ("--threads", self.threads, 1, None),
            ("--checkpoint-every", self.checkpoint_every, 0, None),
            ("--compress-level", self.compresslevel, *GZIP_MEMBER_LEVELS),
        ):
            if value is not None and (value < low or (high is not None and value > high)):
                span = f"{low} to {high}" if high is not None else f"at least {low}"
                raise RescorerError(f"{flag} {value}: expected {span}")


@dataclass
class ScoreStats(JobStats):
    pairs_scored: int = 0
    pairs_inside: int = 0  # pairs with every word inside the model's shortlists
    device: str = ""
    precision: str = ""
    phases: Phases | None = None  # with --profile: where the time went
    clock: WallClock | None = None  # with --profile: the whole run's wall time, stretch by stretch


COMPILE_MIN_BYTES = 4 << 20


AUTO_WORKERS_MAX = 4


def resolve_workers(workers: int | str, device: Any, input_chunks: int | None = None) -> int:
    """The worker count (:func:`choose_workers` also gives why). ``auto``: on a GPU up to
    ``AUTO_WORKERS_MAX`` parse/format processes, fewer where this process may run on fewer
    CPUs (one stays to feed the device) or the input has fewer chunks (``input_chunks``, when
    known: :func:`input_chunks`; a worker takes a whole chunk, and one with none only costs its
    start). Four is the count measured best on two H100 hosts (BENCHMARKS.md): 600,000 lines,
    4 workers 1.50x as fast as none, 15 workers 0.87x; a million lines, 4 workers 1.66x, 8
    workers 1.35x, 15 workers 1.11x. More may pay on a table of hundreds of chunks (not
    measured): ``--workers N`` takes any count up to 4 per CPU this process may run on (its
    range, rescorer/cli/ranges.py). On the CPU none, as the model's threads need
    the cores (and ScoreConfig's count as it is otherwise)."""
    return choose_workers(workers, device, input_chunks)[0]


def choose_workers(
    workers: int | str, device: Any, input_chunks: int | None = None
) -> tuple[int, str]:
    """:func:`resolve_workers`'s count, and the words the run's first line says about it."""
    from rescorer.cpus import available_cpus

    if workers != "auto":
        count = int(workers)
        return count, f"{count} worker{'s' if count != 1 else ''} (--workers)"
    if getattr(device, "type", "cpu") != "cuda":
        return 0, "no workers (auto: on the CPU the model's threads take the cores)"
    cpus = available_cpus()[0]
    count = max(1, min(AUTO_WORKERS_MAX, cpus - 1))
    why = f"the best measured on H100 hosts, at most one per CPU but one of {cpus}"
    if input_chunks is not None and input_chunks < count:
        count = max(1, input_chunks)
        why = f"one per chunk of the input ({input_chunks})"
    return count, f"{count} worker{'s' if count != 1 else ''} (auto: {why})"


def input_chunks(table: str, chunk_bytes: int) -> int | None:
    """How many chunks of ``chunk_bytes`` the input ``table`` holds: its size, decompressed for
    gzip where :func:`~rescorer.io.inputs.gzip_text_size` can tell; None where nothing can
    (a pipe, a large gzip file whose trailer cannot be trusted)."""
    from rescorer.io.inputs import gzip_text_size

    if table == "-" or not os.path.isfile(table):
        return None
    with open(table, "rb") as f:
        gzipped = f.read(2) == GZIP_MAGIC
    size = gzip_text_size(table) if gzipped else os.path.getsize(table)
    return None if size is None else max(1, -(-size // chunk_bytes))


def chunk_bytes_for(chunk_bytes: int | None, device: Any) -> int:
    """``None``: 1 MiB of input per chunk on a CPU, 16 MiB on a GPU. A GPU runs a chunk as a few
    dozen batched steps (one per level of its prefix trees) of a few kernels each; each launch
    costs microseconds whatever the rows, and a 1 MiB chunk (about 9,000 lines of the en-fr
    table) gives the device too little work per launch to hide them. The levels grow little
    with the chunk, their rows with it. Memory stays bounded: host memory by the chunks in
    flight (``MAX_AHEAD_BYTES``), device memory by ``--batch-tokens`` rows per readout."""
    if chunk_bytes is not None:
        return chunk_bytes
    return GPU_CHUNK_BYTES if getattr(device, "type", "cpu") == "cuda" else DEFAULT_CHUNK_BYTES


CPU_BATCH_TOKENS = 4096
GPU_BATCH_TOKENS = 65536  # the least on a GPU (the default before issue 57)
GPU_BATCH_TOKENS_MAX = 4 * GPU_BATCH_TOKENS
LOGITS_SHARE = 8  # one readout block's fp32 logits take at most 1/8 of the device's memory


def batch_tokens_for(
    batch_tokens: int | None, device: Any, device_bytes: int | None, vocab_rows: int
) -> int:
    """``--batch-tokens`` (None: by device). On a CPU 4096. On a GPU as many as the device's
    memory holds rather than a fixed count (issue 57: more pairs per launch): the readout
    rows whose fp32 logits (rows x ``vocab_rows`` x 4 bytes) take an eighth of
    ``device_bytes``, between 65,536 (the old default, whatever the device) and 262,144, a
    multiple of 4096 (few distinct shapes). An H100's 80 GB and 15,000 words: 163,840."""
    if batch_tokens is not None:
        return batch_tokens
    if getattr(device, "type", "cpu") != "cuda" or not device_bytes:
        return CPU_BATCH_TOKENS if getattr(device, "type", "cpu") != "cuda" else GPU_BATCH_TOKENS
    fits = device_bytes // LOGITS_SHARE // (max(vocab_rows, 1) * 4)
    fits -= fits % CPU_BATCH_TOKENS
    return int(min(GPU_BATCH_TOKENS_MAX, max(GPU_BATCH_TOKENS, fits)))


def want_compile(choice: str, table: str) -> bool:
    """``auto`` compiles for input files of at least 4 MiB of text, decompressed (issue 64: a
    4.1 MB gzip file of 17.8 MB was not compiled): compiling costs tens of seconds once and
    pays off after some ten thousand pairs."""
    from rescorer.io.inputs import gzip_text_size

    if choice not in ("auto", "yes", "no"):
        raise RescorerError(f"--compile {choice!r}: expected auto, yes or no")
    if choice != "auto":
        return choice == "yes"
    if table == "-" or not os.path.isfile(table):
        return False
    size = os.path.getsize(table)  # a gzip file this large holds at least as much text
    return size >= COMPILE_MIN_BYTES or (gzip_text_size(table) or 0) >= COMPILE_MIN_BYTES
