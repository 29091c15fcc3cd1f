"""Property-based tests (Hypothesis) of the phrase-table parser and writer, with a fixed budget.

Any valid line round-trips byte for byte; any line made invalid is refused with its number.
"""

from __future__ import annotations

import gzip
import itertools
import math
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rescorer.constants import LOGP_FLOOR
from rescorer.errors import InputError
from rescorer.io.columns import (
    column_texts,
    g_texts,
    insert_at,
    insert_columns,
    insert_prob_columns,
    split_columns,
)
from rescorer.io.table import (
    copy_table,
    format_logp,
    format_prob,
    format_score,
    parse_line,
    parse_raw_line,
    read_table,
)

BUDGET = settings(
    max_examples=200,
    deadline=None,
    derandomize=True,  # the same examples on every run: CI cannot flake
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
# One kind of damage a test: 9 kinds of 50 tables each (generating a table costs about 20 ms,
# so 200 each took 4-5 s a kind, 80 s of the suite for the two tests below).
DAMAGE_BUDGET = settings(BUDGET, max_examples=50)

# A token: any characters but Moses' separators (space, tab), line ends and NUL (no text: a
# bad line); "|||" alone would make a field separator.
tokens = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters=" \t\n\r\0"),
    min_size=1,
    max_size=6,
).filter(lambda tok: tok != "|||")
phrases = st.lists(tokens, min_size=1, max_size=5).map(" ".join)
numbers = st.floats(allow_nan=False, allow_infinity=False, width=32)
number_texts = st.one_of(
    numbers.map(repr),
    numbers.map(lambda v: f"{v:g}"),
    numbers.map(lambda v: f"{v:.6e}"),
    st.integers(-(10**6), 10**6).map(str),
)
rests = st.one_of(
    st.none(),
    st.text(
        st.characters(blacklist_categories=("Cs",), blacklist_characters="\n\r\0"), max_size=30
    ),
)


@st.composite
def lines(draw: st.DrawFn, num_scores: int | None = None) -> str:
    n = num_scores if num_scores is not None else draw(st.integers(1, 6))
    scores = " ".join(draw(st.lists(number_texts, min_size=n, max_size=n)))
    line = f"{draw(phrases)} ||| {draw(phrases)} ||| {scores}"
    rest = draw(rests)
    return line if rest is None else f"{line} ||| {rest}"


# A table: every line has the same number of scores, as Moses requires.
tables = st.integers(1, 6).flatmap(lambda n: st.lists(lines(n), min_size=1, max_size=8))


@BUDGET
@given(lines())
def test_a_valid_line_round_trips(line: str) -> None:
    entry = parse_line(line, 1)
    assert not isinstance(entry, str), entry
    assert entry.line() == line
    assert [float(tok) for tok in entry.score_field.split()] == list(entry.scores)


@BUDGET
@given(tables)
def test_a_valid_table_is_copied_byte_for_byte(tmp_path: Path, table: list[str]) -> None:
    data = "".join(f"{line}\n" for line in table).encode("utf-8")
    src, out = tmp_path / "in.gz", tmp_path / "out.gz"
    src.write_bytes(gzip.compress(data))
    copy_table(str(src), str(out))
    assert gzip.decompress(out.read_bytes()) == data


def non_ascii_digit(line: str) -> str:
    src, tgt, scores = line.split(" ||| ")[:3]
    return f"{src} ||| {tgt} ||| \u0661\u0662 {scores}"  # Arabic-Indic 12


def full_width_digit(line: str) -> str:
    src, tgt, scores = line.split(" ||| ")[:3]
    return f"{src} ||| {tgt} ||| {scores} \uff11"  # full-width 1


DAMAGE = {
    "CR LF": lambda line: line + "\r",
    "CR inside": lambda line: line.replace(" ||| ", " |||\r", 1),
    "two fields": lambda line: line.split(" ||| ")[0] + " ||| x",
    "no scores": lambda line: " ||| ".join(line.split(" ||| ")[:2]) + " |||  ",
    "word score": lambda line: " ||| ".join(line.split(" ||| ")[:2]) + " ||| 0.5 high",
    "Arabic-Indic digits": non_ascii_digit,
    "full-width digit": full_width_digit,
    "underscore": lambda line: " ||| ".join(line.split(" ||| ")[:2]) + " ||| 1_000",
    "nan": lambda line: " ||| ".join(line.split(" ||| ")[:2]) + " ||| nan",
    "NUL in a phrase": lambda line: line.replace(" ||| ", "\0 ||| ", 1),  # issue 65, item 5
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
@DAMAGE_BUDGET
@given(table=tables, data=st.data())
def test_an_invalid_line_is_refused_with_its_number(
    tmp_path: Path, damage: str, table: list[str], data: st.DataObject
) -> None:
    k = data.draw(st.integers(0, len(table) - 1))
    table[k] = DAMAGE[damage](table[k])
    path = tmp_path / "t.txt"
    path.write_bytes("".join(f"{line}\n" for line in table).encode("utf-8"))
    with pytest.raises(InputError) as err:
        list(read_table(str(path)))
    assert err.value.lineno == k + 1, (damage, table[k], err.value)


# --------------------------------------------------------------- whole chunks at once
def chunk_of(table: list[str]) -> bytes:
    return "".join(f"{line}\n" for line in table).encode("utf-8")


def check_columns_against_the_line_parser(data: bytes, num_scores: int | None) -> bool:
    """split_columns(data) is what parse_raw_line gives line by line, or None; True if not
    None."""
    columns = split_columns(data, num_scores)
    raw_lines = data.split(b"\n")[:-1]
    entries = [parse_raw_line(raw, i + 1, num_scores) for i, raw in enumerate(raw_lines)]
    if columns is None:
        return False
    assert all(not isinstance(e, str) for e in entries), "split_columns took a bad line"
    assert columns.lines == raw_lines
    for raw, cut, src, tgt, entry in zip(
        raw_lines, columns.cuts, columns.src, columns.tgt, entries, strict=True
    ):
        assert not isinstance(entry, str)
        assert raw[cut:] == entry.rest.encode("utf-8")
        assert src.decode("utf-8").split(" ") == entry.src_tokens
        assert tgt.decode("utf-8").split(" ") == entry.tgt_tokens
    return True


@BUDGET
@given(tables)
def test_split_columns_agrees_with_the_line_parser(table: list[str]) -> None:
    data = chunk_of(table)
    num_scores = len(table[0].split(" ||| ")[2].split())
    taken = check_columns_against_the_line_parser(data, num_scores)
    # An ordinary table takes the bulk path: the same field count on every line and none of
    # the bytes the line parser treats specially.
    ordinary = len({line.count(" ||| ") > 2 for line in table}) == 1 and not any(
        b in data for b in (b"\t", b"\r", b"\x0b", b"\x0c")
    )
    assert taken == ordinary


@pytest.mark.parametrize("damage", sorted(DAMAGE))
@DAMAGE_BUDGET
@given(table=tables, data=st.data())
def test_split_columns_leaves_a_bad_line_to_the_line_parser(
    damage: str, table: list[str], data: st.DataObject
) -> None:
    k = data.draw(st.integers(0, len(table) - 1))
    table[k] = DAMAGE[damage](table[k])
    assert split_columns(chunk_of(table), None) is None


UNUSUAL = {
    "tab between tokens": ("a\tb ||| x ||| 1", True),
    "two spaces between tokens": ("a  b ||| x ||| 1", True),
    "space before the target": ("a |||  x ||| 1", True),
    "another score count": ("a ||| x ||| 1 2", False),
    "invalid UTF-8": (b"a\xff ||| x ||| 1", False),
    "empty source": (" ||| x ||| 1", False),
}


@pytest.mark.parametrize("name", sorted(UNUSUAL))
def test_split_columns_leaves_unusual_lines_to_the_line_parser(name: str) -> None:
    """Lines that are valid (or not) in ways the bulk path does not check go line by line."""
    line, valid = UNUSUAL[name]
    raw = line if isinstance(line, bytes) else line.encode("utf-8")
    assert split_columns(b"b ||| y ||| 3\n" + raw + b"\n", 1) is None
    assert isinstance(parse_raw_line(raw, 2, 1), str) == (
        not valid or name == "another score count"
    )


@BUDGET
@given(
    table=tables,
    logp=st.lists(st.floats(-1e4, 0.0), min_size=8, max_size=8),
    unk=st.lists(st.integers(0, 5), min_size=8, max_size=8),
    column=st.sampled_from(["prob", "logp"]),
    penalty=st.booleans(),
)
def test_column_texts_and_insert_columns_write_what_the_entry_writes(
    table: list[str], logp: list[float], unk: list[int], column: str, penalty: bool
) -> None:
    data = chunk_of(table)
    columns = split_columns(data, None)
    if columns is None:
        return
    n = len(columns.lines)
    texts = column_texts(logp[:n], column, unk[:n] if penalty else None)
    expected = []
    for i, raw in enumerate(columns.lines):
        entry = parse_raw_line(raw, i + 1, None)
        assert not isinstance(entry, str)
        new = [format_prob(logp[i]) if column == "prob" else format_logp(logp[i])]
        if penalty:
            new.append(format_score(math.exp(unk[i])))
        expected.append(entry.line_with_columns(new) + "\n")
    assert insert_columns(columns.lines, columns.cuts, texts) == "".join(expected).encode()


def g_edge_values() -> list[float]:
    """Values where "%g" is hard to get right: around each power of ten, and where the
    sixth digit's rounding is a half or a hair from one, plus what is not finite or tiny."""
    values = [0.0, -0.0, 1.0, -1.0, 5e-324, 1e-44, 9.99999e-45, 1e5, 99999.95, 99999.5]
    values += [float("nan"), float("inf"), -float("inf"), 1.7976931348623157e308, -1e-300]
    for k in range(-46, 7):
        for m in (1.0, 9.999995, 9.9999949, 9.9999951, 1.000005, 1.0000049999, 5.0, 1.234565):
            b = m * 10.0**k
            values += [b, math.nextafter(b, 0.0), math.nextafter(b, math.inf)]
    return values


def test_g_texts_writes_what_python_writes() -> None:
    """The vectorised "%g" of the prob column (issue 57), byte for byte, over the edges and
    200,000 probabilities of every size a model gives."""
    rng = np.random.default_rng(57)
    logp = np.concatenate([rng.uniform(-105.0, 0.0, 150_000), rng.uniform(-12.0, 0.5, 50_000)])
    values = [math.exp(max(x, LOGP_FLOOR)) for x in logp.tolist()] + g_edge_values()
    rows, lens = g_texts(np.array(values))
    got = [row[:n].tobytes().decode() for row, n in zip(rows, lens.tolist(), strict=True)]
    wrong = [(v, g) for v, g in zip(values, got, strict=True) if g != f"{v:g}"]
    assert not wrong, wrong[:5]


@BUDGET
@given(
    table=tables,
    logp=st.lists(st.floats(-120.0, 1.0), min_size=8, max_size=8),
    models=st.integers(1, 3),
    unk=st.lists(st.integers(0, 5), min_size=8, max_size=8),
    penalty=st.booleans(),
)
def test_insert_prob_columns_writes_what_column_texts_and_insert_at_write(
    table: list[str], logp: list[float], models: int, unk: list[int], penalty: bool
) -> None:
    data = chunk_of(table)
    columns = split_columns(data, None)
    if columns is None:
        return
    n = len(columns.starts)
    by_model = np.array([logp[(i + k) % 8] - k for i in range(n) for k in range(models)])
    by_model = by_model.reshape(n, models)  # (N,M)
    counts = np.array(unk[:n], dtype=np.int32)
    per_model = [
        column_texts(
            by_model[:, k].tolist(),
            "prob",
            None if k < models - 1 or not penalty else counts.tolist(),
            " " if k == 0 else "",
        )
        for k in range(models)
    ]
    texts = list(map(b" ".join, zip(*per_model, strict=True)))
    expected = insert_at(data, columns.score_ends.tolist(), texts)
    got = insert_prob_columns(data, columns.score_ends, by_model, counts if penalty else None)
    assert got == expected


# The number grammar the bulk path took with a regular expression before issue 57 (a number
# float() reads as a finite value: at most 30 integer digits and a 2-digit exponent); numpy
# now checks it over the whole chunk, and must take exactly these numbers of up to 30 bytes.
NUMBER = re.compile(rb"[-+]?(?:[0-9]{1,30}(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]{1,2})?")
SHORT_NUMBERS = ["".join(p) for k in range(1, 6) for p in itertools.product("1.e+-E", repeat=k)]


def takes_number(token: str) -> bool:
    return split_columns(f"a ||| b ||| 1 {token}\nc ||| d ||| {token} 2\n".encode(), 2) is not None


def test_the_bulk_path_reads_every_short_number_as_the_grammar_does() -> None:
    """Issue 57: split_columns checks the score fields with numpy, not the regular expression
    (which took a third of a worker's time); each string of up to 5 of the bytes that matter
    is taken exactly when the grammar reads it as a number."""
    wrong = [t for t in SHORT_NUMBERS if takes_number(t) != bool(NUMBER.fullmatch(t.encode()))]
    assert wrong == []
    assert sum(map(takes_number, SHORT_NUMBERS)) > 100


@BUDGET
@given(st.text(alphabet="0123456789.eE+-", min_size=1, max_size=30))
def test_the_bulk_path_reads_numbers_as_the_grammar_does(token: str) -> None:
    assert takes_number(token) == bool(NUMBER.fullmatch(token.encode()))


def test_insert_at_writes_what_insert_columns_writes() -> None:
    """The chunk's bytes with the texts at the cuts (offsets into one buffer, issue 57) are
    the lines with the texts inserted, line by line."""
    data = b"a ||| b ||| 1 ||| x\nc ||| d ||| 2\ne ||| f ||| 3"
    columns = split_columns(data, 1)
    assert columns is None  # lines with and without a rest: the line parser's
    data = b"a ||| b ||| 1 ||| x\nc ||| d ||| 2 ||| \ne ||| f ||| 3 ||| y"
    columns = split_columns(data, 1)
    assert columns is not None
    texts = [b"0.5", b"0.25", b"1e-05"]
    lines = insert_columns(columns.lines, columns.cuts, texts)
    assert insert_at(data, columns.score_ends.tolist(), [b" " + t for t in texts]) == lines[:-1]
    assert insert_at(b"", [], []) == b""
