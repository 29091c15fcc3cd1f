"""``rescorer moses-ini --second-table``: a moses.ini that decodes with a second phrase table
beside the first (``rescorer extend --form second-table``'s), as Moses' multiple translation
tables: a second ``PhraseDictionaryMemory`` feature with its own ``num-features`` and
weights, and a second decoding path in ``[mapping]`` (``0 T 0``, ``1 T 1``: each source span
may be translated by either table, each option scored by its own table's features;
docs/extend.md §4). Every other byte of the ini stays as it was but its path=, made
absolute as :mod:`rescorer.moses.ini_rewrite` makes them.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

from rescorer.errors import InputError, RescorerError
from rescorer.moses.added_columns import count_columns, is_constant_e, is_fill_up, last_column
from rescorer.moses.ini import TEXT_TABLE, MosesIni, code_part, read_ini, same_file
from rescorer.moses.ini_rewrite import _absolute_path_lines, derived_new_weight, refuse_spaces


@dataclass(frozen=True)
class SecondTable:
    text: str
    name: str  # the new feature's name
    num_features: int
    weights: tuple[float, ...]
    mapping: tuple[str, ...]  # the [mapping] lines after the rewrite
    note: str = ""  # the weights derived from the ini, and why (no --new-weight given)


def _mapping(ini: MosesIni) -> tuple[int | None, list[str]]:
    """The line number of ``[mapping]`` (None if absent) and its steps (``path T table``)."""
    header, steps, section = None, [], ""
    for lineno, line in enumerate(ini.lines, start=1):
        code = code_part(line).strip(" \t")
        if not code:
            continue
        if code.startswith("["):
            section = code[1 : code.index("]")] if "]" in code else code[1:]
            if section == "mapping":
                header = lineno
            continue
        if section == "mapping":
            steps.append(code)
    return header, steps


def start_weights(
    ini: MosesIni, num_features: int, weights: Sequence[float], cost_last: bool
) -> tuple[tuple[float, ...], str]:
    """The second table's starting weights and, when derived, why. Given (``weights``): one
    per column, or one for all. Derived (issue 59): the median magnitude of the first table's
    own weights (:func:`~rescorer.moses.ini_rewrite.derived_new_weight`, as the new column of
    a scored table gets), tuned weights of 0.0004-0.115 giving 0.0432 where a fixed 0.2 outweighed
    every tuned feature and Moses took none of the new pairs before tuning; and, with
    ``cost_last`` (extend's constant 2.718: ln = 1 for every pair of the second table), that
    magnitude negated for the last column: a cost per new pair used, as a fill-up's
    provenance weight starts (the first table preferred)."""
    if weights:
        return (tuple(weights) if len(weights) > 1 else (weights[0],) * num_features), ""
    first = ini.translation_models()[0].name
    derived, why = derived_new_weight(first, ini.weight_line(first).values)
    values = (derived,) * num_features
    note = f"new weights {derived:g} ({why}"
    if cost_last:
        values = (*values[:-1], -derived)
        note += (
            f"), {-derived:g} for the last column (2.718 on every line: ln = 1 for each pair of "
            "the second table, so a negative weight is a cost per new pair used"
        )
    return values, note + "; --new-weight to choose)"


def refuse_mismatched_weights(ini: MosesIni) -> None:
    """A feature whose [weight] line holds another count than its num-features: Moses stops
    on it ("Mismatch in number of features and number of weights"), so no ini is written."""
    for feature in ini.features:
        count = feature.num_features
        if count is None or not any(w.name == feature.name for w in ini.weight_lines):
            continue
        line = ini.weight_line(feature.name)
        if len(line.values) != count:
            raise InputError(
                ini.path,
                line.lineno,
                f"{feature.name} has {len(line.values)} weights but num-features={count}: "
                "Moses stops on it ('Mismatch in number of features and number of weights'); "
                "make them agree first",
            )


def add_second_table(
    ini: MosesIni,
    table_path: str,
    num_features: int,
    weights: Sequence[float] = (),
    cost_last: bool = False,
) -> SecondTable:
    """The ini's text with a second table (module docstring); ``cost_last``: its last column
    is extend's constant 2.718 (:func:`start_weights`)."""
    models = ini.translation_models()
    if not models:
        raise RescorerError(f"{ini.path}: no phrase table to add a second one beside")
    refuse_mismatched_weights(ini)
    refuse_spaces("--second-table", os.path.abspath(table_path))
    names = {f.name for f in ini.features}
    index = len(models)
    while f"TranslationModel{index}" in names:
        index += 1
    name = f"TranslationModel{index}"
    if len(weights) > 1 and len(weights) != num_features:
        raise RescorerError(
            f"{table_path} has {num_features} score columns, but {len(weights)} --new-weight "
            "values were given (one per column, or one for all)"
        )
    values, note = start_weights(ini, num_features, weights, cost_last)
    header, steps = _mapping(ini)
    mapping: tuple[str, ...]
    stated = steps or ["0 T 0"]  # no [mapping], or an empty one: Moses' default
    tables = sum(1 for step in stated if step.split()[1:2] == ["T"])
    paths = len({step.split()[0] for step in stated})
    if tables != len(models):
        raise RescorerError(
            f"{ini.path}: [mapping] has {tables} T step(s) for {len(models)} phrase table(s); "
            "add the second table by hand"
        )
    lines = _absolute_path_lines(ini, {})
    last = models[-1]
    limit = last.get("table-limit")
    feature = (
        f"{TEXT_TABLE} name={name} num-features={num_features} "
        f"path={os.path.abspath(table_path)} input-factor=0 output-factor=0"
        + (f" table-limit={limit}" if limit is not None else "")
    )
    lines[last.lineno] = _after(lines[last.lineno], feature)
    weight_line = max((ini.weight_line(m.name) for m in models), key=lambda w: w.lineno)
    added = f"{name}= " + " ".join(f"{v:g}" for v in values)
    lines[weight_line.lineno] = _after(lines[weight_line.lineno], added)
    step = f"{paths} T {tables}"
    if header is None:  # Moses' default is one path, 0 T 0: state it with the new one
        mapping = ("0 T 0", step)
        lines[len(ini.lines)] = _after(lines[len(ini.lines)], "[mapping]\n0 T 0\n" + step)
    elif not steps:
        mapping = ("0 T 0", step)
        lines[header] = _after(lines[header], "0 T 0\n" + step)
    else:
        mapping = (*steps, step)
        last_step = max(
            n
            for n, line in enumerate(ini.lines, start=1)
            if n > header and code_part(line).strip(" \t") == steps[-1]
        )
        lines[last_step] = _after(lines[last_step], step)
    return SecondTable(ini.text(lines), name, num_features, values, mapping, note)


def _after(line: str, added: str) -> str:
    """``line`` followed by ``added`` on a line (or lines) of its own."""
    body = line[:-1] if line.endswith("\n") else line
    return f"{body}\n{added}\n"


def write_second_table_ini(
    ini_path: str,
    table_path: str,
    out_path: str,
    *,
    weights: Sequence[float] = (),
    run_dir: str | None = None,
) -> SecondTable:
    """``rescorer moses-ini --second-table``: write ``out_path``, INI with the second table."""
    from rescorer.io.outputs import open_output
    from rescorer.io.reordering import not_a_reordering_table, sniff_table_kind

    for what, path in (("INI", ini_path), ("--second-table", table_path)):
        if same_file(out_path, path):
            raise RescorerError(f"-o {out_path} is {what} itself: write the new ini elsewhere")
    ini = read_ini(ini_path, run_dir)
    not_a_reordering_table(table_path, sniff_table_kind(table_path))
    last = last_column(table_path)
    if is_fill_up(last):
        raise RescorerError(
            f"{table_path}: a fill-up (its last column, the provenance, is 1 for the first "
            "table's pairs and 2.718 for new ones): it holds the first table's pairs too, so "
            "it replaces that table rather than going beside it: use moses-ini --phrase-table "
            "with it, or make the new pairs alone with rescorer extend --form second-table"
        )
    count = count_columns(table_path)
    added = add_second_table(ini, table_path, count, weights, cost_last=is_constant_e(last))
    with open_output(out_path) as out:
        out.write(added.text)
    return added
