"""Phrase-table filters, as Moses' tools do them, in one streaming pass (no torch here).

* ``--input``: keep a pair iff its source phrase is an n-gram (n <= 10) of an input line, an
  exact string match (scripts/training/filter-model-given-input.pl, docs/moses-formats.md §3.1).
* ``--min-score COL:TH``: drop a pair whose raw column COL (0-based) is below TH
  (scripts/training/threshold-filter.perl, ``-MinScore``; §3.2).
* ``--top-k K``: per source phrase keep the K pairs with the best combined score (the
  decoder's ``table-limit``, §3.4; see rescorer.moses.combine). Moses sorts with an unstable
  ``nth_element``; here ties keep file order.

The filters apply in that order (the decoder's table-limit sees what filtering kept). Lines keep
their order and bytes; only whole lines are dropped.
"""

from __future__ import annotations

import contextlib
import heapq
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TextIO

from rescorer.constants import FIELD_SEP
from rescorer.errors import InputError, RescorerError
from rescorer.io.table import parse_number
from rescorer.moses.combine import Combiner, WeightSpec, peek
from rescorer.moses.ini import MosesIni, pick_table_feature, read_ini, same_file
from rescorer.moses.ini_rewrite import with_table_path

if TYPE_CHECKING:
    from rescorer.io.table import PhraseEntry
    from rescorer.moses.ini import FeatureLine

MAX_NGRAM = 10  # filter-model-given-input.pl's $MAX_LENGTH


@dataclass(frozen=True, slots=True)
class MinScore:
    column: int  # 0-based, as threshold-filter.perl counts
    threshold: float


def parse_min_score(text: str) -> tuple[MinScore, ...]:
    """``COL:TH`` or Moses' ``COL:TH,COL:TH,...``."""
    specs = []
    for part in text.split(","):
        col, sep, threshold = part.partition(":")
        try:
            value = parse_number(threshold)
            if not sep or not (col.isascii() and col.isdigit()) or not math.isfinite(value):
                raise ValueError
            specs.append(MinScore(int(col), value))
        except ValueError:
            raise RescorerError(
                f"--min-score {text!r}: expected COL:THRESHOLD, e.g. 2:0.0001 (COL counts from 0)"
            ) from None
    return tuple(specs)


def split_input_words(line: str) -> list[str]:
    """Words of an input line as filter-model-given-input.pl takes them: runs of spaces."""
    return [word for word in line.split(" ") if word]


def input_ngrams(
    path: str, *, max_length: int = MAX_NGRAM, tokenize: Callable[[str], str] | None = None
) -> set[str]:
    """Every n-gram (1 <= n <= max_length) of every line of ``path``, words joined by a space."""
    from rescorer.io.inputs import open_text

    ngrams: set[str] = set()
    with open_text(path) as lines:
        for line in lines:
            words = split_input_words(tokenize(line) if tokenize else line)
            for start in range(len(words)):
                for end in range(start + 1, min(start + max_length, len(words)) + 1):
                    ngrams.add(" ".join(words[start:end]))
    return ngrams


@dataclass(frozen=True)
class FilterConfig:
    """Which filters to apply (all optional; with none, the table is copied)."""

    input_path: str | None = None
    tokenize_lang: str | None = None
    lowercase: bool = False
    min_scores: tuple[MinScore, ...] = ()
    top_k: int | None = None
    progress_every: float = 0.0  # seconds between progress lines off a terminal (0: none)


@dataclass
class FilterStats:
    total: int = 0
    kept: int = 0
    dropped_by_input: int = 0
    dropped_by_min_score: int = 0
    dropped_by_top_k: int = 0

    def summary(self) -> str:
        share = 100.0 * self.kept / self.total if self.total else 0.0
        return f"kept {self.kept:,} of {self.total:,} phrase pairs ({share:.2f}%)"


class _SourceOrder:
    """Checks that source phrases come in Moses' order, so each one's pairs are contiguous.

    In ``LC_ALL=C sort`` order of whole lines, ``src + " ||| "`` strictly increases from one
    source phrase to the next (docs/moses-formats.md §1.5); Python compares str in that byte
    order. A source that came earlier would break the increase, so memory stays constant.
    """

    def __init__(self, source_name: str) -> None:
        self.source_name = source_name
        self.previous: str | None = None

    def check(self, src: str, lineno: int) -> None:
        key = src + FIELD_SEP
        if self.previous is not None and key < self.previous:
            raise InputError(
                self.source_name,
                lineno,
                f"source phrase {src!r} comes after {self.previous[: -len(FIELD_SEP)]!r}: "
                "--top-k needs each source phrase's pairs together, in Moses' order "
                "(sort the table with LC_ALL=C sort)",
            )
        self.previous = key


def _top_k_groups(
    entries: Iterable[PhraseEntry], k: int, combiner: Combiner, stats: FilterStats
) -> Iterator[PhraseEntry]:
    """Per source phrase, the k best entries by combined score, in file order."""
    order = _SourceOrder(combiner.source_name)
    group: list[PhraseEntry] = []

    def flush() -> Iterator[PhraseEntry]:
        if len(group) <= k:
            yield from group
            return
        scores = [combiner.score(entry) for entry in group]
        # best score first, ties by file position; then back to file order
        best = heapq.nsmallest(k, range(len(group)), key=lambda i: (-scores[i], i))
        stats.dropped_by_top_k += len(group) - k
        for i in sorted(best):
            yield group[i]

    for entry in entries:
        if group and entry.src != group[0].src:
            yield from flush()
            group = []
        if not group:
            order.check(entry.src, entry.lineno)
        group.append(entry)
    yield from flush()


def filter_entries(
    entries: Iterable[PhraseEntry],
    config: FilterConfig,
    stats: FilterStats,
    *,
    ngrams: set[str] | None = None,
    combiner: Combiner | None = None,
) -> Iterator[PhraseEntry]:
    """The entries that pass every filter of ``config``, in input order."""

    def prefiltered() -> Iterator[PhraseEntry]:
        for entry in entries:
            stats.total += 1
            # the script compares the source field with one trailing space removed
            src = entry.src[:-1] if entry.src.endswith(" ") else entry.src
            if ngrams is not None and src not in ngrams:
                stats.dropped_by_input += 1
                continue
            if any(entry.scores[m.column] < m.threshold for m in config.min_scores):
                stats.dropped_by_min_score += 1
                continue
            yield entry

    kept = prefiltered()
    if config.top_k is not None:
        if combiner is None:
            raise RescorerError("--top-k needs weights: --weights moses.ini or --weight")
        kept = _top_k_groups(kept, config.top_k, combiner, stats)
    for entry in kept:
        stats.kept += 1
        yield entry


def filter_table(
    table_path: str,
    out_path: str,
    config: FilterConfig,
    *,
    weights: WeightSpec | None = None,
    ini_in: str | None = None,
    ini_out: str | None = None,
    run_dir: str | None = None,
) -> FilterStats:
    """``rescorer filter``: one streaming pass from ``table_path`` to ``out_path``.

    ``weights`` rank pairs for ``--top-k`` (required then). With ``ini_out``, also writes
    ``ini_in`` (default: the weights' ini) pointing at the new table, every other path
    resolved from ``run_dir`` (default: that ini's folder) and checked before any work.
    Both outputs are opened (a temporary file beside each) and the ini written before any
    input is read, so an unwritable place or a full disk stops the run at once; either
    failing leaves neither.
    """
    weights = weights or WeightSpec()
    from rescorer.io.outputs import open_output

    if config.top_k is not None and config.top_k < 1:
        raise RescorerError(f"--top-k {config.top_k}: expected a count >= 1")
    target_ini = _ini_to_rewrite(ini_in, weights, out_path, ini_out, run_dir) if ini_out else None
    if config.input_path is None and (config.tokenize_lang or config.lowercase):
        raise RescorerError("--tokenize and --lowercase apply to --input FILE: give it")
    with contextlib.ExitStack() as outputs:  # committed table first, then the ini
        if ini_out is not None and target_ini is not None:
            ini_file = outputs.enter_context(open_output(ini_out))
            ini_file.write(with_table_path(*target_ini, out_path, written_later=True))
            ini_file.flush()  # a full disk says so now, not after the pass
        out = outputs.enter_context(open_output(out_path))
        return _filter_pass(table_path, out, config, weights)


def _filter_pass(
    table_path: str, out: TextIO, config: FilterConfig, weights: WeightSpec
) -> FilterStats:
    """The one pass: read ``table_path`` (and ``--input``), write what every filter keeps."""
    from rescorer.io.inputs import display_name
    from rescorer.io.progress import Progress
    from rescorer.io.table import read_table

    tokenize: Callable[[str], str] | None = str.lower if config.lowercase else None
    if config.tokenize_lang is not None:
        from rescorer.moses.tokenize import moses_tokenizer

        tokenize = moses_tokenizer(config.tokenize_lang, lowercase=config.lowercase)
    ngrams = input_ngrams(config.input_path, tokenize=tokenize) if config.input_path else None
    source_name = display_name(table_path)
    progress = Progress(f"rescorer filter {source_name}", "lines", every=config.progress_every)
    # closed here, not by the garbage collector: an abandoned reader's gzip thread
    # joined from a collection in another thread's start-up can deadlock
    table = read_table(table_path, progress=progress)
    try:
        first, entries = peek(table)
        combiner = None
        if first is not None:
            _check_min_score_columns(config.min_scores, len(first.scores), source_name)
            if config.top_k is not None:
                if not weights.given:
                    raise RescorerError("--top-k needs weights: --weights moses.ini or --weight")
                combiner = Combiner(weights.combiner_config(len(first.scores)), source_name)
        stats = FilterStats()
        for entry in filter_entries(entries, config, stats, ngrams=ngrams, combiner=combiner):
            out.write(entry.line())
            out.write("\n")
        return stats
    finally:
        table.close()


def _check_min_score_columns(specs: Sequence[MinScore], num_columns: int, name: str) -> None:
    for spec in specs:
        if spec.column >= num_columns:
            raise InputError(
                name,
                1,
                f"--min-score column {spec.column} does not exist: the table has "
                f"{num_columns} scores (columns 0-{num_columns - 1})",
            )


def _ini_to_rewrite(
    ini_in: str | None, weights: WeightSpec, table_path: str, ini_out: str, run_dir: str | None
) -> tuple[MosesIni, FeatureLine]:
    """The ini to point at the filtered table, and its phrase-table feature; the files of its
    other features are checked here, before any work."""
    source = read_ini(ini_in) if ini_in is not None else weights.ini
    if source is None:
        raise RescorerError("--ini-out needs --moses-ini INI (or --weights INI)")
    if table_path == "-":
        raise RescorerError("--ini-out needs the table written to a file, not stdout")
    if same_file(ini_out, source.path):
        raise RescorerError(f"--ini-out {ini_out} is {source.path} itself: write elsewhere")
    source = source.with_run_dir(run_dir)
    feature = pick_table_feature(source, weights.feature_name)
    source.check_files(skip=(feature.name,))
    return source, feature
