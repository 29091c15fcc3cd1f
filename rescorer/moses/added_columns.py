"""What the columns a ``rescorer score`` run appended to a phrase table are (models' columns,
then the word penalty), checked before ``rescorer moses-ini`` gives them weights: a table
scored twice, or not scored by rescorer, is refused.

The table is read through :mod:`rescorer.io.table` (the owner of its format), a shard's
manifest (TABLE.manifest.json, whose format is rescorer.job.shards') through
:mod:`rescorer.io.jsonfiles`.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass

from rescorer.errors import InputError, RescorerError

CHECK_LINES = 1000  # the lines whose added columns moses-ini looks at
# How far apart in ln two columns' values may be and still be one model's scores: a model
# scores a pair a little differently in another run (batches of other sizes, another thread
# count or device sum in another order), and a column is printed to 6 digits, so two runs'
# columns differ in the last digit here and there (0.000218863 and 0.000218862: issue 64, item
# 3). Two models' columns are further apart on some line of a thousand.
SAME_COLUMN_LN = 2e-4


def same_column(a: Sequence[float], b: Sequence[float]) -> bool:
    """Whether two columns of a table (the values of its lines, as printed) are one model's
    scores twice: on every line equal, or both probabilities whose ln are within
    SAME_COLUMN_LN. The one rule for "the same column twice": ``rescorer score`` warns by it
    of a table it scored already, ``rescorer moses-ini`` refuses such a table by it."""
    if not a or len(a) != len(b):
        return False
    for x, y in zip(a, b, strict=True):
        if x != y and not (x > 0 and y > 0 and abs(math.log(x) - math.log(y)) <= SAME_COLUMN_LN):
            return False
    return True


@dataclass(frozen=True)
class AddedColumns:
    """What the columns a score run appended are: ``models`` columns of probabilities, then
    the word penalty if ``word_penalty``; ``source`` says how moses-ini knows."""

    models: int
    word_penalty: bool
    source: str
    provenance: bool = False  # then a fill-up's provenance column (rescorer extend) last

    @property
    def count(self) -> int:
        return self.models + int(self.word_penalty) + int(self.provenance)

    def describe(self) -> str:
        what = f"{self.models} model{'s' if self.models != 1 else ''}"
        what = f"{what} + word penalty" if self.word_penalty else what
        return f"{what} + provenance" if self.provenance else what


def _is_penalty(value: float) -> bool:
    """e^k, k = 0, 1, 2, ...: the word-penalty column as rescorer score writes it."""
    return value >= 1 and abs(math.log(value) - round(math.log(value))) <= 1e-4


def _from_manifest(table_path: str) -> AddedColumns | None:
    """The columns a shard's manifest (TABLE.manifest.json) says its run added, if it has one."""
    from rescorer.io.jsonfiles import read_json_object

    path = table_path + ".manifest.json"  # rescorer.job.shards.manifest_path (torch-free here)
    if not os.path.exists(path):
        return None
    manifest = read_json_object(path, what="a shard manifest")
    if manifest.get("command", "score") != "score":  # an extend shard's: it says no columns
        return None
    try:
        hashes = manifest["model"]["sha256"]
        models = 1 if isinstance(hashes, str) else len(hashes)
        word_penalty = bool(manifest["options"]["word_penalty"])
    except (KeyError, TypeError):
        raise RescorerError(f"{path}: names no model or no word_penalty option") from None
    return AddedColumns(models, word_penalty, path)


def check_added_columns(table_path: str, old: int, num_columns: int) -> AddedColumns:
    """What the ``num_columns - old`` columns after the first ``old`` are, or a RescorerError
    saying why they are not what one rescorer score run appends (the rule of docs/moses.md):

    - with TABLE.manifest.json (a shard run's): its models and --word-penalty must add up to
      the new columns;
    - without: the counts decide: every new column is a model's unless the last one is
      e^k on every line checked (the word penalty);
    - either way, on the first CHECK_LINES lines: a word-penalty column before the last one,
      a model column with a value above 1, or two new columns equal on every line
      (:func:`same_column`) is a table scored more than once (or not a phrase table scored by
      rescorer): refused.
    """
    from rescorer.io.table import read_table

    added = num_columns - old
    columns: list[list[float]] = [[] for _ in range(added)]
    for i, entry in enumerate(read_table(table_path)):
        if i == CHECK_LINES:
            break
        if len(entry.scores) != num_columns:
            raise InputError(
                table_path, i + 1, f"{len(entry.scores)} scores, expected {num_columns} as line 1"
            )
        for column, value in zip(columns, entry.scores[old:], strict=True):
            column.append(value)
    provenance = _is_provenance(columns[-1]) if columns else False
    if provenance:  # rescorer extend --form fill-up: what score added comes before it
        columns, added = columns[:-1], added - 1
        if added == 0:
            return AddedColumns(0, False, "the provenance column's values", True)
    penalty = [len(c) > 0 and all(_is_penalty(v) for v in c) for c in columns]
    above_one = [any(v > 1 for v in c) for c in columns]
    twice = f"{table_path} was scored more than once, or is not a table rescorer score wrote"
    for j in range(added - 1):
        if penalty[j] and above_one[j]:
            raise RescorerError(
                f"{table_path}: new column {j + 1} of {added} (score {old + j + 1}) is "
                f"exp(#words outside the shortlist), as --word-penalty writes it, but not the "
                f"last: {twice}"
            )
    last_is_penalty = added > 1 and penalty[-1]  # a run adds a model's column first
    for j in range(added - int(last_is_penalty)):
        if above_one[j]:
            raise RescorerError(
                f"{table_path}: new column {j + 1} of {added} (score {old + j + 1}) has values "
                f"above 1, not a model's probability: {twice}"
            )
    for j in range(added):
        for k in range(j + 1, added):
            if same_column(columns[j], columns[k]):
                raise RescorerError(
                    f"{table_path}: new columns {j + 1} and {k + 1} are equal on the first "
                    f"{len(columns[j]):,} lines (one model twice; within {SAME_COLUMN_LN:g} "
                    f"in ln): {twice}"
                )
    stated = _from_manifest(table_path)
    if stated is not None:
        if stated.count != added:
            raise RescorerError(
                f"{table_path} has {added} new column(s) against num-features={old}, but its "
                f"manifest {stated.source} says the run added {stated.count} "
                f"({stated.describe()}): scored more than once, or the ini of another table?"
            )
        if stated.word_penalty and not last_is_penalty:
            raise RescorerError(
                f"{table_path}: its manifest says --word-penalty, but the last column is not "
                "exp(#words outside the shortlist)"
            )
        return dataclasses.replace(stated, provenance=provenance)
    return AddedColumns(
        added - int(last_is_penalty), last_is_penalty, "the column count and values", provenance
    )


PROVENANCE = (1.0, 2.718)  # exp(0) and exp(1) as combine-ptables.pl writes them


def _is_provenance(values: list[float]) -> bool:
    """A fill-up's provenance column: only 1 and 2.718, and some 2.718 (a column of 1 alone is
    told from a word penalty or a model's column by nothing; either way it gets a weight)."""
    return bool(values) and set(values) <= set(PROVENANCE) and PROVENANCE[1] in values


def last_column(table_path: str) -> list[float]:
    """The last score of each of the table's first CHECK_LINES lines."""
    from rescorer.io.table import read_table

    values = []
    for i, entry in enumerate(read_table(table_path)):
        if i == CHECK_LINES:
            break
        values.append(entry.scores[-1] if entry.scores else math.nan)
    return values


def is_fill_up(values: list[float]) -> bool:
    """A fill-up's provenance column (rescorer extend --form fill-up, combine-ptables.pl
    --mode=fillup): only 1 (the first table's pairs) and 2.718, and some 1. extend's second
    table has 2.718 on every line; a fill-up's first lines may all be the table's own."""
    return bool(values) and set(values) <= set(PROVENANCE) and PROVENANCE[0] in values


def is_constant_e(values: list[float]) -> bool:
    """2.718 on every line: extend's second table's last column (ln = 1 for each pair)."""
    return bool(values) and all(v == PROVENANCE[1] for v in values)


def count_columns(table_path: str) -> int:
    """The number of dense scores on a phrase table's first line."""
    from rescorer.io.table import read_table

    for entry in read_table(table_path):
        return len(entry.scores)
    raise RescorerError(f"{table_path}: the table is empty")
