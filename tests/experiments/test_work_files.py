"""The work folder's line helpers read files as every rescorer reader does."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from rescorer.errors import InputError
from rescorer.experiments.layout import count_lines, read_lines


def test_count_lines_knows_gzip_by_its_content_not_its_name(tmp_path: Path) -> None:
    text = "".join(f"line {i}\n" for i in range(1000))
    plain, packed, misnamed = tmp_path / "a.txt", tmp_path / "a.gz", tmp_path / "a.table"
    plain.write_text(text)
    packed.write_bytes(gzip.compress(text.encode()))
    misnamed.write_bytes(gzip.compress(text.encode()))
    assert count_lines(plain) == count_lines(packed) == count_lines(misnamed) == 1000


def test_a_truncated_gzip_file_is_an_error_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "table.gz"
    packed = gzip.compress("".join(f"{i} ||| {i * i}\n" for i in range(10000)).encode())
    path.write_bytes(packed[: len(packed) // 2])
    with pytest.raises(InputError, match=r"table\.gz: corrupt or truncated gzip data"):
        count_lines(path)


def test_read_lines_names_the_line_with_bad_utf8(tmp_path: Path) -> None:
    path = tmp_path / "test.hyp"
    path.write_bytes(b"un\ndeux\ntr\xe9s\n")
    with pytest.raises(InputError, match=r"test\.hyp:3: invalid UTF-8"):
        read_lines(path)
    path.write_bytes(b"un\n\ndeux")
    assert read_lines(path) == ["un", "", "deux"]
