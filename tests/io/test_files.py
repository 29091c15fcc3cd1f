"""The openers and writers (rescorer/io/inputs.py, outputs.py, jsonfiles.py): what they tell
about a file."""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import pytest
from conftest import SLICE

from rescorer.errors import InputError, RescorerError
from rescorer.io.inputs import MAX_READ_LINE, gzip_text_size, iter_raw_lines, open_binary
from rescorer.io.jsonfiles import read_json
from rescorer.io.outputs import WriteError, open_writable


def test_gzip_text_size_reads_the_trailer_only_when_it_can_be_trusted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What score's progress line divides by for a gzip input (issue 14, item 1)."""
    import rescorer.io.inputs as inputs

    assert gzip_text_size(str(SLICE)) == len(gzip.decompress(SLICE.read_bytes()))
    plain = tmp_path / "pt.txt"
    plain.write_bytes(gzip.decompress(SLICE.read_bytes()))
    assert gzip_text_size(str(plain)) is None
    monkeypatch.setattr(inputs, "MEASURED_GZIP", 0)  # a big file: the trailer, if trusted
    assert gzip_text_size(str(SLICE)) == len(gzip.decompress(SLICE.read_bytes()))
    assert gzip_text_size(str(SLICE), limit=1000) is None  # too big to trust ISIZE mod 2^32


def test_gzip_text_size_of_several_members_is_the_whole_text(tmp_path: Path) -> None:
    """Issue 39, item 9: a progress line read '100.0% of the input' partway through a
    20,000-line file: a gzip of several members (score's outputs have one per chunk), whose
    trailer gives the last member's size only."""
    text = gzip.decompress(SLICE.read_bytes())
    members = tmp_path / "members.gz"
    members.write_bytes(gzip.compress(text) + gzip.compress(text * 3))
    assert gzip_text_size(str(members)) == 4 * len(text)
    damaged = tmp_path / "damaged.gz"
    damaged.write_bytes(members.read_bytes()[:-100])
    assert gzip_text_size(str(damaged)) is None


def test_a_truncated_gzip_is_one_error_whichever_read_meets_it(tmp_path: Path) -> None:
    """Issue 28, item 2: read() past the first chunk raised a bare EOFError (click: Aborted!)."""
    data = gzip.decompress(SLICE.read_bytes()) * 8
    packed = gzip.compress(data)
    cut = tmp_path / "cut.gz"
    cut.write_bytes(packed[: len(packed) * 3 // 4])
    for read in (lambda s: s.read(), lambda s: list(iter(lambda: s.read(1 << 16), b""))):
        with (
            pytest.raises(InputError, match=r"cut\.gz: corrupt or truncated gzip data"),
            open_binary(str(cut)) as stream,
        ):
            read(stream)


def test_an_endless_line_is_refused_with_bounded_memory(tmp_path: Path) -> None:
    """Issue 28, item 3: a file of zeros (no newline) was read whole into one line."""
    zeros = tmp_path / "zeros"
    with open(zeros, "wb") as f:
        f.truncate(MAX_READ_LINE + (1 << 20))  # sparse: no disk used
    with open_binary(str(zeros)) as stream:
        lines = iter_raw_lines(stream, str(zeros))
        with pytest.raises(InputError, match=r"zeros:1: a line longer than 16 MiB"):
            next(lines)


def test_a_json_file_is_read_up_to_its_limit(tmp_path: Path) -> None:
    """Issue 28, item 3: a vocabulary file pointing at /dev/zero filled the memory. A device
    (or a FIFO, which hung: issue 38, item 13) is not opened as JSON at all; a regular file
    is read up to 64 MiB."""
    link = tmp_path / "vocab.src.json"
    link.symlink_to("/dev/zero")
    with pytest.raises(RescorerError, match=r"vocab\.src\.json: not a regular file .* 64 MiB"):
        read_json(link, what="a vocabulary")
    huge = tmp_path / "vocab.tgt.json"
    with open(huge, "wb") as f:
        f.truncate((64 << 20) + 1)  # sparse
    with pytest.raises(RescorerError, match=r"vocab\.tgt\.json: over 64 MiB, the largest JSON"):
        read_json(huge, what="a vocabulary")


def test_a_failed_write_names_the_file_and_what_is_on_disk(tmp_path: Path) -> None:
    """Issue 28, item 1: a write on a full disk was a bare OSError (here /dev/full, whose every
    write fails with ENOSPC)."""
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    with (
        pytest.raises(WriteError, match=r"^OUT: cannot write: no space left on device") as info,
        open_writable("/dev/full", shown="OUT") as f,
    ):
        f.write(b"x" * (2 << 20))
    assert info.value.disk_full
