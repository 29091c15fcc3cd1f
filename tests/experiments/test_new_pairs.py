"""System (f)'s count of generated pairs in a 1-best: a hand-made fill-up table and hand-made
``moses -report-segmentation`` lines, counted by hand."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from rescorer.errors import RescorerError
from rescorer.experiments.new_pairs import (
    Segment,
    count_use,
    examples,
    new_pairs_used,
    read_generated_pairs,
    read_pairs,
    read_segmentation,
    strip_segmentation,
    write_pairs,
)

# A scored table filled up by extend: the table's own pairs end in 1, the generated in 2.718.
FILL_UP = """\
das ||| the ||| 0.6 0.5 0.7 0.4 0.3 1 ||| 0-0 ||| 10 10 6 ||| |||
das ||| this ||| 0.0001 0.0001 0.0001 0.0001 0.02 2.718 |||  ||| 0 0 0 ||| |||
das haus ||| the house ||| 0.9 0.8 0.9 0.7 0.2 1 ||| 0-0 1-1 ||| 3 3 3 ||| |||
das haus ||| this home ||| 0.0001 0.0001 0.0001 0.0001 0.01 2.718 |||  ||| 0 0 0 ||| |||
haus ||| home ||| 0.0001 0.0001 0.0001 0.0001 0.05 2.718 |||  ||| 0 0 0 ||| |||
haus ||| house ||| 0.8 0.7 0.8 0.6 0.4 1 ||| 0-0 ||| 5 5 4 ||| |||
ist ||| is ||| 0.9 0.9 0.9 0.9 0.6 1 ||| 0-0 ||| 9 9 9 ||| |||
klein ||| small ||| 0.7 0.6 0.7 0.6 0.3 1 ||| 0-0 ||| 4 4 4 ||| |||
klein ||| little ||| 0.0001 0.0001 0.0001 0.0001 0.1 2.718 |||  ||| 0 0 0 ||| |||
"""
GENERATED = {("das", "this"), ("das haus", "this home"), ("haus", "home"), ("klein", "little")}


@pytest.fixture
def fill_up(tmp_path: Path) -> Path:
    path = tmp_path / "phrase-table.gz"
    path.write_bytes(gzip.compress(FILL_UP.encode()))
    return path


def test_the_generated_pairs_are_those_of_provenance_2_718(fill_up: Path, tmp_path: Path) -> None:
    assert read_generated_pairs(fill_up) == GENERATED
    write_pairs(tmp_path / "new-pairs.txt", GENERATED)
    # in LC_ALL=C byte order of the lines: "das h" before "das |"
    assert (tmp_path / "new-pairs.txt").read_text().splitlines() == [
        "das haus ||| this home", "das ||| this", "haus ||| home", "klein ||| little",
    ]  # fmt: skip
    assert read_pairs(tmp_path / "new-pairs.txt") == GENERATED


def test_a_segmented_line_is_read_as_moses_writes_it() -> None:
    # as moses -report-segmentation writes it: each phrase's words, then |start-end|, a space
    line = "this home |0-1| is |2-2| little |3-3| "
    assert read_segmentation(line) == [
        Segment(0, 1, "this home"), Segment(2, 2, "is"), Segment(3, 3, "little"),
    ]  # fmt: skip
    assert strip_segmentation(line) == "this home is little "
    assert read_segmentation("") == [] and strip_segmentation("") == ""
    with pytest.raises(RescorerError, match="'is' without a source span"):
        read_segmentation("this |0-0| is", where="test.seg:3")


@pytest.mark.parametrize(
    ("source", "line", "expected"),
    [
        # two generated pairs, one of them over two source words, and one of the table's own
        ("das haus ist klein", "this home |0-1| is |2-2| little |3-3| ", [
            ("das haus", "this home"), ("klein", "little")]),
        # the same words, but from the table's own pairs: nothing new
        ("das haus ist klein", "the house |0-1| is |2-2| small |3-3| ", []),
        # reordered output: spans out of order; "home" for "haus" alone is generated, "this"
        # for "das" too, counted twice when used twice
        ("das haus das", "this |2-2| home |1-1| this |0-0| ", [
            ("das", "this"), ("haus", "home"), ("das", "this")]),
        # a generated target for another source ("home" is generated for "haus", not "das")
        ("das ist", "home |0-0| is |1-1| ", []),
        # an unknown word passed through
        ("zebra ist", "zebra |0-0| is |1-1| ", []),
    ],
)  # fmt: skip
def test_new_pairs_used_match_span_and_target(
    source: str, line: str, expected: list[tuple[str, str]]
) -> None:
    assert new_pairs_used(source, read_segmentation(line), GENERATED) == expected


def test_a_span_past_the_source_is_an_error() -> None:
    with pytest.raises(RescorerError, match=r"\|1-2\| past the 2 words"):
        new_pairs_used("das haus", read_segmentation("the |0-0| house |1-2| "), GENERATED)


def test_counts_and_examples() -> None:
    sources = ["das haus ist klein", "das ist klein", "haus ist klein", "das haus"]
    refs = ["the house is small", "this is little", "the house is small", "this home"]
    ours = ["this home is little", "this is little", "home is small", "the house"]
    theirs = ["the house is small", "the is small", "home is small", "this home"]
    used = [
        [("das haus", "this home"), ("klein", "little")],
        [("das", "this"), ("klein", "little")],
        [("haus", "home")],  # same output as the other system: neither helped nor hurt
        [],  # lost, but without a generated pair: not an example
    ]
    assert count_use(used) == {"sentences": 3, "pairs": 5, "distinct": 4}
    found = examples(sources, refs, ours, theirs, used)
    assert [e["sentence"] for e in found["helped"]] == [2]
    assert [e["sentence"] for e in found["hurt"]] == [1]
    (hurt,) = found["hurt"]
    assert hurt["bleu"] < hurt["versus_bleu"] == pytest.approx(100.0)
    assert hurt["new_pairs"] == [["das haus", "this home"], ["klein", "little"]]
    assert (hurt["hypothesis"], hurt["versus_hypothesis"]) == (ours[0], theirs[0])
    assert found["helped"][0]["bleu"] == pytest.approx(100.0)


def test_at_most_three_examples_of_each_kind_largest_first() -> None:
    refs = ["a b c d"] * 5
    theirs = ["x y z w"] * 5
    ours = ["a b c d", "a b c x", "a b x y", "a x y z", "a b c d"]  # BLEU 100, ..., 100
    used = [[("s", "t")]] * 5
    found = examples(["s"] * 5, refs, ours, theirs, used)
    assert [e["sentence"] for e in found["helped"]] == [1, 5, 2]  # ties: in order
    assert found["hurt"] == []
