"""The ``-m`` models of one ``rescorer score`` run, as :mod:`~rescorer.score.pipeline` uses them:
each model's warnings and verdict from the pairs read, before they are scored (has it learned,
does the table fit its shortlists), its scores collected into the chunk's columns in line
order (an inverse model's pairs come grouped by target phrase), and the error for a score that
is not finite.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from rescorer.constants import (
    CONFIG_FILE,
    FORWARD,
    PROVENANCE_FILE,
    SRC_VOCAB_FILE,
    TGT_VOCAB_FILE,
)
from rescorer.errors import RescorerError
from rescorer.io.chunks import iter_chunks
from rescorer.io.inputs import display_name, open_binary
from rescorer.io.jsonfiles import read_json_object
from rescorer.io.table import format_prob
from rescorer.job.stream import first_num_scores
from rescorer.moses.added_columns import same_column
from rescorer.score.pairs import pairs_inside_shortlists
from rescorer.score.stages import ModelSides, ParsedChunk, init_worker, parse_chunk
from rescorer.verdict import (
    COVERAGE_MIN_PAIRS,
    CoverageVerdict,
    coverage_verdict,
    coverage_warning,
    training_coverage,
    unlearned_warning,
)
from rescorer.vocab import Vocab


def coverage_check(
    provenance: dict[str, Any], folder: str, ignore_coverage: bool = False
) -> Callable[[int, int], bool]:
    """The model's warnings and its coverage verdict, heard of the pairs read so far before
    they are scored: once :data:`~rescorer.verdict.COVERAGE_MIN_PAIRS` pairs are in, a table
    far outside the shortlists of the model's own table is refused (a RescorerError) unless
    ``ignore_coverage``; one clearly below it is warned about, once (then it returns True)."""
    unlearned = unlearned_warning(provenance, folder)
    decided = False

    def coverage(inside: int, pairs: int) -> bool:
        nonlocal unlearned, decided
        if unlearned:
            print(f"rescorer score: {unlearned}", file=sys.stderr)
            unlearned = None
        verdict = coverage_verdict(provenance, inside, pairs)
        if verdict is not None and not decided:
            decided = True
            if verdict.foreign and not ignore_coverage:
                raise _foreign(verdict, folder, pairs)
        message = coverage_warning(provenance, folder, inside, pairs)
        if message:
            print(f"rescorer score: {message}", file=sys.stderr)
        return message is not None

    return coverage


def _foreign(verdict: CoverageVerdict, folder: str, pairs: int) -> RescorerError:
    return RescorerError(
        verdict.describe(folder, f"the first {pairs:,} pairs")
        + " Refused before scoring them; --ignore-coverage scores it anyway"
    )


def refuse_foreign_table(table: str, model_dirs: Sequence[str], config: Any) -> None:
    """The coverage verdict of :func:`coverage_check` on a fresh run, taken before the models
    are loaded and compiled (issue 59: a compile of minutes came before the refusal): the
    first chunks of ``config.chunk_bytes``, as the run cuts them, until they hold
    COVERAGE_MIN_PAIRS pairs, against each model's shortlists (read from its folder). Refuses
    (RescorerError) the table the run would refuse at that chunk, with its words; anything it
    cannot read here (a pipe, a --resume or --shard run, a bad line, a broken model folder) is
    left to the run, which checks the same as it goes."""
    if config.ignore_coverage or config.resume or config.shard or not os.path.isfile(table):
        return
    try:
        sides, provenances = zip(*map(_sides_of, model_dirs), strict=True)
    except (RescorerError, OSError):
        return
    if all(training_coverage(p) is None for p in provenances):
        return
    init_worker(list(sides))
    read, inside = 0, [0] * len(model_dirs)
    with open_binary(table) as stream:
        num_scores = first_num_scores(table)
        for chunk in iter_chunks(stream, config.chunk_bytes, name=table):
            parsed = parse_chunk(chunk, num_scores, display_name(table))
            if parsed.bad and config.skip_bad_lines is None:
                return  # the run names the line
            read += parsed.pairs.num_pairs
            for k, pairs in enumerate(parsed.by_model):
                inside[k] += pairs_inside_shortlists(pairs)
            if read >= COVERAGE_MIN_PAIRS:
                break
    for k, (provenance, folder) in enumerate(zip(provenances, model_dirs, strict=True)):
        verdict = coverage_verdict(provenance, inside[k], read)
        if verdict is not None and verdict.foreign:
            raise _foreign(verdict, folder, read)


def _sides_of(folder: str) -> tuple[ModelSides, dict[str, Any]]:
    """A model folder's shortlists and direction, and its provenance, without torch."""
    config = read_json_object(os.path.join(folder, CONFIG_FILE), what="a model config")
    path = os.path.join(folder, PROVENANCE_FILE)
    provenance = read_json_object(path, what="a model's provenance") if os.path.isfile(path) else {}
    src, tgt = (Vocab.load(os.path.join(folder, f)) for f in (SRC_VOCAB_FILE, TGT_VOCAB_FILE))
    direction = config.get("direction", FORWARD)
    return ModelSides(src, tgt, direction if isinstance(direction, str) else FORWARD), provenance


def collect_columns(pending: Sequence[Any], parsed: ParsedChunk) -> np.ndarray:
    """log p (N,) float64 of the chunk's pairs with one model, (N,M) with M, in line order,
    from each model's submitted scoring (``Scorer.submit``'s results, waited for here)."""
    columns = []
    for scores, order in zip(pending, parsed.orders, strict=True):
        logp = scores.result()  # (N,) in the model's pair order
        if order is not None:  # an inverse model's pairs, grouped by target: back to the lines
            in_lines = np.empty_like(logp)
            in_lines[order] = logp
            logp = in_lines
        columns.append(logp)
    return columns[0] if len(columns) == 1 else np.stack(columns, axis=1)


MOSES_SCORES = 4  # the columns train-model.perl writes; a scored table has more
ALREADY_LINES = 1000  # the first chunk's lines looked at


def already_scored(name: str, lines: Sequence[bytes], logp: np.ndarray) -> str | None:
    """A warning when the table being scored looks like score's own output (moses-ini refuses
    a table scored twice, after the whole run): one of its columns beyond Moses' four is this
    run's probabilities as it prints them, by moses-ini's own rule (``same_column``, on every
    line looked at), or its last column is exp(k) on every line, as --word-penalty writes it.
    ``lines`` are the first chunk's good lines, ``logp`` (N,) or (N,M) their new columns."""
    rows = []
    for line in lines[:ALREADY_LINES]:
        fields = line.split(b" ||| ")
        try:
            rows.append([float(x) for x in fields[2].split()])
        except (IndexError, ValueError):
            return None
    if not rows or len(rows[0]) <= MOSES_SCORES or any(len(r) != len(rows[0]) for r in rows):
        return None
    scores = np.array(rows)  # (n, S)
    new = logp.reshape(len(logp), -1)[: len(rows)]  # (n, M)
    written = [[float(format_prob(x)) for x in new[:, k].tolist()] for k in range(new.shape[1])]
    for j in range(MOSES_SCORES, scores.shape[1]):
        for k, column in enumerate(written):
            if same_column(scores[:, j].tolist(), column):
                return (
                    f"warning: {name}: score {j + 1} equals this run's column "
                    f"{k + 1} on its first {len(rows):,} lines: it was scored already, by this "
                    "model (moses-ini refuses a table scored twice); score the original table"
                )
    # a model's column, then the word penalty: 6 or more (Moses' old 5th column, its phrase
    # penalty, is 2.718 = e^1 on every line)
    with np.errstate(divide="ignore", invalid="ignore"):
        last = np.log(scores[:, -1])  # (n,): -inf for 0, nan for < 0
    if (
        scores.shape[1] >= MOSES_SCORES + 2
        and np.all(last >= 0)
        and np.all(np.abs(last - np.round(last)) <= 1e-4)
    ):
        return (
            f"warning: {name}: has {scores.shape[1]} scores, the last exp(k) on its first "
            f"{len(rows):,} lines, as score --word-penalty writes it: was it scored already? "
            "(moses-ini refuses a table scored twice); score the original table"
        )
    return None


def one_or_list(values: list[Any]) -> Any:
    return values[0] if len(values) == 1 else values


def non_finite_error(
    logp: np.ndarray, parsed: ParsedChunk, name: str, model_dirs: Sequence[str], precision: str
) -> RescorerError:
    """The error for the first pair whose score is nan or inf: the model, the line, the pair.
    ``logp`` is (N,) with one model, (N,M) with M."""
    table = logp.reshape(len(logp), -1)  # (N,M)
    i, k = (int(x) for x in np.argwhere(~np.isfinite(table))[0])
    model_dir = model_dirs[k]
    lineno = parsed.first_line + i
    for bad_line in sorted(b[0] for b in parsed.bad):  # good line i sits after these
        if bad_line <= lineno:
            lineno += 1
    line = parsed.lines[i][:200].decode("utf-8", "replace")
    return RescorerError(
        f"{model_dir}: the model scores {name}:{lineno} as {table[i, k]} in {precision}, not a "
        f"finite log probability (weights that overflow?); the line: {line}"
    )
