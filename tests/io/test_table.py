"""Phrase-table I/O: lossless round trips, gzip detection, streams, validation, atomic output."""

from __future__ import annotations

import gzip
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import SLICE

from rescorer.errors import InputError
from rescorer.io.outputs import open_output
from rescorer.io.table import (
    TableReader,
    copy_table,
    format_logp,
    format_prob,
    format_score,
    parse_line,
    parse_number,
    parse_raw_line,
    read_table,
    source_words,
    sources_among,
    split_tokens,
)


def slice_bytes() -> bytes:
    return gzip.decompress(SLICE.read_bytes())


def test_round_trip_gzip_is_byte_identical(tmp_path: Path) -> None:
    out = tmp_path / "out.gz"
    stats = copy_table(str(SLICE), str(out))
    assert stats.lines == 2090 and stats.bad == 0 and stats.num_scores == 4
    assert gzip.decompress(out.read_bytes()) == slice_bytes()


def test_round_trip_plain_and_odd_fields(tmp_path: Path) -> None:
    lines = [
        "a b ||| x ||| 0.5 1e-05 ||| 0-0 ||| 1 2 1 ||| |||",  # canonical, empty trailing fields
        "a c ||| y ||| 1 2",  # only three fields
        "a d ||| z ||| 0.25\t0.5 ||| 0-0",  # tab between scores, kept as it was
        "b ||| w ||| 0.1 0.2 ||| 0-0 ||| 1 1 1 ||| sp 1 ||| {{Key v}} ||| more ||| fields",
        "c ||| &#124; &amp; &#91; ||| 3 4 ||| ||| ||| |||",
    ]
    text = "\n".join(lines) + "\n"
    src = tmp_path / "t.txt"
    src.write_text(text, encoding="utf-8")
    out = tmp_path / "o.txt"
    copy_table(str(src), str(out))
    assert out.read_bytes() == text.encode()


def test_gzip_detected_by_content_not_name(tmp_path: Path) -> None:
    disguised = tmp_path / "table.txt"  # gzip data under a plain name
    disguised.write_bytes(SLICE.read_bytes())
    plain = tmp_path / "table.gz"  # plain text under a .gz name
    plain.write_bytes(slice_bytes())
    assert sum(1 for _ in read_table(str(disguised))) == 2090
    assert sum(1 for _ in read_table(str(plain))) == 2090


def test_gzip_output_is_deterministic(tmp_path: Path) -> None:
    a, b = tmp_path / "a.gz", tmp_path / "b.gz"
    copy_table(str(SLICE), str(a))
    copy_table(str(SLICE), str(b))
    raw = a.read_bytes()
    assert raw == b.read_bytes()
    assert raw[4:8] == b"\0\0\0\0"  # no timestamp
    assert raw[3] & 0x08 == 0  # no embedded file name (FNAME flag unset)


@pytest.mark.slow
def test_stdin_to_stdout() -> None:
    data = SLICE.read_bytes()  # gzip on stdin, plain on stdout
    code = "from rescorer.io.table import copy_table; copy_table('-', '-')"
    proc = subprocess.run([sys.executable, "-c", code], input=data, capture_output=True, check=True)
    assert proc.stdout == slice_bytes()


def test_entry_fields_and_appended_columns() -> None:
    entry = parse_line("le chat ||| the cat ||| 0.5 0.25 ||| 0-0 1-1 ||| 2 2 1 ||| |||", 7)
    assert not isinstance(entry, str)
    assert entry.lineno == 7
    assert entry.src_tokens == ["le", "chat"] and entry.tgt_tokens == ["the", "cat"]
    assert entry.scores == (0.5, 0.25)
    assert entry.rest == " ||| 0-0 1-1 ||| 2 2 1 ||| |||"
    assert entry.line_with_columns(["0.1", "2.71828"]) == (
        "le chat ||| the cat ||| 0.5 0.25 0.1 2.71828 ||| 0-0 1-1 ||| 2 2 1 ||| |||"
    )


@pytest.mark.parametrize(
    ("text", "value"),
    [("0.5", 0.5), ("-1e-05", -1e-05), (".5", 0.5), ("3", 3.0), ("+2.", 2.0), ("1E+2", 100.0)],
)
def test_parse_number_reads_ascii_decimals(text: str, value: float) -> None:
    assert parse_number(text) == value


@pytest.mark.parametrize("text", ["1_000", "\u0661\u0662", "\uff11\uff12", "x", "", "0x1p3"])
def test_parse_number_refuses_what_moses_does_not_read(text: str) -> None:
    """float() takes the first three (issue 26); Moses reads ASCII decimal numbers only."""
    with pytest.raises(ValueError):
        parse_number(text)


def test_tokens_split_on_space_and_tab_only() -> None:
    assert split_tokens("a\u00a0b  c\td") == ["a\u00a0b", "c", "d"]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("a ||| b", "found 2 field(s)"),
        ("a ||| b ||| 0.5 x", "score 2 is 'x', expected a number"),
        ("a ||| b ||| 0.5 nan", "expected a finite number"),
        ("a ||| b ||| 0.5 inf", "expected a finite number"),
        ("a ||| b ||| 1_0 0.5", "expected a number"),
        ("a ||| b ||| 0.5 \u0661", "expected a number"),
        ("a ||| b ||| 0.5", "found 1 scores, expected 2"),
        ("a ||| b ||| 0.5 0.5 0.5", "found 3 scores, expected 2"),
        (" ||| b ||| 0.5 0.5", "empty source phrase"),
        ("a |||  ||| 0.5 0.5", "empty target phrase"),
        ("a ||| b ||| ", "score field is empty"),
        ("a\0b ||| c ||| 0.5 0.5", "found a NUL byte at character 2 of the line"),
    ],
)
def test_malformed_line_names_file_and_line_and_leaves_no_output(
    tmp_path: Path, line: str, message: str
) -> None:
    table = tmp_path / "bad.txt"
    table.write_text(f"x ||| y ||| 0.1 0.2 ||| 0-0\n{line}\nz ||| w ||| 0.3 0.4\n")
    out = tmp_path / "out.gz"
    with pytest.raises(InputError) as err:
        copy_table(str(table), str(out))
    assert err.value.lineno == 2
    assert str(err.value).startswith(f"{table}:2: ")
    assert message in str(err.value)
    assert os.listdir(tmp_path) == ["bad.txt"]  # no output, no temporary file


def test_invalid_utf8_is_reported(tmp_path: Path) -> None:
    table = tmp_path / "bad.txt"
    table.write_bytes(b"x ||| y ||| 0.1\nx ||| \xff\xfe ||| 0.2\n")
    with pytest.raises(InputError, match=r"bad.txt:2: invalid UTF-8"):
        list(read_table(str(table)))


def test_truncated_gzip_is_an_error(tmp_path: Path) -> None:
    table = tmp_path / "cut.gz"
    table.write_bytes(SLICE.read_bytes()[:-100])
    out = tmp_path / "out.gz"
    with pytest.raises(InputError, match="truncated gzip"):
        copy_table(str(table), str(out))
    assert not out.exists()


def test_skip_bad_lines_writes_and_counts_them(tmp_path: Path) -> None:
    good = ["x ||| y ||| 0.1 0.2", "z ||| w ||| 0.3 0.4"]
    bad = ["broken line", "a ||| b ||| 0.5"]
    table = tmp_path / "t.txt"
    table.write_text("\n".join([good[0], bad[0], bad[1], good[1]]) + "\n")
    out, rejects = tmp_path / "out.txt", tmp_path / "rejects.txt"
    stats = copy_table(str(table), str(out), skip_bad_lines=str(rejects))
    assert (stats.lines, stats.bad) == (4, 2)
    assert out.read_text().splitlines() == good
    assert rejects.read_text().splitlines() == bad
    assert stats.bad_examples[0].startswith(f"{table}:2: ")


def test_failed_write_keeps_previous_file(tmp_path: Path) -> None:
    target = tmp_path / "out.txt"
    target.write_text("old\n")
    with pytest.raises(RuntimeError), open_output(str(target)) as out:
        out.write("new partial\n")
        raise RuntimeError("killed")
    assert target.read_text() == "old\n"
    assert os.listdir(tmp_path) == ["out.txt"]


def test_reader_stats_count_every_line() -> None:
    with TableReader(str(SLICE)) as reader:
        n = sum(1 for _ in reader)
    assert n == reader.stats.lines == 2090


@pytest.mark.parametrize("logp", [0.0, -1e-9, -0.3, -7.25, -23.4567, -99.99, -100.0, -250.0])
def test_prob_column_round_trips_through_ln(logp: float) -> None:
    text = format_prob(logp)
    value = float(text)
    assert 0.0 < value <= 1.0
    assert abs(math.log(value) - max(logp, -100.0)) < 1e-4


def test_number_formats() -> None:
    assert format_score(0.000201357) == "0.000201357"  # as Moses prints (%g)
    assert format_score(2.718281828) == "2.71828"
    assert format_logp(-1234.56789) == "-1234.5679"
    assert format_prob(-1000.0) == "3.72008e-44"  # e^-100, never 0


def test_limits_make_bad_lines_and_messages_quote_an_excerpt() -> None:
    """Issue 28, item 3: a 10 MB target phrase was scored (for 15 minutes), a 1 MB score token
    was echoed whole."""
    from rescorer.io.columns import split_columns
    from rescorer.io.table import MAX_LINE_BYTES, MAX_PHRASE_TOKENS

    many = " ".join(["le"] * (MAX_PHRASE_TOKENS + 1))
    entry = parse_raw_line(f"the ||| {many} ||| 0.5\n".encode(), 7, None)
    assert entry == f"a target phrase of {MAX_PHRASE_TOKENS + 1} tokens, expected at most " + (
        f"{MAX_PHRASE_TOKENS} (docs/score.md, Limits)"
    )
    long = b"the ||| la ||| 0.5 ||| " + b"x" * MAX_LINE_BYTES + b"\n"
    assert str(parse_raw_line(long, 1, None)).startswith("a line of 1,048,600 bytes")
    good = b"the ||| la ||| 0.5\n"
    assert split_columns(good + f"a ||| {many} ||| 0.5\n".encode(), 1) is None
    assert split_columns(good + long, 1) is None
    message = str(parse_raw_line(b"a ||| b ||| " + b"9x" * 500_000 + b"\n", 1, None))
    quoted = "'" + "9x" * 20 + "'... (1,000,000 characters)"
    assert message == f"score 1 is {quoted}, expected a number"
    assert len(message) < 120


def test_sources_among_finds_the_table_sources_of_given_phrases(tmp_path: Path) -> None:
    entries = list(read_table(str(SLICE)))
    some = {entries[0].src, entries[-1].src, "a phrase not there", entries[0].tgt}
    want = {e.src for e in entries} & some
    assert sources_among(str(SLICE), some) == want and len(want) >= 2
    bad = tmp_path / "bad.txt"
    bad.write_text("a ||| b ||| 1\nno separator\n")
    with pytest.raises(InputError, match="found 1 field") as err:
        sources_among(str(bad), {"a"})
    assert err.value.lineno == 2


def test_source_words_are_every_word_of_the_source_field_and_a_bad_line_is_named(
    tmp_path: Path,
) -> None:
    table = tmp_path / "t.txt"
    table.write_bytes(b"a b ||| x ||| 1 ||| ||| 1 1 1\nc ||| a y ||| 1 ||| ||| 1 1 1\n")
    assert source_words(str(table)) == {b"a", b"b", b"c"}  # target words are not sources
    table.write_bytes(b"a b ||| x ||| 1 ||| ||| 1 1 1\nno separator here\n")
    with pytest.raises(InputError, match=r"t\.txt:2: found 1 field"):
        source_words(str(table))
