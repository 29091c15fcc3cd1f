"""The phrase table against the RNN, per given phrase: the paper's Table 2 (docs/analyses.md).

For each chosen phrase on the side the model reads (a forward model: a source phrase f; an
inverse one: a target phrase e, :mod:`rescorer.analysis.sides`), the phrases paired with it in
the table are ranked twice: by the table's phrase probability of the model's direction (p(e|f),
score column 2 of a Moses table counting from 0, or p(f|e), column 0) and by the RNN's log p.
The paper chose long (more than 3 words) source phrases at random among frequent and rare ones;
here "frequent" and "rare" are the top and bottom ``band`` of long given phrases by the table's
count of them (counts field: target, source, joint), and only phrases with at least
``min_candidates`` partners qualify, so that a top 3 exists. The summary the paper draws (the
RNN "prefers shorter phrases") is measured on a larger seeded random sample of long phrases.

Reading the table is torch-free (:func:`long_phrases`, :func:`collect_candidates`); the RNN
scores come from :func:`rescorer.score.scorer.score_pairs`.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from rescorer.analysis.sides import FORWARD_SIDES, Sides
from rescorer.errors import RescorerError
from rescorer.io.progress import Stages
from rescorer.io.table import TableReader, split_tokens

TOP = 3


@dataclass(frozen=True)
class GivenInfo:
    phrase: str  # on the side the model reads
    count: float  # the table's count of it (0 when the table has no counts field)
    candidates: int  # the phrases paired with it in the table


@dataclass
class Candidate:
    phrase: str  # on the side the model predicts
    table: float  # the table's probability of the model's direction
    rnn: float = float("nan")  # the RNN's ln p

    @property
    def length(self) -> int:
        return len(split_tokens(self.phrase))


@dataclass
class Comparison:
    """One given phrase with its candidates, ranked both ways."""

    info: GivenInfo
    group: str  # "given", "frequent", "rare" or "summary"
    candidates: list[Candidate] = field(default_factory=list)

    def by_table(self) -> list[Candidate]:
        return sorted(self.candidates, key=lambda c: -c.table)  # ties keep file order

    def by_rnn(self) -> list[Candidate]:
        return sorted(self.candidates, key=lambda c: -c.rnn)


def long_phrases(
    path: str,
    min_words: int,
    min_candidates: int,
    stages: Stages | None = None,
    sides: Sides = FORWARD_SIDES,
) -> list[GivenInfo]:
    """Every given phrase of at least ``min_words`` words and ``min_candidates`` partners, in
    the order of their first line. A table is sorted by source, not by target: the phrases are
    gathered in a dictionary (only the long ones, so it stays small)."""
    found: dict[str, list[float]] = {}  # phrase -> [count, candidates]
    with TableReader(
        path, progress=stages.reading(path, f"long {sides.given} phrases") if stages else None
    ) as reader:
        for entry in reader:
            given = sides.given_of(entry)
            seen = found.get(given)
            if seen is None:
                if len(split_tokens(given)) < min_words:
                    continue
                seen = found[given] = [sides.given_count(entry), 0]
            seen[1] += 1
    return [GivenInfo(p, c, int(n)) for p, (c, n) in found.items() if n >= min_candidates]


def choose_phrases(
    phrases: Sequence[GivenInfo], frequent: int, rare: int, band: float, seed: int
) -> list[tuple[GivenInfo, str]]:
    """``frequent`` random phrases among the top ``band`` by count, ``rare`` among the bottom."""
    by_count = sorted(phrases, key=lambda s: (-s.count, s.phrase))
    k = max(1, round(band * len(by_count)))
    rng = random.Random(seed)
    top, bottom = by_count[:k], by_count[-k:]
    chosen = [(s, "frequent") for s in rng.sample(top, min(frequent, len(top)))]
    chosen += [(s, "rare") for s in rng.sample(bottom, min(rare, len(bottom)))]
    return chosen


def collect_candidates(
    path: str,
    wanted: set[str],
    column: int | None = None,
    stages: Stages | None = None,
    sides: Sides = FORWARD_SIDES,
) -> dict[str, tuple[float, list[Candidate]]]:
    """The count and the candidates (file order, with the table's probability in ``column``,
    by default the model's direction's) of each wanted given phrase found in the table."""
    column = sides.column_or_default(column)
    found: dict[str, tuple[float, list[Candidate]]] = {}
    with TableReader(
        path, progress=stages.reading(path, "their candidates") if stages else None
    ) as reader:
        for entry in reader:
            given = sides.given_of(entry)
            if given not in wanted:
                continue
            if column >= len(entry.scores):
                raise RescorerError(
                    f"{reader.name}:{entry.lineno}: {len(entry.scores)} scores, no column "
                    f"{column} for {sides.probability} (--table-column counts from 0)"
                )
            if given not in found:
                found[given] = (sides.given_count(entry), [])
            found[given][1].append(Candidate(sides.predicted_of(entry), entry.scores[column]))
    return found


@dataclass(frozen=True)
class LengthSummary:
    """Mean length (words) of each side's top choice over ``phrases`` given phrases."""

    phrases: int
    table_top: float
    rnn_top: float
    all_candidates: float  # mean length over every candidate, for scale
    agree: float  # share of given phrases whose top choices are the same
    sides: Sides = FORWARD_SIDES

    def lines(self) -> list[str]:
        given, predicted = self.sides.given, self.sides.predicted
        return [
            f"over {self.phrases:,} {given} phrases: mean words of the top {predicted}: "
            f"table {self.table_top:.2f}, RNN {self.rnn_top:.2f} "
            f"(all {predicted}s {self.all_candidates:.2f}); same top {predicted} for "
            f"{self.agree:.0%}"
        ]


def summarize(rows: Sequence[Comparison], sides: Sides = FORWARD_SIDES) -> LengthSummary:
    rows = [r for r in rows if r.candidates]
    if not rows:
        raise RescorerError(f"no {sides.given} phrase to summarize")
    n = len(rows)
    tops = [(r.by_table()[0], r.by_rnn()[0]) for r in rows]
    every = [c.length for r in rows for c in r.candidates]
    return LengthSummary(
        phrases=n,
        table_top=sum(t.length for t, _ in tops) / n,
        rnn_top=sum(q.length for _, q in tops) / n,
        all_candidates=sum(every) / len(every),
        agree=sum(t.phrase == q.phrase for t, q in tops) / n,
        sides=sides,
    )


def format_text(
    rows: Sequence[Comparison], top: int = TOP, sides: Sides = FORWARD_SIDES
) -> list[str]:
    out: list[str] = []
    for row in rows:
        info = row.info
        about = (
            f"{row.group}; {sides.given} count {info.count:g}; {info.candidates} {sides.predicted}s"
        )
        out.append(f"{info.phrase}   [{about}]")
        table, rnn = row.by_table()[:top], row.by_rnn()[:top]
        for i in range(max(len(table), len(rnn))):
            left = f"{table[i].phrase} ({table[i].table:.3g})" if i < len(table) else ""
            right = f"{rnn[i].phrase} ({rnn[i].rnn:.2f})" if i < len(rnn) else ""
            out.append(f"  {i + 1}. table: {left:<45}  RNN: {right}")
        out.append("")
    return out


def _md(text: str) -> str:
    return text.replace("|", "\\|")


def format_markdown(
    rows: Sequence[Comparison], top: int = TOP, sides: Sides = FORWARD_SIDES
) -> list[str]:
    p = _md(sides.probability)
    out = [
        f"| {sides.given} | count | table: top {p} | RNN: top log {p} |",
        "|---|---:|---|---|",
    ]
    for row in rows:
        table, rnn = row.by_table()[:top], row.by_rnn()[:top]
        left = "<br>".join(f"[{_md(c.phrase)}] {c.table:.3g}" for c in table)
        right = "<br>".join(f"[{_md(c.phrase)}] {c.rnn:.2f}" for c in rnn)
        given = _md(row.info.phrase)
        out.append(f"| {given} ({row.group}) | {row.info.count:g} | {left} | {right} |")
    return out


PairScorer = Callable[[list[tuple[str, str]]], Sequence[float]]


def compare_table(
    path: str,
    score: PairScorer,
    *,
    phrases: Sequence[str] = (),
    frequent: int = 5,
    rare: int = 5,
    band: float = 0.1,
    min_words: int = 4,
    min_candidates: int = TOP,
    summary_phrases: int = 1000,
    seed: int = 1,
    column: int | None = None,
    stages: Stages | None = None,
    sides: Sides = FORWARD_SIDES,
) -> tuple[list[Comparison], LengthSummary | None]:
    """Table 2 for ``phrases`` (when given) or a seeded random choice of frequent and rare long
    given phrases, and the length summary over ``summary_phrases`` random long ones (0: none).
    ``score`` maps pairs in the model's order, (given, candidate), to the RNN's ln p. Each pass
    over the table is a stage of ``stages``."""
    chosen: list[tuple[GivenInfo, str]]
    pool: list[GivenInfo] = []
    if phrases:
        chosen = [(GivenInfo(p, 0.0, 0), "given") for p in phrases]
    else:
        pool = long_phrases(path, min_words, min_candidates, stages, sides)
        if not pool:
            raise RescorerError(
                f"{path}: no {sides.given} phrase of >= {min_words} words with >= "
                f"{min_candidates} {sides.predicted}s"
            )
        chosen = choose_phrases(pool, frequent, rare, band, seed)
    if summary_phrases:
        if not pool:
            pool = long_phrases(path, min_words, min_candidates, stages, sides)
        rng = random.Random(seed + 1)
        summary_pool = rng.sample(pool, min(summary_phrases, len(pool))) if pool else []
    else:
        summary_pool = []
    wanted = {info.phrase for info, _ in chosen} | {info.phrase for info in summary_pool}
    candidates = collect_candidates(path, wanted, column, stages, sides)
    if phrases:
        missing = [p for p in phrases if p not in candidates]
        if missing:
            raise RescorerError(f"{path}: no such {sides.given} phrase: {missing[0]!r}")
        chosen = [
            (GivenInfo(p, candidates[p][0], len(candidates[p][1])), group)
            for (_, group), p in zip(chosen, phrases, strict=True)
        ]
    rows = [Comparison(info, group, candidates[info.phrase][1]) for info, group in chosen]
    summary_rows = [
        Comparison(info, "summary", candidates[info.phrase][1]) for info in summary_pool
    ]
    every = rows + summary_rows
    pairs = [(row.info.phrase, c.phrase) for row in every for c in row.candidates]
    logps = iter(score(pairs))
    for row in every:
        for cand in row.candidates:
            cand.rnn = float(next(logps))
    return rows, (summarize(summary_rows, sides) if summary_rows else None)
