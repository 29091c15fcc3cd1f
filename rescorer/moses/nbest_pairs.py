"""The phrase pairs of Moses n-best hypotheses and ``rescorer score-nbest``'s feature over them
(no torch here).

Moses writes a hypothesis' phrase segmentation in a 5th field with
``-include-segmentation-in-n-best`` (``0-1=0-2 2=3 ...``: source and target word ranges,
inclusive) or as ``|i-j|`` markers after each target phrase with ``-report-segmentation``
(docs/moses-formats.md §4). :func:`phrase_segments` reads either; :func:`add_pair_feature` adds
one feature per model to each hypothesis: the sum over its phrase pairs of ln p, floored as
Moses floors a table column. Reading the lists themselves is :mod:`rescorer.moses.nbest`'s.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from rescorer.constants import LOGP_FLOOR
from rescorer.errors import InputError, RescorerError
from rescorer.io.progress import Progress
from rescorer.io.table import MAX_LINE_BYTES, MAX_PHRASE_TOKENS
from rescorer.moses.nbest import NBEST_SEP, NBestEntry, read_nbest

SEGMENT = re.compile(r"(\d+)(?:-(\d+))?=(\d+)(?:-(\d+))?")
MARKER = re.compile(r"\|(\d+)-(\d+)\|")
NO_SEGMENTATION = (
    "no phrase segmentation: decode with -include-segmentation-in-n-best (a 5th field "
    "'0-1=0-2 2=3 ...') or -report-segmentation (markers '|0-1|' after each phrase); word "
    "alignments (-print-alignment-info-in-n-best) do not give the phrases"
)


def _span(first: str, last: str | None) -> tuple[int, int]:
    return int(first), int(last if last is not None else first)


def phrase_segments(
    entry: NBestEntry, source: Sequence[str], path: str
) -> tuple[list[tuple[str, str]], str]:
    """The (source phrase, target phrase) pairs a hypothesis was built from, in target order,
    and the hypothesis words without segmentation markers.

    Read from the ``-include-segmentation-in-n-best`` field (``src=tgt`` word ranges, inclusive)
    or from ``-report-segmentation`` markers (``|i-j|`` after each target phrase: its source
    range); ``source`` is the input sentence's words (Moses-escaped, as Moses read them)."""
    words = entry.hypothesis.split()
    has_markers = any(MARKER.fullmatch(w) for w in words)
    spans: list[tuple[tuple[int, int], tuple[int, int]]] = []
    if has_markers:
        plain: list[str] = []
        start = 0
        for word in words:
            mark = MARKER.fullmatch(word)
            if mark is None:
                plain.append(word)
                continue
            spans.append((_span(mark[1], mark[2]), (start, len(plain) - 1)))
            start = len(plain)
        if start != len(plain):
            raise InputError(path, entry.lineno, "words after the last '|i-j|' marker")
        words = plain
    else:
        field = next((f for f in entry.fields[4:] if f.strip() and "=" in f.split()[0]), None)
        if field is None:
            raise InputError(path, entry.lineno, NO_SEGMENTATION)
        for token in field.split():
            seg = SEGMENT.fullmatch(token)
            if seg is None:
                raise InputError(
                    path, entry.lineno, f"segment {token!r}: expected 'i-j=k-l', 'i=k' and so on"
                )
            spans.append((_span(seg[1], seg[2]), _span(seg[3], seg[4])))
        spans.sort(key=lambda s: s[1])
    pairs = []
    for (s0, s1), (t0, t1) in spans:
        for side, first, last in (("source", s0, s1), ("target", t0, t1)):
            if last - first + 1 > MAX_PHRASE_TOKENS:  # score's limit (docs/score.md, Limits)
                raise InputError(
                    path,
                    entry.lineno,
                    f"a {side} phrase of {last - first + 1:,} words ({first}-{last}), expected "
                    f"at most {MAX_PHRASE_TOKENS} (docs/score.md, Limits)",
                )
        if not (0 <= s0 <= s1 < len(source)):
            raise InputError(
                path,
                entry.lineno,
                f"source words {s0}-{s1} outside the input sentence {entry.sent_id} "
                f"({len(source)} words): is --input the file that was decoded?",
            )
        if not (0 <= t0 <= t1 + 1 <= len(words)):
            raise InputError(path, entry.lineno, f"target words {t0}-{t1} outside the hypothesis")
        pairs.append((" ".join(source[s0 : s1 + 1]), " ".join(words[t0 : t1 + 1])))
    return pairs, " ".join(words)


PairScorer = Callable[[list[tuple[str, str]]], Sequence[float]]


def _check_line_length(entry: NBestEntry, path: str) -> None:
    """An n-best line longer than MAX_LINE_BYTES is refused, as score refuses a table line."""
    chars = sum(map(len, entry.fields)) + len(NBEST_SEP) * (len(entry.fields) - 1)
    if chars * 4 <= MAX_LINE_BYTES:  # UTF-8: at most 4 bytes a character
        return
    size = len(NBEST_SEP.join(entry.fields).encode("utf-8"))
    if size > MAX_LINE_BYTES:
        raise InputError(
            path,
            entry.lineno,
            f"a line of {size:,} bytes, expected at most {MAX_LINE_BYTES:,} "
            "(docs/score.md, Limits)",
        )


@dataclass
class NBestFeatureStats:
    hypotheses: int = 0
    sentences: int = 0
    phrase_pairs: int = 0  # over all hypotheses
    scored_pairs: int = 0  # distinct pairs scored (per block of sentences)
    passed_through: int = 0  # segments of words the table has no entry for (feature 0)


def add_pair_feature(
    nbest_path: str,
    input_path: str,
    out_path: str,
    features: Sequence[tuple[str, PairScorer]],
    *,
    phrase_table: str,
    features_only: bool = False,
    block_lines: int = 20000,
    origins: Sequence[str] = (),
    progress: Progress | None = None,
) -> NBestFeatureStats:
    """``rescorer score-nbest``: each hypothesis of an n-best list gets, for each (name, score)
    of ``features`` (one per model, in order), the dense feature ``name`` = sum over its phrase
    pairs of max(ln p, -100), ``score`` giving ln p of (source, target) pairs (an inverse
    model's scorer: ln p(source | target)): what Moses adds up from a table column holding p.
    A segment that Moses passed through untranslated (a source word without an entry in
    ``phrase_table``, the table the list was decoded with: Moses' unknown-word option,
    TranslationOptionCollection's ProcessUnknownWord) takes no table score, so it adds 0, as it
    does in Moses. The n-best lines are written back with the features appended to their
    feature field (total unchanged), or with ``features_only`` as ``name= v ...`` lines for
    ``rerank --feature-file``. ``origins`` name where each feature's scores come from (its
    model folder) in the error for a score that is not finite (nan or inf: weights that
    overflow), which stops the run as it stops ``rescorer score``. ``progress`` hears of the
    hypotheses written and the share of the input sentences reached (an n-best list comes in
    sentence order)."""
    from rescorer.io.inputs import display_name, open_text
    from rescorer.io.outputs import open_output
    from rescorer.io.table import sources_among

    name_nb, name_in = display_name(nbest_path), display_name(input_path)
    with open_text(input_path) as lines:
        sentences = [line.split() for line in lines]
    # Moses makes an unknown-word option for a single source word it has no entry for
    translated = sources_among(phrase_table, {word for words in sentences for word in words})
    stats = NBestFeatureStats()
    seen_ids: set[int] = set()

    def flush(block: list[NBestEntry], out: Any) -> None:
        segmented = _segment_block(block, sentences, translated, (name_nb, name_in), stats)
        distinct = sorted({pair for pairs in segmented for pair in pairs})
        logps = _score_pairs(distinct, features, origins, block, segmented, name_nb)
        stats.scored_pairs += len(distinct)
        _write_block(block, segmented, features, logps, features_only, out)

    with open_output(out_path) as out:
        block: list[NBestEntry] = []
        for entry in read_nbest(nbest_path):
            _check_entry(entry, features, name_nb)
            stats.hypotheses += 1
            seen_ids.add(entry.sent_id)
            block.append(entry)
            if len(block) >= block_lines:
                flush(block, out)
                block = []
                if progress is not None:
                    progress.update(stats.hypotheses, (entry.sent_id + 1) / max(len(sentences), 1))
        if block:
            flush(block, out)
            if progress is not None:
                progress.update(stats.hypotheses, 1.0)
    if progress is not None:
        progress.close()
    stats.sentences = len(seen_ids)
    return stats


def _check_entry(entry: NBestEntry, features: Sequence[tuple[str, PairScorer]], name: str) -> None:
    """An n-best line score-nbest can take: not too long, without a feature of a new name."""
    _check_line_length(entry, name)
    taken = [label for label, _ in features if any(k == label for k, _ in entry.features)]
    if taken:
        raise InputError(
            name, entry.lineno, f"already has a feature {taken[0]}= (choose another --name)"
        )


def _segment_block(
    block: list[NBestEntry],
    sentences: list[list[str]],
    translated: set[str] | frozenset[str],
    names: tuple[str, str],
    stats: NBestFeatureStats,
) -> list[list[tuple[str, str]]]:
    """Per hypothesis of ``block``, its phrase pairs the models score: all but the words Moses
    passed through untranslated (not in ``translated``), which ``stats`` counts. ``names``:
    the n-best list's and the input's, for errors."""
    name_nb, name_in = names
    segmented = []
    for entry in block:
        if entry.sent_id >= len(sentences):
            raise InputError(
                name_nb,
                entry.lineno,
                f"sentence {entry.sent_id}, but {name_in} has {len(sentences)} lines",
            )
        pairs = phrase_segments(entry, sentences[entry.sent_id], name_nb)[0]
        unknown = [pair for pair in pairs if " " not in pair[0] and pair[0] not in translated]
        stats.passed_through += len(unknown)
        segmented.append([pair for pair in pairs if pair not in unknown])
        stats.phrase_pairs += len(pairs)
    return segmented


def _score_pairs(
    distinct: list[tuple[str, str]],
    features: Sequence[tuple[str, PairScorer]],
    origins: Sequence[str],
    block: list[NBestEntry],
    segmented: list[list[tuple[str, str]]],
    name_nb: str,
) -> list[dict[tuple[str, str], float]]:
    """ln p of each of the ``distinct`` pairs under each feature's scorer; a value that is not
    finite stops the run, naming the feature's origin and the first line holding the pair."""
    logps = []
    for k, (name, score) in enumerate(features):
        values = [float(v) for v in score(distinct)] if distinct else []
        bad = next((i for i, v in enumerate(values) if not math.isfinite(v)), None)
        if bad is not None:
            pair = distinct[bad]
            entry = next(e for e, ps in zip(block, segmented, strict=True) if pair in ps)
            origin = origins[k] if k < len(origins) else f"the model of {name}"
            raise RescorerError(
                f"{origin}: the model scores the phrase pair {pair[0]!r} -> {pair[1]!r} of "
                f"{name_nb}:{entry.lineno} as {values[bad]}, not a finite log probability "
                f"(weights that overflow?); {name}= would not be a number"
            )
        logps.append(dict(zip(distinct, values, strict=True)))
    return logps


def _write_block(
    block: list[NBestEntry],
    segmented: list[list[tuple[str, str]]],
    features: Sequence[tuple[str, PairScorer]],
    logps: list[dict[tuple[str, str], float]],
    features_only: bool,
    out: Any,
) -> None:
    """Each hypothesis with its features appended (or, ``features_only``, the features alone):
    per feature, the sum over its pairs of max(ln p, LOGP_FLOOR)."""
    for entry, pairs in zip(block, segmented, strict=True):
        added = " ".join(
            f"{name}= {sum(max(float(logp[pair]), LOGP_FLOOR) for pair in pairs):.8g}"
            for (name, _), logp in zip(features, logps, strict=True)
        )
        if features_only:
            out.write(f"{added}\n")
        else:
            fields = list(entry.fields)
            fields[2] = f"{fields[2].rstrip(' ')} {added} "
            out.write(NBEST_SEP.join(fields) + "\n")
