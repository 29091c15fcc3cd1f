"""Device and precision choice, shared by training and scoring.

``auto`` precision means bf16 autocast where the hardware multiplies bf16 natively: CUDA GPUs
with bf16 support, and CPUs with AMX or AVX512-BF16 (where a bf16 matrix product runs several
times faster than fp32). Everything else runs in fp32. Sums of log-probabilities stay fp32.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import torch

from rescorer.errors import RescorerError

PRECISIONS = ("auto", "bf16", "fp32")


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


def resolve_precision(name: str, device: torch.device, purpose: str = "train") -> str:
    """``auto`` for ``purpose`` ``"score"``: fp32. bf16 autocast moves a pair's log p by more
    than the 0.02 nats (99th percentile) a score column may move (scripts/bench_precision.py:
    0.12 nats at the 99th percentile on 20,000 real pairs), and the error comes from bf16's 8-bit
    mantissa, so it is the same on every device. ``auto`` for training: ``bf16`` where the
    device has fast bf16 matrix units (the gradient's noise dwarfs bf16's), else ``fp32``."""
    if name not in PRECISIONS:
        raise RescorerError(f"--precision {name!r}: expected one of {', '.join(PRECISIONS)}")
    if name != "auto":
        return name
    if purpose == "score":
        return "fp32"
    if device.type == "cuda":
        return "bf16" if torch.cuda.is_bf16_supported() else "fp32"
    return "bf16" if cpu_has_fast_bf16() else "fp32"


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
    """bf16 autocast for ``precision == "bf16"``, nothing for fp32 (TF32 is switched off)."""
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    if precision == "bf16":
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16):
            yield
    else:
        yield
