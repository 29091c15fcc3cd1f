"""Where a gain is: test sentences grouped by length and by unknown words, a gain per group."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rescorer.experiments.bleu import corpus_stats
from rescorer.experiments.breakdown import (
    Group,
    gains_by_group,
    length_groups,
    table_source_words,
    unknown_groups,
)
from rescorer.experiments.significance import mean_gain

TINY_TABLE = Path(__file__).resolve().parents[1] / "data" / "tiny-system" / "phrase-table.gz"


def test_length_groups_cover_every_sentence_once_by_its_words() -> None:
    sources = ["a b", "", " ".join("w" * 1 for _ in range(6)), "x " * 11, "y " * 45, "z " * 20]
    groups = length_groups(sources, min_sentences=1)
    assert [(g.name, g.sentences.tolist()) for g in groups] == [
        ("1-5 words", [0, 1]),  # an empty line counts in the first group
        ("6-10 words", [2]),
        ("11-20 words", [3, 5]),
        ("41+ words", [4]),  # 21-40 is empty: left out
    ]
    assert [g.name for g in length_groups(["a"] * 3, bounds=(1,), min_sentences=1)] == ["1-1 words"]


def test_a_small_length_group_joins_its_neighbour() -> None:
    """en-fr's test set: 29 sentences of 21-40 words and 2 of 41 or more."""
    counts = {3: 60, 8: 60, 15: 40, 30: 29, 50: 2}  # words: sentences
    sources = [" ".join(["w"] * words) for words, n in counts.items() for _ in range(n)]
    groups = length_groups(sources, min_sentences=50)
    assert [(g.name, len(g.sentences)) for g in groups] == [
        ("1-5 words", 60), ("6-10 words", 60), ("11+ words", 71),
    ]  # fmt: skip
    assert groups[2].sentences.tolist() == list(range(120, 191))
    # a small first group joins the one above it
    groups = length_groups(["a"] * 3 + ["w " * 8] * 60, min_sentences=50)
    assert [(g.name, len(g.sentences)) for g in groups] == [("1-10 words", 63)]
    # ... across an empty bucket, and until it is no longer small
    groups = length_groups(["a"] * 10 + ["w " * 15] * 100, min_sentences=50)
    assert [(g.name, len(g.sentences)) for g in groups] == [("1-20 words", 110)]
    groups = length_groups(["a"] * 10 + ["w " * 15] * 10 + ["w " * 45] * 100, min_sentences=50)
    assert [(g.name, len(g.sentences)) for g in groups] == [("1+ words", 120)]
    # every group small: one group, named by the buckets its sentences are in
    tiny = [" ".join(["w"] * n) for n in (1, 2, 2, 6, 6, 7, 8, 8, 11, 16)]  # tiny-system's test
    assert [(g.name, len(g.sentences)) for g in length_groups(tiny)] == [("1-20 words", 10)]
    assert [g.name for g in length_groups(["a"] * 30)] == ["1-5 words"]


def test_unknown_words_are_those_in_no_source_phrase_of_the_real_table() -> None:
    known = table_source_words(str(TINY_TABLE))
    assert {b"%", b"&gt;", b"please", b"enter"} <= known
    assert b"faliscan" not in known  # a word of the tiny system's test set, copied by Moses
    groups = unknown_groups(["please enter", "please faliscan", "enter"], known)
    assert [(g.name, g.sentences.tolist()) for g in groups] == [
        ("no unknown word", [0, 2]),
        ("an unknown word", [1]),
    ]
    assert [g.name for g in unknown_groups(["please"], known)] == ["no unknown word"]
    # words are split as the table's are, on ASCII white space: U+00A0 joins two words into one
    assert [g.name for g in unknown_groups(["please\u00a0enter"], known)] == ["an unknown word"]
    assert [g.name for g in length_groups(["a\u00a0b"] * 2, bounds=(1,), min_sentences=1)] == [
        "1-1 words"
    ]


def stats(hyps: list[str], refs: list[str]) -> np.ndarray:
    return corpus_stats(hyps, refs)


def test_a_group_gain_is_the_gain_on_its_sentences_alone() -> None:
    refs = ["the cat sat on the mat", "a dog ran far away now", "open the file menu", "yes"]
    base = np.stack(
        [
            stats(["the cat sat on a mat", "a dog ran away", "open file", "no"], refs),
            stats(["the cat sat on the mat", "a dog ran away", "open file", "no"], refs),
        ]
    )  # [K=2, S=4, W]
    ours = np.stack([stats(["the cat sat on the mat", "a dog ran far away now",
                            "open a file", "no"], refs)])  # fmt: skip  # [K=1, S, W]
    short, long_ = Group("short", np.array([2, 3])), Group("long", np.array([0, 1]))
    rows = gains_by_group(base, ours, [long_, short], trials=200, seed=3)
    assert [r["group"] for r in rows] == ["long", "short"]
    assert [r["sentences"] for r in rows] == [2, 2]
    for row, g in zip(rows, [long_, short], strict=True):
        expected = mean_gain(base[:, g.sentences], ours[:, g.sentences])
        assert row["delta"] == pytest.approx(expected)
        assert row["system"] - row["baseline"] == pytest.approx(expected)
        low, high = row["interval"]
        assert low <= row["delta"] <= high
    assert rows[0]["delta"] > 0  # the long sentences are where this system gained
