"""Shared-memory slots (rescorer/io/shared.py): a chunk's bytes reach a worker process, and its
output comes back, as a handle of a few bytes; where no slot can be had, the bytes cross as
before; every segment is unlinked when the run ends."""

from __future__ import annotations

import errno
import hashlib
import multiprocessing
import os
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rescorer.io.shared import InSlot, SharedText, Slots, loaded, output_into, result_into

SHM = Path("/dev/shm")
pytestmark = pytest.mark.skipif(not SHM.is_dir(), reason="no /dev/shm on this system")


def _digest(text: SharedText) -> str:  # in a spawned worker
    return hashlib.sha256(text.tobytes()).hexdigest()


def _upper(text: SharedText) -> bytes:
    return text.tobytes().upper()


def test_a_chunk_crosses_to_a_worker_as_a_handle_and_its_output_comes_back_in_its_slot() -> None:
    data = os.urandom(1 << 20)
    with Slots(1 << 20, 4) as slots:
        slot = slots.put(data)
        assert slot is not None and len(slot) == len(data)
        assert len(pickle.dumps(slot)) < 200  # the name and the length, not the megabyte
        with multiprocessing.get_context("spawn").Pool(1) as pool:
            assert pool.apply(_digest, (slot,)) == hashlib.sha256(data).hexdigest()
            back = pool.apply(output_into, (slot, _upper, (slot,)))
        assert isinstance(back, SharedText) and back.name == slot.name
        assert back.tobytes() == data.upper()


def _parse_like(n: int) -> dict[str, Any]:  # in a spawned worker: a parse stage's result
    return {"ids": np.arange(n, dtype=np.int64), "small": np.arange(8), "text": b"abc"}


def test_a_parse_result_comes_back_with_its_arrays_in_the_slot() -> None:
    """The result's large arrays are written into the slot's result region and read there in
    place; the pickle that crosses the pipe holds the rest; what does not fit crosses in it."""
    with Slots(4096, 1, results=8 * 3000 + 64) as slots:
        slot = slots.put(b"chunk")
        assert slot is not None
        with multiprocessing.get_context("spawn").Pool(1) as pool:
            fits = pool.apply(result_into, (slot, _parse_like, (3000,)))
            assert isinstance(fits, InSlot) and len(fits.spans) == 1
            assert len(pickle.dumps(fits)) < 1000  # not the 24,000 bytes of ids
            result = loaded(fits)
            np.testing.assert_array_equal(result["ids"], np.arange(3000))
            assert result["text"] == b"abc" and list(result["small"]) == list(range(8))
            assert fits.spans[0][0] >= slot.room  # after the text's region
            del result
            big = pool.apply(result_into, (slot, _parse_like, (4000,)))  # 32,000 bytes
            assert not big.spans and len(big.data) > 32000  # all of it in the pickle
            np.testing.assert_array_equal(loaded(big)["ids"], np.arange(4000))
        assert slot.tobytes() == b"chunk"  # the text's region untouched


def test_what_does_not_fit_crosses_as_bytes() -> None:
    with Slots(4096, 2) as slots:
        assert slots.put(b"x" * 4097) is None  # larger than a slot
        a, b = slots.put(b"a"), slots.put(b"b")
        assert a is not None and b is not None and a.name != b.name
        assert slots.put(b"c") is None  # both slots hold a chunk in flight
        slots.free(a.name)
        c = slots.put(b"c")
        assert c is not None and c.name == a.name and c.tobytes() == b"c"  # reused
        big = output_into(c, bytes, (b"o" * 4097,))
        assert big == b"o" * 4097  # an output larger than its slot comes back as bytes
        small = output_into(c, bytes, (b"o" * 4096,))
        assert isinstance(small, SharedText) and small.tobytes() == b"o" * 4096


def test_close_unlinks_every_segment() -> None:
    slots = Slots(4096, 3)
    names = [s.name for s in (slots.put(b"a"), slots.put(b"b")) if s is not None]
    assert len(names) == 2 and all((SHM / name.lstrip("/")).exists() for name in names)
    slots.close()
    assert not any((SHM / name.lstrip("/")).exists() for name in names)


def test_a_full_dev_shm_is_a_fallback_not_a_crash(monkeypatch: pytest.MonkeyPatch) -> None:
    """tmpfs reserves no space on ftruncate: a write to a full one is SIGBUS. The space is
    reserved when the segment is made; a refusal there means bytes through the pipe."""
    made: list[str] = []

    def full(fd: int, offset: int, length: int) -> None:
        made.append(os.readlink(f"/proc/self/fd/{fd}"))
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "posix_fallocate", full)
    notes: list[str] = []
    with Slots(4096, 3, notes.append) as slots:
        assert slots.put(b"a") is None and slots.put(b"b") is None
    assert len(made) == 1 and not Path(made[0]).exists()  # tried once, unlinked
    assert len(notes) == 1 and "No space left on device" in notes[0] and "--shm-size" in notes[0]


KEEP = """
import resource, sys
import numpy as np
from rescorer.io.shared import keep_freed_memory
if sys.argv[1] == "keep":
    keep_freed_memory()
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
np.ones(5 << 20).sum()  # 40 MiB once before counting
before = faults()
for _ in range(10):  # a large chunk's temporaries, freed and made again
    np.ones(5 << 20).sum()
print(faults() - before)
"""


def test_a_worker_keeps_freed_memory_for_the_next_chunk() -> None:
    """A worker's temporaries come from memory it freed, not fresh pages faulted in one by
    one (glibc hands large blocks back to the system by default: each 40 MiB here is 10,240
    pages to fault in again)."""
    counts = {}
    for mode in ("default", "keep"):
        done = subprocess.run([sys.executable, "-c", KEEP, mode], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        counts[mode] = int(done.stdout)
    # (fewer than 10,240 a block where the kernel backs it with huge pages)
    assert counts["default"] >= 10 and counts["keep"] * 10 < counts["default"], counts


def test_a_process_that_reads_a_slot_leaves_it_to_its_owner() -> None:
    """Only the segment's owner registers it with the resource tracker. A worker attaching
    while a failing run unlinked its slots registered a name already gone (a leak warning at
    exit, seen with a reader closing the pipe); a process with a tracker of its own unlinked
    the segment when it ended."""
    with Slots(4096, 1) as slots:
        slot = slots.put(b"abc")
        assert slot is not None
        code = (
            "from rescorer.io.shared import SharedText; "
            f"print(SharedText({slot.name!r}, 3, 4096).tobytes())"
        )
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        assert done.returncode == 0 and done.stdout.strip() == "b'abc'", done.stderr
        assert "leaked" not in done.stderr and "resource_tracker" not in done.stderr, done.stderr
        assert (SHM / slot.name.lstrip("/")).exists()  # still there for its owner
        assert slot.tobytes() == b"abc"
