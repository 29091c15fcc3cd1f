"""The model side of scoring: what ``Scorer`` does to the process beyond computing scores."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

# 40 bf16 products of distinct row counts, twice; oneDNN reports each kernel creation as a hit
# or a miss of its per-shape cache (ONEDNN_VERBOSE=all). With ``make_scorer`` a Scorer is built
# first, as ``rescorer score`` does.
PROBE = """
import sys, torch
if sys.argv[1] == "make_scorer":
    from rescorer.model.encdec import EncoderDecoder, ModelConfig
    from rescorer.score.scorer import Scorer
    Scorer(EncoderDecoder(ModelConfig(16, 16, 8, 8, 8, 2)), "bf16")
w = torch.randn(64, 64)
for _ in range(2):
    for rows in range(2, 42):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            torch.nn.functional.linear(torch.randn(rows, 64), w)
"""
CACHE_VARS = ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "LRU_CACHE_CAPACITY")


def cache_events(mode: str, **extra: str) -> tuple[int, int]:
    """(hits, misses) of oneDNN's kernel cache in a fresh process running PROBE."""
    env = {k: v for k, v in os.environ.items() if k not in CACHE_VARS}
    env.update(ONEDNN_VERBOSE="all", OMP_NUM_THREADS="1", **extra)
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, mode],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    out = proc.stdout + proc.stderr
    return out.count("create:cache_hit"), out.count("create:cache_miss")


def test_bf16_scorer_bounds_the_per_shape_kernel_caches() -> None:
    """Issue 11 defect 7: under bf16 every new batch shape added a kernel to caches of 1,024
    entries, so memory grew with the table. After a Scorer is built, 40 shapes cycled twice
    through a bounded cache find nothing cached; a value the user set is kept."""
    hits, misses = cache_events("plain")
    if hits + misses == 0:
        pytest.skip("bf16 products do not run through oneDNN on this CPU")
    assert hits >= 40, "control: the unbounded cache should keep all 40 shapes"
    hits, misses = cache_events("make_scorer")
    assert (hits, misses) == (0, 80)
    hits, _ = cache_events("make_scorer", ONEDNN_PRIMITIVE_CACHE_CAPACITY="1024")
    assert hits >= 40
