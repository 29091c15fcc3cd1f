"""``score --workers N`` through shared-memory slots (rescorer/io/shared.py): the same bytes as
without workers, both where a chunk is in a slot and where it is too large for one, and no
segment left behind by a run that ends or fails."""

from __future__ import annotations

import errno
import gzip
import os
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import SLICE

from rescorer.errors import InputError
from rescorer.io.shared import SharedText, Slots
from rescorer.io.table import read_table
from rescorer.model.checkpoint import save_model_dir
from rescorer.model.encdec import EncoderDecoder, ModelConfig, init_weights_
from rescorer.score.config import ScoreConfig
from rescorer.score.pipeline import score_table
from rescorer.vocab import build_vocabs

SHM = Path("/dev/shm")
pytestmark = pytest.mark.skipif(not SHM.is_dir(), reason="no /dev/shm on this system")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.manual_seed(0)
    pairs = [(e.src, e.tgt) for e in read_table(str(SLICE))]
    src_vocab, tgt_vocab = build_vocabs(pairs, 300, 300)
    model = EncoderDecoder(ModelConfig(300, 300, hidden_size=16, embed_size=8, maxout_units=8))
    init_weights_(model)
    folder = tmp_path_factory.mktemp("model")
    save_model_dir(folder, model, src_vocab, tgt_vocab, {"made_by": "tests/io/test_shared.py"})
    return folder


@pytest.fixture
def made(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The segments the run's Slots make, and what each ``put`` gave."""
    seen: list[Any] = []
    make, put = Slots._make, Slots.put

    def spy_make(self: Slots) -> str | None:
        name = make(self)
        seen.append(name)
        return name

    def spy_put(self: Slots, data: bytes) -> SharedText | None:
        slot = put(self, data)
        seen.append(("put", slot is not None))
        return slot

    monkeypatch.setattr(Slots, "_make", spy_make)
    monkeypatch.setattr(Slots, "put", spy_put)
    return seen


def test_score_with_workers_is_byte_identical_and_leaves_no_segment(
    tmp_path: Path, model_dir: Path, made: list[Any]
) -> None:
    """A table with one source phrase over two chunks' worth of lines (too large for a slot:
    it crosses as bytes) among ordinary chunks (in slots), plain and gzip output: the same
    bytes at 0 and 2 workers, and every segment unlinked after the run."""
    lines = gzip.decompress(SLICE.read_bytes()).splitlines(keepends=True)
    rest = lines[0].split(b" ||| ", 2)[2]
    group = [b"zz-one-source ||| t%d ||| " % i + rest for i in range(400)]  # ~2 chunks
    table = tmp_path / "table.txt"
    table.write_bytes(b"".join([*lines[:700], *group, *lines[700:]]))
    for suffix in (".txt", ".gz"):
        outs = []
        for workers in (0, 2):
            out = tmp_path / f"w{workers}{suffix}"
            config = ScoreConfig(device="cpu", precision="fp32", chunk_bytes=8192, workers=workers)
            score_table(str(table), str(model_dir), str(out), config)
            outs.append(out.read_bytes())
        assert outs[0] == outs[1]
    puts = [p[1] for p in made if isinstance(p, tuple)]
    names = [n for n in made if isinstance(n, str)]
    assert True in puts and False in puts  # both paths taken
    assert names and not any((SHM / n.lstrip("/")).exists() for n in names)


def test_a_run_that_fails_leaves_no_segment(
    tmp_path: Path, model_dir: Path, made: list[Any]
) -> None:
    lines = gzip.decompress(SLICE.read_bytes()).splitlines(keepends=True)
    table = tmp_path / "bad.txt"
    table.write_bytes(b"".join([*lines[:1500], b"no fields here\n", *lines[1500:]]))
    config = ScoreConfig(device="cpu", precision="fp32", chunk_bytes=8192, workers=2)
    with pytest.raises(InputError, match=r"bad\.txt:1501"):
        score_table(str(table), str(model_dir), str(tmp_path / "o.gz"), config)
    names = [n for n in made if isinstance(n, str)]
    assert names and not any((SHM / n.lstrip("/")).exists() for n in names)


def test_no_room_in_dev_shm_says_so_once_and_changes_no_byte(
    tmp_path: Path, model_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """A container's /dev/shm is often 64 MiB: the segments it refuses leave their chunks to
    the pipes, with one note saying why the run is slower; the bytes stay the same."""
    config = ScoreConfig(device="cpu", precision="fp32", chunk_bytes=8192, workers=2)
    score_table(str(SLICE), str(model_dir), str(tmp_path / "a.gz"), config)
    capsys.readouterr()
    made = 0
    fallocate = os.posix_fallocate

    def room_for_two(fd: int, offset: int, length: int) -> None:
        nonlocal made
        if made == 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        made += 1
        fallocate(fd, offset, length)

    monkeypatch.setattr(os, "posix_fallocate", room_for_two)
    score_table(str(SLICE), str(model_dir), str(tmp_path / "b.gz"), config)
    notes = [ln for ln in capsys.readouterr().err.splitlines() if "shared memory" in ln]
    assert len(notes) == 1 and "2 slots made" in notes[0], notes
    assert (tmp_path / "a.gz").read_bytes() == (tmp_path / "b.gz").read_bytes()


def test_a_pool_the_system_refuses_means_no_workers_one_note_and_the_same_bytes(
    tmp_path: Path, model_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """The pool's semaphores live in /dev/shm too: where it refuses them (read-only, full),
    the run goes on without workers and says so once (tests/score/test_worker_faults.py
    meets a real such /dev/shm where the test may mount one)."""
    from rescorer.job import pool

    config = ScoreConfig(device="cpu", precision="fp32", chunk_bytes=8192, workers=2)
    score_table(str(SLICE), str(model_dir), str(tmp_path / "a.gz"), config)
    capsys.readouterr()

    def refused(*args: object) -> None:
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(pool, "Workers", refused)
    score_table(str(SLICE), str(model_dir), str(tmp_path / "b.gz"), config)
    notes = [ln for ln in capsys.readouterr().err.splitlines() if "note" in ln]
    assert len(notes) == 1 and "Read-only file system" in notes[0], notes
    assert "--workers 0" in notes[0] and "/dev/shm" in notes[0]
    assert (tmp_path / "a.gz").read_bytes() == (tmp_path / "b.gz").read_bytes()
