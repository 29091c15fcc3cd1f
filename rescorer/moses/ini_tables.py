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

from rescorer.errors import RescorerError
from rescorer.moses.added_columns import count_columns
from rescorer.moses.ini import TEXT_TABLE, MosesIni, code_part, read_ini, same_file
from rescorer.moses.ini_rewrite import DEFAULT_NEW_WEIGHT, _absolute_path_lines


@dataclass(frozen=True)
class SecondTable:
    text: str
    name: str  # the new feature's name
    num_features: int
    weights: tuple[float, ...]
    mapping: tuple[str, ...]  # the [mapping] lines after the rewrite


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


def add_second_table(
    ini: MosesIni, table_path: str, num_features: int, weights: Sequence[float] = ()
) -> SecondTable:
    """The ini's text with a second table (module docstring)."""
    models = ini.translation_models()
    if not models:
        raise RescorerError(f"{ini.path}: no phrase table to add a second one beside")
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
    values = (
        tuple(weights)
        if len(weights) == num_features
        else ((weights[0] if weights else DEFAULT_NEW_WEIGHT),) * num_features
    )
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
    return SecondTable(ini.text(lines), name, num_features, values, mapping)


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
    added = add_second_table(ini, table_path, count_columns(table_path), weights)
    with open_output(out_path) as out:
        out.write(added.text)
    return added
