"""The precision cache, ``precision.json`` under :func:`cache_dir`: the matrix-product speeds
(GFLOP/s, fp32 and bf16) ``train --precision auto`` measured on this machine, one entry per CPU
model, torch version, thread count and matrix shapes (rescorer.device), each with the load
average and CPU count of the moment it was measured; and, where those favoured bf16, the
speeds of the model's updates (pairs/s, ``"unit": "pairs/s"``), one entry per CPU model,
torch version, thread count, model sizes and batch size (rescorer/train/precision.py). Both
kinds hold an ``fp32`` and a ``bf16`` figure, and the same rules keep or drop them.

Only a regular file of at most :data:`MAX_CACHE_BYTES` is read (a FIFO there hung train, a link
to /dev/zero never ended), and only entries whose speeds are finite and positive are kept (an
``Infinity`` was trusted). What cannot be used is said (:attr:`CacheRead.problem`) and measured
again; a cache path that is not a regular file is never replaced.
"""

from __future__ import annotations

import math
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rescorer.errors import RescorerError
from rescorer.io.jsonfiles import read_json, write_json

CACHE_FORMAT = "rescorer-precision-cache-1"
CACHE_FILE = "precision.json"
MAX_CACHE_BYTES = 1 << 20  # a few hundred entries at most ever fill a few KiB
#: A measurement taken while the load average was above this share of the CPUs was taken busy:
#: the products of its threads waited for other jobs (bf16 11.5 against fp32 2.6 GFLOP/s on a
#: starved 2-CPU machine, 311 against 76 idle, issue 59).
BUSY_SHARE = 0.5


def cache_dir() -> Path:
    """Where rescorer keeps what it measured: ``$RESCORER_CACHE_DIR``, else
    ``$XDG_CACHE_HOME/rescorer``, else ``~/.cache/rescorer``."""
    if os.environ.get("RESCORER_CACHE_DIR"):
        return Path(os.environ["RESCORER_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "rescorer"


def precision_cache_path() -> Path:
    """The file of measured matrix-product speeds."""
    return cache_dir() / CACHE_FILE


@dataclass
class CacheRead:
    """The usable entries of a cache, and why what was there could not be used ('' if all)."""

    entries: dict[str, dict[str, Any]] = field(default_factory=dict)
    problem: str = ""


def _positive(value: Any) -> bool:
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value > 0
    )


def usable_entry(value: Any) -> bool:
    """An entry with finite, positive fp32 and bf16 speeds (and, if given, a finite load)."""
    if not isinstance(value, dict) or not all(_positive(value.get(p)) for p in ("fp32", "bf16")):
        return False
    load = value.get("load")
    return load is None or (_positive(load) or load == 0)


def read_cache(path: Path) -> CacheRead:
    """The cache's usable entries; a missing file has none and no problem."""
    try:
        info = os.stat(path)  # never blocks, even on a FIFO
    except FileNotFoundError:
        return CacheRead()
    except OSError as exc:
        return CacheRead(problem=f"{path}: cannot read it: {exc.strerror}")
    if not stat.S_ISREG(info.st_mode):
        return CacheRead(problem=f"{path}: not a regular file (a FIFO, a device, a folder?)")
    if info.st_size > MAX_CACHE_BYTES:
        return CacheRead(problem=f"{path}: over {MAX_CACHE_BYTES >> 20} MiB, not a cache")
    try:
        data = read_json(path, what="the precision cache")
    except RescorerError as exc:
        return CacheRead(problem=str(exc))
    entries = data.get("entries") if isinstance(data, dict) else None
    if not isinstance(entries, dict) or data.get("format") != CACHE_FORMAT:
        return CacheRead(problem=f"{path}: not a {CACHE_FORMAT} file")
    kept = {key: value for key, value in entries.items() if usable_entry(value)}
    dropped = len(entries) - len(kept)
    problem = f"{path}: {dropped} entries without finite positive speeds" if dropped else ""
    return CacheRead(kept, problem)


def write_cache(path: Path, entries: dict[str, Any]) -> str | None:
    """Write the cache atomically; the reason it could not be written, or None. A path that is
    there and not a regular file (a FIFO, a link to a device) is left as it is."""
    try:
        if os.path.lexists(path) and not stat.S_ISREG(os.stat(path).st_mode):
            return f"{path} is not a regular file"
    except OSError as exc:
        return f"{path}: {exc.strerror}"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json(path, {"format": CACHE_FORMAT, "entries": entries})
    except (OSError, RescorerError) as exc:
        return str(exc)
    return None


def measured_busy(entry: dict[str, Any]) -> bool:
    """Whether ``entry`` was measured on a busy machine (or at a load not recorded: caches of
    earlier versions), where its figures say little of this machine's speed."""
    load, cpus = entry.get("load"), entry.get("cpus")
    if not isinstance(load, (int, float)) or not isinstance(cpus, int) or cpus < 1:
        return True
    return load > BUSY_SHARE * cpus


def idle(load: float | None, cpus: int | None) -> bool:
    """Whether a machine of ``cpus`` CPUs at ``load`` is idle enough to measure on."""
    return load is not None and bool(cpus) and load <= BUSY_SHARE * (cpus or 1)
