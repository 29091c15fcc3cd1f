"""The prob column made with numpy over a chunk (issue 57, a worker core's rate): numpy's exp in
place of one math.exp per line, and the rows put in place without a Python loop, must write the
bytes that ``format_prob`` writes line by line, on the real slice and at the edges."""

from __future__ import annotations

import gzip
import math

import numpy as np
import pytest
from conftest import SLICE
from hypothesis import given, settings
from hypothesis import strategies as st

from rescorer.constants import LOGP_FLOOR
from rescorer.io.columns import (
    _valid_utf8,
    column_texts,
    insert_at,
    insert_prob_columns,
    prob_texts,
    split_columns,
)
from rescorer.io.table import format_prob, parse_raw_line

BUDGET = settings(max_examples=200, deadline=None, derandomize=True)

# Log-probabilities whose numpy exp and math.exp differ in the last bit on each side of a
# rounding boundary of the sixth digit: numpy's value alone would write another text.
NEAR_A_HALF = [
    -0.48326152807604666,
    -69.23633693760111,
    -0.5486927867151289,
    -10.744816926493796,
    -5.68049621637228,
]


def texts(rows: np.ndarray, lens: np.ndarray) -> list[str]:
    return [row[:n].tobytes().decode() for row, n in zip(rows, lens.tolist(), strict=True)]


def test_numpy_exp_alone_would_write_another_text_near_a_half() -> None:
    """The edge cases are real: numpy's exp differs there (else the test below proves less).
    numpy picks its exp by the CPU (an AVX-512 loop differs from math.exp in the last bit, the
    AVX2 one of a Zen 3 agrees on these values): where it agrees, there is nothing to show."""
    ours = np.exp(np.array(NEAR_A_HALF))
    if ours.tolist() == [math.exp(v) for v in NEAR_A_HALF]:
        pytest.skip("numpy's exp equals math.exp on these values on this CPU: no edge to show")
    assert [f"{v:g}" for v in ours.tolist()] != [format_prob(v) for v in NEAR_A_HALF]


def test_prob_texts_writes_what_format_prob_writes() -> None:
    rng = np.random.default_rng(57)
    logp = np.concatenate(
        [
            rng.uniform(-105.0, 0.0, 150_000),
            rng.uniform(-12.0, 0.5, 50_000),
            [0.0, -0.0, LOGP_FLOOR, -1e9, -math.inf, 11.5129, 11.52, 700.0, 709.78],
            [math.log(10.0**k) for k in range(-43, 5)],
            NEAR_A_HALF,
        ]
    )
    got = texts(*prob_texts(logp))
    wrong = [(v, g) for v, g in zip(logp.tolist(), got, strict=True) if g != format_prob(v)]
    assert not wrong, wrong[:5]
    assert texts(*prob_texts(np.array([math.nan]))) == [format_prob(math.nan)]


@BUDGET
@given(st.lists(st.floats(max_value=709.0), min_size=1, max_size=50))
def test_prob_texts_writes_what_format_prob_writes_of_any_float(logp: list[float]) -> None:
    assert texts(*prob_texts(np.array(logp))) == [format_prob(v) for v in logp]


def test_prob_texts_refuses_what_format_prob_refuses() -> None:
    """exp(710) is past float64: math.exp's OverflowError, as one format_prob per line."""
    with pytest.raises(OverflowError):
        format_prob(710.0)
    with pytest.raises(OverflowError):
        prob_texts(np.array([-1.0, 710.0]))


@pytest.mark.parametrize("models", [1, 2, 3])
@pytest.mark.parametrize("penalty", [False, True])
def test_insert_prob_columns_on_the_real_slice(models: int, penalty: bool) -> None:
    """The slice's 2,090 lines with 1-3 models' columns and the word penalty: what
    column_texts and insert_at (one Python text per line) write."""
    data = gzip.decompress(SLICE.read_bytes())
    columns = split_columns(data, 4)
    assert columns is not None
    n = len(columns.starts)
    rng = np.random.default_rng(models)
    logp = rng.uniform(-110.0, 0.2, (n, models))  # (N,M)
    logp[::7, 0] = NEAR_A_HALF[0]
    unk = rng.integers(0, 9, n).astype(np.int32)
    per_model = [
        column_texts(
            logp[:, k].tolist(),
            "prob",
            unk.tolist() if penalty and k == models - 1 else None,
            " " if k == 0 else "",
        )
        for k in range(models)
    ]
    lines = list(map(b" ".join, zip(*per_model, strict=True)))
    expected = insert_at(data, columns.score_ends.tolist(), lines)
    assert insert_prob_columns(data, columns.score_ends, logp, unk if penalty else None) == expected


# ------------------------------------------------------------- split_columns' cheaper passes
@BUDGET
@given(st.binary(max_size=60), st.binary(max_size=8))
def test_the_utf8_check_is_decode(data: bytes, tail: bytes) -> None:
    """_valid_utf8 decodes only the runs of bytes over 127: the same verdict as decoding the
    whole (truncated, overlong, surrogate and out-of-range sequences, ASCII inside a run)."""
    for chunk in (data, data + tail, "d\u00e9j\u00e0 \u20ac\U0001f600 ".encode() + data):
        try:
            chunk.decode("utf-8")
            valid = True
        except UnicodeDecodeError:
            valid = False
        assert _valid_utf8(chunk, np.frombuffer(chunk, dtype=np.uint8)) == valid


BAD_UTF8 = [b"\xc3", b"\xc3(", b"\xe2\x82", b"\xed\xa0\x80", b"\xc0\xaf", b"\xf4\x90\x80\x80"]


@pytest.mark.parametrize("bad", BAD_UTF8)
def test_a_bad_sequence_anywhere_goes_line_by_line(bad: bytes) -> None:
    good = "\u00e9t\u00e9 ||| summer \u00e0 ||| 0.5\n".encode()
    for data in (good + b"a" + bad + b" ||| b ||| 1\n", good + b"a ||| b" + bad + b" ||| 1\n"):
        assert split_columns(good * 3, 1) is not None
        assert split_columns(data, 1) is None


@pytest.mark.parametrize(
    "data",
    [
        b"a ||| b ||| 1 ||| x",
        b"a ||| b ||| 1 ||| ",
        b"a ||| b ||| 1 |||",
        b"a ||| b ||| 1 ||",
        b"a ||| b ||| 1",
        b"a ||| b ||| 1\nc ||| d ||| 2 |||",
        b"a ||| b |||",
        b"a ||| b ||| ",
        b"a ||| b ||||| 1",
        b"a |||| b ||| 1",
        b"a ||| b ||| 1\n",
    ],
)
def test_separators_at_the_end_of_a_chunk_are_the_line_parsers(data: bytes) -> None:
    """A separator read as 8 bytes at a time (the chunk padded with zeros) is found exactly
    where the line parser finds one, up to the chunk's last byte."""
    columns = split_columns(data, 1, keep_spaces=True)
    raw_lines = data.split(b"\n")
    if raw_lines[-1] == b"":
        raw_lines.pop()
    entries = [parse_raw_line(raw, i + 1, 1) for i, raw in enumerate(raw_lines)]
    if columns is None:
        return
    assert all(not isinstance(e, str) for e in entries)
    assert columns.lines == raw_lines
    for raw, cut, entry in zip(raw_lines, columns.cuts, entries, strict=True):
        assert not isinstance(entry, str)
        assert raw[cut:] == entry.rest.encode("utf-8")
    assert columns.spaces is not None and columns.src_sep is not None
    assert columns.tgt_sep is not None
    np.testing.assert_array_equal(columns.spaces[columns.src_sep], columns.src_ends)
    np.testing.assert_array_equal(columns.spaces[columns.tgt_sep], columns.tgt_ends)
