"""rescorer/io/files.py: openers and what they tell about a file."""

from __future__ import annotations

import gzip
from pathlib import Path

from conftest import SLICE

from rescorer.io.files import gzip_text_size


def test_gzip_text_size_reads_the_trailer_only_when_it_can_be_trusted(tmp_path: Path) -> None:
    """What score's progress line divides by for a gzip input (issue 14, item 1)."""
    assert gzip_text_size(str(SLICE)) == len(gzip.decompress(SLICE.read_bytes()))
    plain = tmp_path / "pt.txt"
    plain.write_bytes(gzip.decompress(SLICE.read_bytes()))
    assert gzip_text_size(str(plain)) is None
    assert gzip_text_size(str(SLICE), limit=1000) is None  # too big to trust ISIZE mod 2^32
