"""The phrase table against the RNN, per source phrase: the paper's Table 2 (docs/analyses.md).

For each chosen source phrase, its targets in the table are ranked twice: by the table's direct
phrase probability p(e|f) (score column 2 of a Moses table, counting from 0) and by the RNN's
log p(e|f). The paper chose long (more than 3 words) source phrases at random among frequent and
rare ones; here "frequent" and "rare" are the top and bottom ``band`` of long sources by the
table's source count (counts field, second number), and only sources with at least
``min_targets`` targets qualify, so that a top 3 exists. The summary the paper draws (the RNN
"prefers shorter phrases") is measured on a larger seeded random sample of long sources.

Reading the table is torch-free (:func:`long_sources`, :func:`collect_candidates`); the RNN
scores come from :func:`rescorer.score.scorer.score_pairs`.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from rescorer.errors import RescorerError
from rescorer.io.progress import Stages
from rescorer.io.table import TableReader, split_tokens

DIRECT_COLUMN = 2  # p(f|e) lex(f|e) p(e|f) lex(e|f): train-model.perl's four scores
TOP = 3


@dataclass(frozen=True)
class SourceInfo:
    src: str
    count: float  # the table's source count (0 when the table has no counts field)
    targets: int


@dataclass
class Candidate:
    tgt: str
    direct: float  # the table's p(e|f)
    rnn: float = float("nan")  # the RNN's ln p(e|f)

    @property
    def length(self) -> int:
        return len(split_tokens(self.tgt))


@dataclass
class Comparison:
    """One source phrase with its targets, ranked both ways."""

    info: SourceInfo
    group: str  # "given", "frequent", "rare" or "summary"
    candidates: list[Candidate] = field(default_factory=list)

    def by_table(self) -> list[Candidate]:
        return sorted(self.candidates, key=lambda c: -c.direct)  # ties keep file order

    def by_rnn(self) -> list[Candidate]:
        return sorted(self.candidates, key=lambda c: -c.rnn)


def long_sources(
    path: str, min_words: int, min_targets: int, stages: Stages | None = None
) -> list[SourceInfo]:
    """Every source of at least ``min_words`` words and ``min_targets`` targets, in file order."""
    found: list[SourceInfo] = []
    current: str | None = None
    count, targets = 0.0, 0

    def flush() -> None:
        if (
            current is not None
            and targets >= min_targets
            and len(split_tokens(current)) >= min_words
        ):
            found.append(SourceInfo(current, count, targets))

    with TableReader(
        path, progress=stages.reading(path, "long sources") if stages else None
    ) as reader:
        for entry in reader:
            if entry.src != current:
                flush()
                current, targets = entry.src, 0
                counts = entry.counts
                count = counts[1] if counts and len(counts) >= 2 else 0.0
            targets += 1
        flush()
    return found


def choose_sources(
    sources: Sequence[SourceInfo], frequent: int, rare: int, band: float, seed: int
) -> list[tuple[SourceInfo, str]]:
    """``frequent`` random sources among the top ``band`` by count, ``rare`` among the bottom."""
    by_count = sorted(sources, key=lambda s: (-s.count, s.src))
    k = max(1, round(band * len(by_count)))
    rng = random.Random(seed)
    top, bottom = by_count[:k], by_count[-k:]
    chosen = [(s, "frequent") for s in rng.sample(top, min(frequent, len(top)))]
    chosen += [(s, "rare") for s in rng.sample(bottom, min(rare, len(bottom)))]
    return chosen


def collect_candidates(
    path: str,
    wanted: Iterable[str],
    direct_column: int = DIRECT_COLUMN,
    stages: Stages | None = None,
) -> dict[str, tuple[float, list[Candidate]]]:
    """The source count and the targets (file order, with the table's p(e|f)) of each wanted
    source found in the table."""
    want = set(wanted)
    found: dict[str, tuple[float, list[Candidate]]] = {}
    with TableReader(
        path, progress=stages.reading(path, "their targets") if stages else None
    ) as reader:
        for entry in reader:
            if entry.src not in want:
                continue
            if direct_column >= len(entry.scores):
                raise RescorerError(
                    f"{reader.name}:{entry.lineno}: {len(entry.scores)} scores, no column "
                    f"{direct_column} for p(e|f) (--direct-column counts from 0)"
                )
            if entry.src not in found:
                counts = entry.counts
                found[entry.src] = (counts[1] if counts and len(counts) >= 2 else 0.0, [])
            found[entry.src][1].append(Candidate(entry.tgt, entry.scores[direct_column]))
    return found


@dataclass(frozen=True)
class LengthSummary:
    """Mean target length (words) of each side's top choice over ``sources`` source phrases."""

    sources: int
    table_top: float
    rnn_top: float
    all_targets: float  # mean length over every candidate, for scale
    agree: float  # share of sources whose top choices are the same target

    def lines(self) -> list[str]:
        return [
            f"over {self.sources:,} source phrases: mean words of the top target: "
            f"table {self.table_top:.2f}, RNN {self.rnn_top:.2f} "
            f"(all targets {self.all_targets:.2f}); same top target for {self.agree:.0%}"
        ]


def summarize(rows: Sequence[Comparison]) -> LengthSummary:
    rows = [r for r in rows if r.candidates]
    if not rows:
        raise RescorerError("no source phrase to summarize")
    n = len(rows)
    tops = [(r.by_table()[0], r.by_rnn()[0]) for r in rows]
    every = [c.length for r in rows for c in r.candidates]
    return LengthSummary(
        sources=n,
        table_top=sum(t.length for t, _ in tops) / n,
        rnn_top=sum(q.length for _, q in tops) / n,
        all_targets=sum(every) / len(every),
        agree=sum(t.tgt == q.tgt for t, q in tops) / n,
    )


def format_text(rows: Sequence[Comparison], top: int = TOP) -> list[str]:
    out: list[str] = []
    for row in rows:
        info = row.info
        about = f"{row.group}; source count {info.count:g}; {info.targets} targets"
        out.append(f"{info.src}   [{about}]")
        table, rnn = row.by_table()[:top], row.by_rnn()[:top]
        for i in range(max(len(table), len(rnn))):
            left = f"{table[i].tgt} ({table[i].direct:.3g})" if i < len(table) else ""
            right = f"{rnn[i].tgt} ({rnn[i].rnn:.2f})" if i < len(rnn) else ""
            out.append(f"  {i + 1}. table: {left:<45}  RNN: {right}")
        out.append("")
    return out


def _md(text: str) -> str:
    return text.replace("|", "\\|")


def format_markdown(rows: Sequence[Comparison], top: int = TOP) -> list[str]:
    out = [
        "| source | count | table: top p(e\\|f) | RNN: top log p(e\\|f) |",
        "|---|---:|---|---|",
    ]
    for row in rows:
        table, rnn = row.by_table()[:top], row.by_rnn()[:top]
        left = "<br>".join(f"[{_md(c.tgt)}] {c.direct:.3g}" for c in table)
        right = "<br>".join(f"[{_md(c.tgt)}] {c.rnn:.2f}" for c in rnn)
        out.append(f"| {_md(row.info.src)} ({row.group}) | {row.info.count:g} | {left} | {right} |")
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
    min_targets: int = TOP,
    summary_sources: int = 1000,
    seed: int = 1,
    direct_column: int = DIRECT_COLUMN,
    stages: Stages | None = None,
) -> tuple[list[Comparison], LengthSummary | None]:
    """Table 2 for ``phrases`` (when given) or a seeded random choice of frequent and rare long
    sources, and the length summary over ``summary_sources`` random long sources (0: none).
    ``score`` maps (source, target) pairs to the RNN's ln p(e|f). Each pass over the table is
    a stage of ``stages``."""
    chosen: list[tuple[SourceInfo, str]]
    pool: list[SourceInfo] = []
    if phrases:
        chosen = [(SourceInfo(p, 0.0, 0), "given") for p in phrases]
    else:
        pool = long_sources(path, min_words, min_targets, stages)
        if not pool:
            raise RescorerError(
                f"{path}: no source phrase of >= {min_words} words with >= {min_targets} targets"
            )
        chosen = choose_sources(pool, frequent, rare, band, seed)
    if summary_sources:
        if not pool:
            pool = long_sources(path, min_words, min_targets, stages)
        rng = random.Random(seed + 1)
        summary_pool = rng.sample(pool, min(summary_sources, len(pool))) if pool else []
    else:
        summary_pool = []
    wanted = {info.src for info, _ in chosen} | {info.src for info in summary_pool}
    candidates = collect_candidates(path, wanted, direct_column, stages)
    if phrases:
        missing = [p for p in phrases if p not in candidates]
        if missing:
            raise RescorerError(f"{path}: no such source phrase: {missing[0]!r}")
        chosen = [
            (SourceInfo(p, candidates[p][0], len(candidates[p][1])), group)
            for (_, group), p in zip(chosen, phrases, strict=True)
        ]
    rows = [Comparison(info, group, candidates[info.src][1]) for info, group in chosen]
    summary_rows = [Comparison(info, "summary", candidates[info.src][1]) for info in summary_pool]
    every = rows + summary_rows
    pairs = [(row.info.src, c.tgt) for row in every for c in row.candidates]
    logps = iter(score(pairs))
    for row in every:
        for cand in row.candidates:
            cand.rnn = float(next(logps))
    return rows, (summarize(summary_rows) if summary_rows else None)
