"""System (f): which of the model's own phrase pairs the decoder used in its 1-best.

``rescorer extend --form fill-up`` marks every pair it adds with 2.718 in the table's last
column (the provenance; the table's own pairs have 1). That is a feature value, so the 1-best
does not say which pairs it took; the decoder's ``-report-segmentation`` does: after each target
phrase it writes the source span the phrase translates, ``|start-end|`` (word positions,
0-based, both ends included; Moses' ``OutputSurface`` and ``OutputAlignment``). A phrase of the
1-best whose (source words of the span, target phrase) is one of the generated pairs is a new
pair used. Generated targets never equal the table's own targets for the same source (extend
drops those), so the match is unambiguous.

Examples compare (f) with its second baseline, (b) with the same model, sentence by sentence
(sacreBLEU's sentence BLEU), on the sentences whose (f) 1-best uses a new pair.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rescorer.constants import FIELD_SEP
from rescorer.errors import RescorerError
from rescorer.io.inputs import open_text

MARK = re.compile(r"\|(\d+)-(\d+)\|")  # -report-segmentation's source span after a phrase
GENERATED = 2.718  # the provenance of a pair extend added (exp(1); the table's own: 1)
EXAMPLES = 3  # of each kind: helped, hurt

Pair = tuple[str, str]  # (source phrase, target phrase), tokens joined by single spaces


@dataclass(frozen=True)
class Segment:
    """One phrase of a segmented 1-best: the target words and the source span they translate."""

    start: int  # first source word, 0-based
    end: int  # last source word, included
    target: str


def read_segmentation(line: str, *, where: str = "") -> list[Segment]:
    """The phrases of one line of ``moses -report-segmentation`` output, in output order."""
    segments: list[Segment] = []
    words: list[str] = []
    for token in line.split():
        mark = MARK.fullmatch(token)
        if mark is None:
            words.append(token)
            continue
        start, end = int(mark.group(1)), int(mark.group(2))
        if end < start:
            raise RescorerError(f"{where}: source span {token} ends before it starts")
        segments.append(Segment(start, end, " ".join(words)))
        words = []
    if words:
        raise RescorerError(
            f"{where}: target words {' '.join(words)!r} without a source span after them "
            "(expected moses -report-segmentation output)"
        )
    return segments


def strip_segmentation(line: str) -> str:
    """The 1-best as Moses writes it without -report-segmentation: each word and a space."""
    return "".join(f"{token} " for token in line.split() if not MARK.fullmatch(token))


def read_generated_pairs(table: Path) -> set[Pair]:
    """The (source, target) pairs of a fill-up table whose provenance (last score) is 2.718."""
    pairs: set[Pair] = set()
    with open_text(str(table)) as lines:
        for lineno, line in enumerate(lines, 1):
            fields = line.split(FIELD_SEP)
            scores = fields[2].split() if len(fields) > 2 else []
            if not scores:
                raise RescorerError(f"{table}:{lineno}: no scores (expected a fill-up table)")
            if math.isclose(float(scores[-1]), GENERATED, rel_tol=1e-6):
                pairs.add((fields[0].strip(), fields[1].strip()))
    return pairs


def write_pairs(path: Path, pairs: Iterable[Pair]) -> None:
    """``source ||| target`` lines, in byte order."""
    lines = sorted(f"{src}{FIELD_SEP}{tgt}\n" for src, tgt in pairs)
    path.write_bytes("".join(lines).encode("utf-8"))


def read_pairs(path: Path) -> set[Pair]:
    pairs: set[Pair] = set()
    with open_text(str(path)) as lines:
        for line in lines:
            src, tgt = line.split(FIELD_SEP)
            pairs.add((src, tgt))
    return pairs


def new_pairs_used(source: str, segments: Sequence[Segment], generated: set[Pair]) -> list[Pair]:
    """The generated pairs among a 1-best's phrases, in output order (repeats kept)."""
    words = source.split()
    used = []
    for seg in segments:
        if seg.end >= len(words):
            raise RescorerError(
                f"source span |{seg.start}-{seg.end}| past the {len(words)} words of {source!r}"
            )
        pair = (" ".join(words[seg.start : seg.end + 1]), seg.target)
        if pair in generated:
            used.append(pair)
    return used


def count_use(used: Sequence[Sequence[Pair]]) -> dict[str, int]:
    """Sentences whose 1-best uses a new pair, new pairs used (repeats counted), distinct ones."""
    return {
        "sentences": sum(1 for u in used if u),
        "pairs": sum(len(u) for u in used),
        "distinct": len({p for u in used for p in u}),
    }


def sentence_bleu(hyps: Sequence[str], refs: Sequence[str]) -> list[float]:
    """sacreBLEU's sentence BLEU (0-100; ``--tokenize none``, effective order: a short sentence
    is not scored 0 for having no 4-gram) of each hypothesis against its reference."""
    from sacrebleu.metrics import BLEU

    metric = BLEU(tokenize="none", effective_order=True)
    return [float(metric.sentence_score(h, [r]).score) for h, r in zip(hyps, refs, strict=True)]


def examples(
    sources: Sequence[str],
    refs: Sequence[str],
    hyps: Sequence[str],
    versus_hyps: Sequence[str],
    used: Sequence[Sequence[Pair]],
) -> dict[str, list[dict[str, Any]]]:
    """Up to EXAMPLES sentences that use a new pair where (f) beat the other system at sentence
    BLEU (largest gain first) and as many where it lost (largest loss first); ties by order."""
    ours, theirs = sentence_bleu(hyps, refs), sentence_bleu(versus_hyps, refs)
    gains = [(ours[i] - theirs[i], i) for i in range(len(sources)) if used[i]]

    def example(i: int) -> dict[str, Any]:
        return {
            "sentence": i + 1,
            "source": sources[i],
            "reference": refs[i],
            "hypothesis": hyps[i].strip(),
            "versus_hypothesis": versus_hyps[i].strip(),
            "bleu": ours[i],
            "versus_bleu": theirs[i],
            "new_pairs": [list(p) for p in dict.fromkeys(used[i])],  # first use order
        }

    helped = sorted((-gain, i) for gain, i in gains if gain > 0)[:EXAMPLES]
    hurt = sorted((gain, i) for gain, i in gains if gain < 0)[:EXAMPLES]
    return {"helped": [example(i) for _, i in helped], "hurt": [example(i) for _, i in hurt]}
