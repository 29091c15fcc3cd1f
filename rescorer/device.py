"""Device and precision choice, shared by training and scoring.

Precisions: ``fp32`` (IEEE fp32 matrix products everywhere: TF32 is switched off on GPUs),
``tf32`` (fp32, but on a CUDA GPU that has TF32 tensor cores, Ampere or newer, the matrix
products round their operands to TF32's 10-bit mantissa and accumulate in fp32; elsewhere
fp32), ``bf16`` (autocast: matrix products in bf16, the state, log-softmax and sums in fp32),
and ``auto``, which picks one per device and purpose (:func:`choose_precision`): for training
on a CPU, the precision whose matrix products measured fastest on this machine at the model's
shapes (measured once, cached per machine and torch version: :func:`precision_cache_path`).

Threads: :func:`set_threads` applies a :class:`~rescorer.cpus.ThreadChoice` to torch.
"""

from __future__ import annotations

import contextlib
import os
import platform
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from rescorer.cpus import ThreadChoice, probe_threads
from rescorer.errors import RescorerError
from rescorer.io.precision_cache import (
    idle,
    measured_busy,
    precision_cache_path,
    read_cache,
    write_cache,
)

PRECISIONS = ("auto", "bf16", "tf32", "fp32")


def resolve_device(name: str) -> torch.device:
    """``auto`` -> the first CUDA device if there is one, else the CPU."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError as exc:
        raise RescorerError(f"--device {name!r}: expected auto, cpu, cuda or cuda:N") from exc
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise RescorerError(f"--device {name}: no CUDA device is available")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise RescorerError(
                f"--device {name}: only {torch.cuda.device_count()} CUDA device(s) present"
            )
    elif device.type != "cpu":
        raise RescorerError(f"--device {name!r}: expected auto, cpu, cuda or cuda:N")
    return device


def has_tf32(device: torch.device) -> bool:
    """True on a CUDA GPU with TF32 tensor cores (compute capability 8.0 or newer)."""
    return device.type == "cuda" and torch.cuda.get_device_capability(device) >= (8, 0)


def resolve_precision(
    name: str,
    device: torch.device,
    purpose: str = "train",
    shapes: Sequence[tuple[int, int, int]] | None = None,
) -> str:
    """The precision ``name`` resolves to on ``device`` for ``purpose`` (``"train"`` or
    ``"score"``); :func:`choose_precision` without the reason."""
    return choose_precision(name, device, purpose, shapes).precision


@dataclass(frozen=True)
class PrecisionChoice:
    """A resolved precision and, for ``auto``, why (``precision auto -> fp32: ...``)."""

    precision: str
    reason: str = ""


def choose_precision(
    name: str,
    device: torch.device,
    purpose: str = "train",
    shapes: Sequence[tuple[int, int, int]] | None = None,
) -> PrecisionChoice:
    """The precision ``name`` resolves to on ``device`` for ``purpose`` (``"train"`` or
    ``"score"``); ``tf32`` is ``fp32`` where the device has no TF32.

    ``auto`` for scoring: ``tf32`` on a GPU that has it, else ``fp32``. bf16 autocast moves a
    pair's log p by more than the 0.02 nats (99th percentile) a score column may move
    (scripts/bench_precision.py: 0.12 nats at the 99th percentile on 20,000 real pairs; the
    error comes from bf16's 8-bit mantissa, so it is the same on every device). TF32's 10-bit
    operands, emulated on the CPU with round to nearest as cuBLAS rounds, moved it by 0.004
    nats at the 99th percentile (3,000 pairs; docs/score.md, "Precision"). ``auto`` for
    training (the gradient's noise dwarfs bf16's): on a GPU ``bf16`` where it is supported; on
    a CPU the faster of bf16 and fp32 at the model's matrix ``shapes`` (default: the paper's
    model), measured (:func:`measured_training_precision`). A CPU listing AVX512-BF16 is no
    promise: on an Intel Xeon with AVX512-BF16 and no AMX, bf16 products ran at 166-170
    GFLOP/s against fp32's 334 (issue 37)."""
    if name not in PRECISIONS:
        raise RescorerError(f"--precision {name!r}: expected one of {', '.join(PRECISIONS)}")
    if name == "tf32":
        return PrecisionChoice("tf32" if has_tf32(device) else "fp32")
    if name != "auto":
        return PrecisionChoice(name)
    if purpose == "score":
        return PrecisionChoice("tf32" if has_tf32(device) else "fp32")
    if device.type == "cuda":
        return PrecisionChoice("bf16" if torch.cuda.is_bf16_supported() else "fp32")
    return measured_training_precision(shapes or training_shapes())


# ----------------------------------------------------------------- measured precision (CPU)
#: bf16 must beat fp32's matrix products by this factor for ``auto`` to train in it: autocast
#: also casts every weight and activation, which fp32 never does.
BF16_MARGIN = 1.1
MEASURE_SECONDS = 0.1  # timed per precision, after one warm-up pass (at least one timed pass)
TOKENS_PER_PHRASE = 4  # rows of the readout's products per pair (a phrase's words and EOS)


def training_shapes(
    hidden_size: int = 1000,
    embed_size: int = 100,
    maxout_rows: int = 1000,
    target_rows: int = 15001,
    batch_size: int = 64,
) -> tuple[tuple[int, int, int], ...]:
    """The (M, K, N) matrix products of one training step (docs/model.md): the recurrence
    [U_r; U_u; U] h (B x H x 3H), the input projection (E x 3H), the deep output O_h s
    (H x maxout units x pool) and the factorised softmax (E x shortlist + EOS), the last three
    on a batch's positions (B x TOKENS_PER_PHRASE rows)."""
    rows = batch_size * TOKENS_PER_PHRASE
    return (
        (batch_size, hidden_size, 3 * hidden_size),
        (rows, embed_size, 3 * hidden_size),
        (rows, hidden_size, maxout_rows),
        (rows, embed_size, target_rows),
    )


def gemm_gflops(
    shapes: Sequence[tuple[int, int, int]], dtype: torch.dtype, seconds: float = MEASURE_SECONDS
) -> float:
    """GFLOP/s of the matrix products ``shapes`` in ``dtype`` on the CPU, one pass each, after
    one warm-up pass (which builds oneDNN's kernels), for at least ``seconds``."""
    generator = torch.Generator().manual_seed(0)
    pairs = [
        (
            torch.randn(m, k, generator=generator).to(dtype),
            torch.randn(k, n, generator=generator).to(dtype),
        )
        for m, k, n in shapes
    ]
    flops = sum(2 * m * k * n for m, k, n in shapes)
    with torch.no_grad():
        for a, b in pairs:
            a @ b
        passes, start = 0, time.perf_counter()
        while True:
            for a, b in pairs:
                a @ b
            passes += 1
            elapsed = time.perf_counter() - start
            if elapsed >= seconds:
                return passes * flops / elapsed / 1e9


def cpu_model() -> str:
    """This CPU's model name and its bf16 instructions, from /proc/cpuinfo (a cache key)."""
    name, flags = "", set()
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and not name:
                    name = value.strip()
                elif key.strip() == "flags":
                    flags = set(value.split())
                    break
    except OSError:
        pass
    found = sorted(flags & {"amx_bf16", "avx512_bf16", "avx512f", "avx2"})
    return f"{name or platform.machine()} [{' '.join(found)}]"


def measured_training_precision(shapes: Sequence[tuple[int, int, int]]) -> PrecisionChoice:
    """bf16 when its matrix products at ``shapes`` run more than BF16_MARGIN times as fast as
    fp32's on this CPU with torch's current thread count, else fp32; measured once and cached
    per machine (CPU model), torch version, thread count and shapes in
    :func:`precision_cache_path` (delete the file to measure again), with the load average of
    the moment. A measurement taken on a busy machine is taken again once the machine is idle;
    a cache that cannot be used is measured again, with a warning."""
    path = precision_cache_path()
    threads = torch.get_num_threads()
    shape_text = " ".join("x".join(map(str, shape)) for shape in shapes)
    key = f"{cpu_model()} | torch {torch.__version__} | {threads} threads | {shape_text}"
    cached = read_cache(path)
    if cached.problem:
        print(f"rescorer: warning: {cached.problem}; measuring again", file=sys.stderr, flush=True)
    load, cpus = _load(), os.cpu_count()
    entry = cached.entries.get(key)
    if entry is not None and not (measured_busy(entry) and idle(load, cpus)):
        where = f"measured earlier, cached in {path}{_at(entry)}; delete it to measure again"
    else:
        again = ", again: the figures cached were measured on a busy machine" if entry else ""
        entry = {
            "fp32": gemm_gflops(shapes, torch.float32),
            "bf16": gemm_gflops(shapes, torch.bfloat16),
            "date": time.strftime("%Y-%m-%d"),
            "load": load,
            "cpus": cpus,
        }
        problem = write_cache(path, {**cached.entries, key: entry})
        stored = f"cached in {path}" if problem is None else f"not cached: {problem}"
        where = f"measured now, {stored}{_at(entry)}{again}"
    fp32, bf16 = float(entry["fp32"]), float(entry["bf16"])
    precision = "bf16" if bf16 > BF16_MARGIN * fp32 else "fp32"
    return PrecisionChoice(
        precision,
        f"precision auto -> {precision}: bf16 {_figure(bf16)} vs fp32 {_figure(fp32)} GFLOP/s "
        f"at this model's matrix shapes on {threads} thread{'s' if threads != 1 else ''} "
        f"({where})",
    )


def _load() -> float | None:
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


def _at(entry: dict[str, Any]) -> str:
    """``, at load 5.1 on 2 CPUs`` where the entry recorded it."""
    load, cpus = entry.get("load"), entry.get("cpus")
    return f", at load {load:.1f} on {cpus} CPUs" if isinstance(load, (int, float)) else ""


def _figure(gflops: float) -> str:
    """334 or 1.48: whole numbers from 100 up, three digits below."""
    return f"{gflops:,.0f}" if gflops >= 100 else f"{gflops:.3g}"


def set_threads(choice: ThreadChoice) -> ThreadChoice:
    """Make torch compute with ``choice.threads`` threads (intra-op); returns ``choice``. A
    RescorerError first where the operating system would refuse them (:func:`probe_threads`)."""
    probe_threads(choice.threads)
    torch.set_num_threads(choice.threads)
    return choice


#: Entries kept in each of oneDNN's two per-shape kernel caches (see ``bound_kernel_caches``).
KERNEL_CACHE_CAPACITY = 16


def bound_kernel_caches(capacity: int = KERNEL_CACHE_CAPACITY) -> None:
    """Bound the CPU kernel caches that bf16 matrix products fill, one entry per shape.

    On the CPU, fp32 products go to MKL, which caches nothing; bf16 products go to oneDNN,
    which keeps a compiled kernel (with its buffers, about 1 MB at hidden size 256) for every
    distinct shape in two least-recently-used caches of 1,024 entries: oneDNN's primitive
    cache and ideep's ``LRU_CACHE_CAPACITY``. Scoring packs the non-padding positions of each
    batch, so nearly every batch has a new row count and resident memory grew with the table
    (bf16: 1,248 MB at 200k lines against 982 MB at 20k). Both caches read their capacity from
    the environment when the first bf16 product runs, so this must be called before that; a
    value the user has set is kept.
    """
    for name in ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "LRU_CACHE_CAPACITY"):
        os.environ.setdefault(name, str(capacity))


@contextlib.contextmanager
def autocast(device: torch.device, precision: str) -> Iterator[None]:
    """bf16 autocast for ``precision == "bf16"``; on a GPU, TF32 matrix products for ``tf32``
    only (off for fp32 and bf16: TF32 is torch's process-wide switch, set here each time)."""
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
        torch.backends.cudnn.allow_tf32 = precision == "tf32"
    if precision == "bf16":
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16):
            yield
    else:
        yield


class CompileGuard:
    """Shared by a group of compiled functions (a model's kernels): once compiling one of them
    has failed, every one of them runs eagerly, so results never mix compiled and eager code
    past the failure. A caller that must not mix them inside one unit of work (the scorer's
    chunk) redoes the unit when ``failed`` turned true during it."""

    def __init__(self, what: str = "torch.compile") -> None:
        self.what = what
        self.failed = False
        self.error = ""  # "ExceptionType: first line of its message"

    def fail(self, exc: BaseException) -> None:
        """Switch the group to eager code and warn, once, naming the error."""
        if self.failed:
            return
        self.failed = True
        self.error = _describe(exc)
        inner = getattr(exc, "inner_exception", None) or exc.__cause__  # dynamo wraps errors
        if isinstance(inner, BaseException) and inner is not exc:
            self.error += " " + _describe(inner)
        print(
            f"rescorer: warning: {self.what} failed ({self.error}); continuing without "
            "compiling (the same results as --compile no, slower)",
            file=sys.stderr,
            flush=True,
        )


def _describe(exc: BaseException) -> str:
    """``Type: first line of the message`` (at most 300 characters of it)."""
    first = (str(exc).strip().splitlines() or [""])[0][:300]
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


def soft_compile(
    fn: Callable[..., Any],
    guard: CompileGuard,
    fallback: Callable[..., Any] | None = None,
    **options: Any,
) -> Callable[..., Any]:
    """``torch.compile(fn, **options)`` that falls back to ``fn`` itself (or to ``fallback``,
    the same function computed another way) when compiling fails.

    Compiling happens at the first call of each new kind of input (torch.compile is lazy), and a
    missing Triton, a C++ compiler that fails or an inductor bug on a new card raise there (or
    already in ``torch.compile``). Then ``fn`` runs eagerly on the same inputs: if that works,
    the failure was the compiler's, ``guard`` switches the whole group to eager code and warns
    once; if ``fn`` fails too, the error is the inputs' and ``fn``'s own exception propagates.
    Backward passes are compiled with their forward pass, not lazily at the first
    ``backward()`` where no fall-back could catch a failure, so training falls back the same
    way (this sets torch's switch for it process-wide: rescorer compiles nothing else)."""
    _compile_backward_with_forward()
    eager = fn if fallback is None else fallback
    try:
        compiled = torch.compile(fn, **options)
    except Exception as exc:  # e.g. a Python or platform torch.compile does not support
        guard.fail(exc)
        return eager

    def call(*args: Any, **kwargs: Any) -> Any:
        if guard.failed:
            return eager(*args, **kwargs)
        try:
            return compiled(*args, **kwargs)
        except Exception as exc:
            result = eager(*args, **kwargs)  # raises its own error if the inputs are at fault
            guard.fail(exc)
            return result

    call.__wrapped__ = eager  # type: ignore[attr-defined]
    return call


def _compile_backward_with_forward() -> None:
    """AOTAutograd compiles a backward graph lazily at the first ``backward()`` unless this
    private switch of torch is on (without the switch, as in other torch versions, nothing
    changes but the place a backward compile error surfaces)."""
    from torch._functorch import config as functorch_config

    if hasattr(functorch_config, "force_non_lazy_backward_lowering"):
        functorch_config.force_non_lazy_backward_lowering = True
