"""Where a gain is: the test set cut into groups of sentences, each system's gain in each.

The paper's regime has longer sentences and a weaker phrase table than a system of software
messages; these groups ask the same of one test set. Sentences are grouped by their number of
source words (:data:`LENGTH_BOUNDS`) and by whether a source word is unknown to the phrase table
(it is in no source phrase of the table: Moses copies it through). In each group the gain is the
mean BLEU of the system's replicas minus the baseline's on that group's sentences, with the same
bootstrap interval as the whole test set's
(:func:`rescorer.experiments.significance.gain_interval`).
The groups are small, so their intervals are wide: read them as where a gain would show, not
as tests of their own (seven of them, no correction for the multiple comparisons).

Torch-free: statistics are ``[K, S, STATS_WIDTH]`` arrays (:mod:`rescorer.experiments.bleu`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from rescorer.experiments.bleu import bleu_from_totals
from rescorer.experiments.significance import gain_interval, mean_gain
from rescorer.io.inputs import iter_raw_lines, open_binary

LENGTH_BOUNDS = (5, 10, 20, 40)  # source words: 1-5, 6-10, 11-20, 21-40, 41 and more
MIN_GROUP = 50  # sentences: a smaller length group joins its neighbour
SEPARATOR = b" ||| "


@dataclass(frozen=True)
class Group:
    """Sentences of the test set (their indices, in order) under a name."""

    name: str
    sentences: np.ndarray  # [S'] int


def length_groups(
    sources: Sequence[str], bounds: Sequence[int] = LENGTH_BOUNDS, min_sentences: int = MIN_GROUP
) -> list[Group]:
    """The sentences by number of source words: ``1-5``, ``6-10``, ..., ``41+`` (an empty source
    line counts as 0 words and goes in the first group). A group of fewer than ``min_sentences``
    joins the one below it (``21-40`` and ``41+`` of 31 sentences in all join ``11-20`` to make
    ``11+``), the first group the one above it; empty groups are left out."""
    lengths = np.array([len(s.split()) for s in sources], dtype=np.int64)
    spans: list[tuple[int, int | None]] = []  # [low, high] words, high None: no limit
    low = 1
    for high in (*bounds, None):
        spans.append((low, high))
        if high is not None:
            low = high + 1
    members = [
        np.flatnonzero(
            ((lengths >= low) | ((lengths == 0) & (low == 1)))
            & (True if high is None else lengths <= high)
        )
        for low, high in spans
    ]
    i = len(spans) - 1
    while i > 0:  # from the top: a small group joins the one below it
        if 0 < len(members[i]) < min_sentences:
            spans[i - 1] = (spans[i - 1][0], spans[i][1])
            members[i - 1] = np.concatenate([members[i - 1], members[i]])
            del spans[i], members[i]
        i -= 1
    if len(spans) > 1 and 0 < len(members[0]) < min_sentences:
        spans[1] = (spans[0][0], spans[1][1])
        members[1] = np.concatenate([members[0], members[1]])
        del spans[0], members[0]
    return [
        Group(f"{low}+ words" if high is None else f"{low}-{high} words", np.sort(m))
        for (low, high), m in zip(spans, members, strict=True)
        if len(m)
    ]


def table_source_words(table: str) -> set[str]:
    """Every word of every source phrase of a Moses phrase table (plain or gzip)."""
    words: set[bytes] = set()
    with open_binary(table) as stream:
        for line in iter_raw_lines(stream, table):
            source, sep, _ = line.partition(SEPARATOR)
            if sep:
                words.update(source.split())
    return {w.decode("utf-8", errors="replace") for w in words}


def unknown_groups(sources: Sequence[str], known: set[str]) -> list[Group]:
    """The sentences whose every source word the table knows, and those with an unknown one;
    empty groups are left out."""
    unknown = np.array([any(w not in known for w in s.split()) for s in sources], dtype=bool)
    groups = [
        Group("no unknown word", np.flatnonzero(~unknown)),
        Group("an unknown word", np.flatnonzero(unknown)),
    ]
    return [g for g in groups if len(g.sentences)]


def _bleu(stats: np.ndarray) -> float:
    """Mean BLEU over the replicas of ``stats`` [K, S, W]."""
    return float(bleu_from_totals(stats.sum(axis=1)).mean())


def gains_by_group(
    baseline: np.ndarray,
    system: np.ndarray,
    groups: Iterable[Group],
    *,
    trials: int,
    seed: int,
) -> list[dict[str, object]]:
    """For each group: its sentences, the baseline's and the system's mean BLEU on them, the
    gain and its bootstrap interval. ``baseline`` and ``system`` are [K, S, STATS_WIDTH]."""
    rows: list[dict[str, object]] = []
    for g in groups:
        ours, theirs = system[:, g.sentences], baseline[:, g.sentences]  # [K, S', W]
        low, high = gain_interval(theirs, ours, trials=trials, seed=seed)
        rows.append({
            "group": g.name,
            "sentences": len(g.sentences),
            "baseline": _bleu(theirs),
            "system": _bleu(ours),
            "delta": mean_gain(theirs, ours),
            "interval": [low, high],
        })  # fmt: skip
    return rows
