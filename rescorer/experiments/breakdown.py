"""Where a gain is: the test set cut into groups of sentences, each system's gain in each.

The paper's regime has longer sentences and a weaker phrase table than a system of software
messages; these groups ask the same of one test set. Sentences are grouped by their number of
source words (:data:`LENGTH_BOUNDS`) and by whether a source word is unknown to the phrase table
(it is in no source phrase of the table: Moses copies it through). In each group the gain is the
mean BLEU of the system's replicas minus the baseline's on that group's sentences, with the same
95% interval as the whole test set's
(:func:`rescorer.experiments.significance.gain_interval`).
The groups are small, so their intervals are wide: read them as where a gain would show, not
as tests of their own (up to seven of them, no correction for the multiple comparisons).

Torch-free: statistics are ``[K, S, STATS_WIDTH]`` arrays (:mod:`rescorer.experiments.bleu`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from rescorer.experiments.bleu import bleu_from_totals
from rescorer.experiments.significance import gain_interval
from rescorer.io.table import source_words

LENGTH_BOUNDS = (5, 10, 20, 40)  # source words: 1-5, 6-10, 11-20, 21-40, 41 and more
MIN_GROUP = 50  # sentences: a smaller length group joins its neighbour


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
    ``11+``), a small first group the one above it, until no group is small or one is left;
    empty groups are left out first (a merged group is named from its lowest non-empty bucket to
    its highest: sentences of 1 to 16 words make ``1-20``, not ``1-40``)."""
    lengths = np.array([len(_words(s)) for s in sources], dtype=np.int64)
    spans: list[tuple[int, int | None]] = []  # [low, high] words, high None: no limit
    low = 1
    for high in (*bounds, None):
        spans.append((low, high))
        if high is not None:
            low = high + 1
    groups = []  # the non-empty spans and their sentences, shortest first
    for low, high in spans:
        inside = (lengths >= low) | ((lengths == 0) & (low == 1))
        if high is not None:
            inside &= lengths <= high
        if inside.any():
            groups.append(((low, high), np.flatnonzero(inside)))
    while len(groups) > 1:
        small = [i for i, (_, m) in enumerate(groups) if len(m) < min_sentences]
        if not small:
            break
        i = small[-1]  # the longest small group joins the group below it; the first, above
        j = i - 1 if i > 0 else 1
        a, b = sorted((i, j))
        (low, _), (_, high) = groups[a][0], groups[b][0]
        groups[a] = ((low, high), np.sort(np.concatenate([groups[a][1], groups[b][1]])))
        del groups[b]
    return [
        Group(f"{low}+ words" if high is None else f"{low}-{high} words", m)
        for (low, high), m in groups
    ]


def _words(line: str) -> list[bytes]:
    """A line's words as Moses reads them: split on ASCII white space (not on U+00A0)."""
    return line.encode("utf-8").split()


def table_source_words(table: str) -> set[bytes]:
    """Every word of every source phrase of a Moses phrase table (plain or gzip), as bytes. A
    word found only inside longer phrases counts: the decoder may still copy it through where
    those phrases do not match."""
    return source_words(table)


def unknown_groups(sources: Sequence[str], known: set[bytes]) -> list[Group]:
    """The sentences whose every source word the table knows, and those with an unknown one;
    empty groups are left out."""
    unknown = np.array([any(w not in known for w in _words(s)) for s in sources], dtype=bool)
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
) -> list[dict[str, Any]]:
    """For each group: its sentences, the baseline's and the system's mean BLEU on them, the
    gain and its interval. ``baseline`` and ``system`` are [K, S, STATS_WIDTH]."""
    rows: list[dict[str, Any]] = []
    for g in groups:
        ours, theirs = system[:, g.sentences], baseline[:, g.sentences]  # [K, S', W]
        interval = gain_interval(theirs, ours, trials=trials, seed=seed)
        rows.append({
            "group": g.name,
            "sentences": len(g.sentences),
            "baseline": _bleu(theirs),
            "system": _bleu(ours),
            "delta": interval.delta,
            "interval": [interval.low, interval.high],
        })  # fmt: skip
    return rows
