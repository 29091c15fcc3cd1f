"""Moses n-best lists: read them, score hypotheses log-linearly, rerank (no torch here).

A line (moses/Manager.cpp:1604-1675, docs/moses-formats.md §4)::

    12 ||| w1 w2 ... wk  ||| LM0= -35.1 WordPenalty0= -5 TranslationModel0= -3.2 -4.1 ||| -9.23

fields split on ``|||`` and trimmed (as mert's reader does, mert/Data.cpp:209-260); in the feature
field a token ending in ``=`` starts a feature, the numbers after it are its values (sparse
features look like ``Name_feat= v``). moses-parallel.pl fills sentences that failed with one
fake entry: empty hypothesis, every feature 0, total ``0.0``; they are read like any other line.

The total in field 4 is Moses' weighted sum *including* features it does not print: the
UnknownWordPenalty (-100 per word passed through untranslated, weight 1, untuneable) is one.
``decoded_with`` recovers that hidden part as total - sum(weights * printed features) with the
weights the list was decoded with, and adds it to every new score.

The phrase pairs of each hypothesis and the feature ``score-nbest`` adds over them are
:mod:`rescorer.moses.nbest_pairs`'s.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from rescorer.errors import InputError
from rescorer.io.table import parse_number
from rescorer.moses.combine import Weights

NBEST_SEP = "|||"
EXPECTED_NBEST = "'id ||| hypothesis ||| Name= v1 v2 ... ||| total'"

Features = tuple[tuple[str, tuple[float, ...]], ...]
# rerank writes a blank line for each sentence id missing from the list (a sentence that
# failed); more than this many missing in a row is a wrong id, refused.
MAX_MISSING = 10_000


@dataclass(frozen=True, slots=True)
class NBestEntry:
    """One hypothesis of an n-best list."""

    lineno: int
    sent_id: int
    hypothesis: str  # the words, without the surrounding spaces
    features: Features  # (label without "=", values) in file order
    total: float
    fields: tuple[str, ...]  # the line split on "|||", untrimmed (to write it back)


def parse_features(text: str) -> Features | str:
    """``Name= v1 v2 Name2= v3`` as labeled values, or what is wrong with it."""
    features: list[tuple[str, tuple[float, ...]]] = []
    name: str | None = None
    values: list[float] = []
    for tok in text.split():
        if tok.endswith("="):
            if name is not None:
                features.append((name, tuple(values)))
            name, values = tok[:-1], []
            continue
        if name is None:
            return (
                f"value {tok!r} before any 'Name=' label: rescorer reads labeled n-best lists "
                "(Moses' default, -labeled-n-best-list true)"
            )
        try:
            value = parse_number(tok)
        except ValueError:
            return f"feature value {tok!r} of {name} is not a number"
        if not math.isfinite(value):
            return f"feature value {tok!r} of {name} is not finite"
        values.append(value)
    if name is not None:
        features.append((name, tuple(values)))
    return tuple(features)


def parse_nbest_line(text: str, path: str, lineno: int) -> NBestEntry:
    fields = text.split(NBEST_SEP)
    if len(fields) < 4:
        raise InputError(path, lineno, f"found {len(fields)} field(s), expected {EXPECTED_NBEST}")
    sent_id = fields[0].strip()
    if not sent_id.isdigit():
        raise InputError(path, lineno, f"sentence id {sent_id!r} is not a number")
    features = parse_features(fields[2])
    if isinstance(features, str):
        raise InputError(path, lineno, features)
    try:
        total = parse_number(fields[3].strip())
    except ValueError:
        raise InputError(
            path, lineno, f"total score {fields[3].strip()[:40]!r} is not a number"
        ) from None
    if not math.isfinite(total):
        raise InputError(path, lineno, f"total score {fields[3].strip()!r} is not finite")
    return NBestEntry(lineno, int(sent_id), fields[1].strip(" "), features, total, tuple(fields))


def read_nbest(path: str) -> Iterator[NBestEntry]:
    """Stream the entries of an n-best list (plain or gzip, ``-`` for stdin)."""
    from rescorer.io.inputs import display_name, open_text

    name = display_name(path)
    with open_text(path) as lines:
        for lineno, line in enumerate(lines, start=1):
            yield parse_nbest_line(line, name, lineno)


def read_feature_lines(path: str) -> Iterator[tuple[int, Features]]:
    """An extra-feature file: one ``Name= v ...`` line per n-best line."""
    from rescorer.io.inputs import display_name, open_text

    name = display_name(path)
    with open_text(path) as lines:
        for lineno, line in enumerate(lines, start=1):
            features = parse_features(line)
            if isinstance(features, str):
                raise InputError(name, lineno, features)
            yield lineno, features


def weighted_sum(
    features: Features, weights: Weights, path: str, lineno: int, *, unknown_zero: bool = False
) -> float:
    """sum(weight * value) over labeled features; a sparse feature without weight counts 0, and
    with ``unknown_zero`` so does any feature without weight (one added after decoding, e.g. by
    score-nbest, had weight 0 in the decoder)."""
    total = 0.0
    for name, values in features:
        feature_weights = weights.get(name)
        if feature_weights is None:
            if "_" in name or unknown_zero:  # sparse, like mert: no weight, no say
                continue
            raise InputError(path, lineno, f"no weight for {name}: give --weight {name}=...")
        if len(feature_weights) != len(values):
            raise InputError(
                path,
                lineno,
                f"{name} has {len(values)} values but {len(feature_weights)} weights",
            )
        total += sum(w * v for w, v in zip(feature_weights, values, strict=True))
    return total


@dataclass(frozen=True, slots=True)
class Scored:
    entry: NBestEntry
    extra: Features
    score: float


def group_sentences(entries: Iterable[Scored], path: str) -> Iterator[list[Scored]]:
    """Consecutive hypotheses of one sentence; ids must increase from group to group."""
    group: list[Scored] = []
    for item in entries:
        if group and item.entry.sent_id != group[0].entry.sent_id:
            if item.entry.sent_id < group[0].entry.sent_id:
                raise InputError(
                    path,
                    item.entry.lineno,
                    f"sentence {item.entry.sent_id} after sentence {group[0].entry.sent_id}: "
                    "expected each sentence's hypotheses together, ids increasing",
                )
            yield group
            group = []
        group.append(item)
    if group:
        yield group


@dataclass(frozen=True)
class RerankConfig:
    weights: Weights
    decoded_with: Weights | None = None  # adds the unprinted part of Moses' total
    feature_files: tuple[str, ...] = ()
    nbest_out: bool = False  # write the re-sorted list instead of the 1-best


def score_entries(
    entries: Iterable[NBestEntry], config: RerankConfig, path: str
) -> Iterator[Scored]:
    """Each hypothesis with its extra features and its new score."""
    extras = [read_feature_lines(f) for f in config.feature_files]
    for entry in entries:
        extra: Features = ()
        for feature_path, lines in zip(config.feature_files, extras, strict=True):
            got = next(lines, None)
            if got is None:
                raise InputError(
                    feature_path, None, f"has fewer lines than {path} (line {entry.lineno})"
                )
            extra += got[1]
        score = weighted_sum(entry.features + extra, config.weights, path, entry.lineno)
        if config.decoded_with is not None:
            printed = weighted_sum(
                entry.features, config.decoded_with, path, entry.lineno, unknown_zero=True
            )
            score += entry.total - printed
        if not math.isfinite(score):  # weights so large that the sum overflows
            raise InputError(
                path, entry.lineno, f"the new total is {score}: are the weights right?"
            )
        yield Scored(entry, extra, score)
    for feature_path, lines in zip(config.feature_files, extras, strict=True):
        left = next(lines, None)
        if left is not None:
            raise InputError(feature_path, left[0], f"has more lines than {path}")


def one_best(entry: NBestEntry) -> str:
    """The hypothesis as Moses' 1-best output writes it: each word followed by one space (its
    OutputSurface, which the n-best line puts between " ||| " separators: Manager.cpp
    1619-1624), so field 2 less the separators' spaces: ``"émis par "`` of ``" émis par  "``,
    ``""`` of the empty hypothesis ``"  "``. A list not written by Moses keeps its bytes too."""
    text = entry.fields[1]
    text = text[1:] if text.startswith(" ") else text
    return text[:-1] if text.endswith(" ") else text


def format_features(features: Features) -> str:
    return " ".join(f"{name}= {' '.join(f'{v:g}' for v in values)}" for name, values in features)


def nbest_line(item: Scored) -> str:
    """The entry's line with the extra features appended and the new total (8 digits)."""
    fields = list(item.entry.fields)
    if item.extra:
        fields[2] = f"{fields[2].rstrip(' ')} {format_features(item.extra)} "
    fields[3] = f" {item.score:.8g}" + (" " if fields[3].endswith(" ") else "")
    return NBEST_SEP.join(fields)


@dataclass
class RerankStats:
    sentences: int = 0
    hypotheses: int = 0
    changed: int = 0  # sentences whose 1-best changed


def rerank_nbest(nbest_path: str, out_path: str, config: RerankConfig) -> RerankStats:
    """``rescorer rerank``: the best hypothesis per sentence (or the re-sorted list)."""
    from rescorer.io.inputs import display_name
    from rescorer.io.outputs import open_output

    name = display_name(nbest_path)
    stats = RerankStats()
    next_id = 0
    with open_output(out_path) as out:
        scored = score_entries(read_nbest(nbest_path), config, name)
        for group in group_sentences(scored, name):
            ranked = sorted(group, key=lambda item: -item.score)  # stable: ties keep order
            stats.sentences += 1
            stats.hypotheses += len(group)
            stats.changed += ranked[0] is not group[0]
            if config.nbest_out:
                out.writelines(nbest_line(item) + "\n" for item in ranked)
                continue
            sent_id = group[0].entry.sent_id
            if sent_id - next_id > MAX_MISSING:  # a wrong id, not a few failed sentences
                raise InputError(
                    name,
                    group[0].entry.lineno,
                    f"sentence id {sent_id} after sentence {next_id - 1}: more than "
                    f"{MAX_MISSING:,} sentences without hypotheses between them (each would be "
                    "a blank line); expected the ids Moses gives, 0, 1, 2, ...",
                )
            out.write("\n" * (sent_id - next_id))  # sentences without hypotheses
            out.write(one_best(ranked[0].entry) + "\n")
            next_id = sent_id + 1
    return stats
