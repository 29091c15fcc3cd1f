"""Device and precision choice, shared by training and scoring.

Precisions: ``fp32`` (IEEE fp32 matrix products everywhere: TF32 is switched off on GPUs),
``tf32`` (fp32, but on a CUDA GPU that has TF32 tensor cores, Ampere or newer, the matrix
products round their operands to TF32's 10-bit mantissa and accumulate in fp32; elsewhere
fp32), ``bf16`` (autocast: matrix products in bf16, the state, log-softmax and sums in fp32),
and ``auto``, which picks one per device and purpose (:func:`resolve_precision`).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any

import torch

from rescorer.cpus import ThreadChoice
from rescorer.errors import RescorerError

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


def cpu_has_fast_bf16() -> bool:
    """True when /proc/cpuinfo lists AMX-BF16 or AVX512-BF16."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    return bool(flags & {"amx_bf16", "avx512_bf16"})
    except OSError:
        pass
    return False


def has_tf32(device: torch.device) -> bool:
    """True on a CUDA GPU with TF32 tensor cores (compute capability 8.0 or newer)."""
    return device.type == "cuda" and torch.cuda.get_device_capability(device) >= (8, 0)


def resolve_precision(name: str, device: torch.device, purpose: str = "train") -> str:
    """The precision ``name`` resolves to on ``device`` for ``purpose`` (``"train"`` or
    ``"score"``); ``tf32`` is ``fp32`` where the device has no TF32.

    ``auto`` for scoring: ``tf32`` on a GPU that has it, else ``fp32``. bf16 autocast moves a
    pair's log p by more than the 0.02 nats (99th percentile) a score column may move
    (scripts/bench_precision.py: 0.12 nats at the 99th percentile on 20,000 real pairs; the
    error comes from bf16's 8-bit mantissa, so it is the same on every device). TF32's 10-bit
    operands, emulated on the CPU with round to nearest as cuBLAS rounds, moved it by 0.004
    nats at the 99th percentile (3,000 pairs; README, "What score promises"). ``auto`` for
    training: ``bf16`` where the device has fast bf16 matrix units (the gradient's noise
    dwarfs bf16's), else ``fp32``."""
    if name not in PRECISIONS:
        raise RescorerError(f"--precision {name!r}: expected one of {', '.join(PRECISIONS)}")
    if name == "tf32":
        return "tf32" if has_tf32(device) else "fp32"
    if name != "auto":
        return name
    if purpose == "score":
        return "tf32" if has_tf32(device) else "fp32"
    if device.type == "cuda":
        return "bf16" if torch.cuda.is_bf16_supported() else "fp32"
    return "bf16" if cpu_has_fast_bf16() else "fp32"


def set_threads(choice: ThreadChoice) -> ThreadChoice:
    """Make torch compute with ``choice.threads`` threads (intra-op); returns ``choice``."""
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


def soft_compile(fn: Callable[..., Any], guard: CompileGuard, **options: Any) -> Callable[..., Any]:
    """``torch.compile(fn, **options)`` that falls back to ``fn`` itself when compiling fails.

    Compiling happens at the first call of each new kind of input (torch.compile is lazy), and a
    missing Triton, a C++ compiler that fails or an inductor bug on a new card raise there (or
    already in ``torch.compile``). Then ``fn`` runs eagerly on the same inputs: if that works,
    the failure was the compiler's, ``guard`` switches the whole group to eager code and warns
    once; if ``fn`` fails too, the error is the inputs' and ``fn``'s own exception propagates.
    Backward passes are compiled with their forward pass, not lazily at the first
    ``backward()`` where no fall-back could catch a failure, so training falls back the same
    way (this sets torch's switch for it process-wide: rescorer compiles nothing else)."""
    _compile_backward_with_forward()
    try:
        compiled = torch.compile(fn, **options)
    except Exception as exc:  # e.g. a Python or platform torch.compile does not support
        guard.fail(exc)
        return fn

    def call(*args: Any, **kwargs: Any) -> Any:
        if guard.failed:
            return fn(*args, **kwargs)
        try:
            return compiled(*args, **kwargs)
        except Exception as exc:
            result = fn(*args, **kwargs)  # raises fn's own error if the inputs are at fault
            guard.fail(exc)
            return result

    call.__wrapped__ = fn  # type: ignore[attr-defined]
    return call


def _compile_backward_with_forward() -> None:
    """AOTAutograd compiles a backward graph lazily at the first ``backward()`` unless this
    private switch of torch is on (without the switch, as in other torch versions, nothing
    changes but the place a backward compile error surfaces)."""
    from torch._functorch import config as functorch_config

    if hasattr(functorch_config, "force_non_lazy_backward_lowering"):
        functorch_config.force_non_lazy_backward_lowering = True
