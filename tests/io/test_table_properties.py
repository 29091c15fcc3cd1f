"""Property-based tests (Hypothesis) of the phrase-table parser and writer, with a fixed budget.

Any valid line round-trips byte for byte; any line made invalid is refused with its number.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rescorer.errors import InputError
from rescorer.io.table import copy_table, parse_line, read_table

BUDGET = settings(
    max_examples=200,
    deadline=None,
    derandomize=True,  # the same examples on every run: CI cannot flake
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

# A token: any characters but Moses' separators (space, tab) and line ends; "|||" alone would
# make a field separator.
tokens = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters=" \t\n\r"),
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
    st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\n\r"), max_size=30),
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
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
@BUDGET
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
