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
for _ in range(2):  # as an update: large temporaries allocated, touched, freed
    [torch.empty(6 << 20).fill_(1.0) for _ in range(3)]
before = faults()
for _ in range(5):
    [torch.empty(6 << 20).fill_(1.0) for _ in range(3)]
print(faults() - before)
"""


def page_faults(setting: str) -> int:
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, setting], capture_output=True, text=True, check=True
    )
    return int(proc.stdout.split()[-1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
def test_freed_blocks_are_kept_for_the_next_update() -> None:
    # 5 rounds of three 24 MiB tensors: 30,000 pages if each is faulted in again
    assert page_faults("on") < 1_000 < 10_000 < page_faults("off")


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
