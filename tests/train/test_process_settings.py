"""rescorer train's process-wide settings (train/setup.py process_settings): the memory an
update frees is kept for the next one, so its large blocks are not faulted in every update;
oneDNN's kernel caches hold training's shapes."""

from __future__ import annotations

import functools
import os
import subprocess
import sys

import pytest

SCRIPT = """
import resource, sys, torch
from rescorer.train.setup import process_settings
if sys.argv[1] == "on":
    process_settings()
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(10):  # as an update: three 48 MiB temporaries allocated, touched, freed
    before = faults()
    [torch.empty(12 << 20).fill_(1.0) for _ in range(3)]
    print(faults() - before)
"""


def page_faults(setting: str) -> list[int]:
    """The page faults of each of 10 rounds."""
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, setting], capture_output=True, text=True, check=True
    )
    return [int(n) for n in proc.stdout.split()]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
def test_freed_blocks_are_kept_for_the_next_update() -> None:
    """Once the heap has settled (a round or three), a round faults nothing in again; glibc's
    default hands the blocks back and faults at least one 48 MiB tensor (12,288 pages) again
    every round. 48 MiB: glibc raises its threshold for blocks it maps after one is freed, up to
    32 MiB, so by default 24 MiB blocks also came to be kept after a few rounds (in one run in
    three)."""
    kept, handed_back = page_faults("on"), page_faults("off")
    assert max(kept[-5:]) < 500 and min(handed_back[-5:]) >= 12_288, (kept, handed_back)


def test_the_kernel_caches_hold_training_s_shapes() -> None:
    """oneDNN's per-shape caches: 1,024 entries in training (an update's 60 distinct shapes
    would cycle through scoring's 16); a capacity set in the environment is kept."""
    script = (
        "import os\nfrom rescorer.train.setup import process_settings\nprocess_settings()\n"
        "print(os.environ['ONEDNN_PRIMITIVE_CACHE_CAPACITY'], os.environ['LRU_CACHE_CAPACITY'])"
    )
    env = {k: v for k, v in os.environ.items() if not k.endswith("CACHE_CAPACITY")}
    run = functools.partial(subprocess.run, [sys.executable, "-c", script], check=True)
    assert run(env=env, capture_output=True, text=True).stdout.split() == ["1024", "1024"]
    env["LRU_CACHE_CAPACITY"] = "16"
    assert run(env=env, capture_output=True, text=True).stdout.split() == ["1024", "16"]
