"""moses.ini rewritten: every path= made absolute, a phrase-table feature pointed at a new
table (num-features, the new columns' weights, path=), every weight taken from another ini
(:func:`with_start_weights`), and ``rescorer moses-ini`` itself (:func:`write_scored_ini`).

The format is :mod:`rescorer.moses.ini`'s: this module replaces tokens of the lines parsed
there, by its grammar, and leaves every other byte alone; every ini it writes names absolute
paths that exist (why: that module's docstring). What the new columns of a scored table are is
:mod:`rescorer.moses.added_columns`' question.
"""

from __future__ import annotations

import dataclasses
import os
import re
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from rescorer.errors import InputError, RescorerError
from rescorer.moses.added_columns import AddedColumns, check_added_columns, count_columns
from rescorer.moses.ini import (
    _TOKEN,
    COMPACT_TABLE,
    ONDISK_TABLE,
    TEXT_TABLE,
    FeatureLine,
    MosesIni,
    code_part,
    pick_table_feature,
    read_ini,
    same_file,
)

# mert-moses.pl and mert's extractor take a name with "_" for a sparse feature; a dense
# feature's name must look like this (mert-moses.pl:1517-1519, mert/Data.cpp:227).
DENSE_NAME = re.compile(r"[A-Za-z][0-9A-Za-z]*\Z")

# Tables rescorer moses-ini can point at a new table (the others have no text-table path).
REWRITABLE_TABLES = (TEXT_TABLE, COMPACT_TABLE, ONDISK_TABLE, "PhraseDictionaryScope3")
DEFAULT_NEW_WEIGHT = 0.2  # what train-model.perl gives every column; for a feature at 0


def derived_new_weight(name: str, tuned: Sequence[float]) -> tuple[float, str]:
    """A new column's starting weight, from the feature's own (tuned) weights: the median of
    their magnitudes (zeros left out), to 3 digits, and why. Decoding before re-tuning (and
    MERT, which starts from it) depends on it: a tuned en-de ini with weights 0.005-0.13 gave
    test BLEU 44.63 with the old fixed 0.2 and 59.49 with 0.02 (issue 39). An untuned ini
    (train-model.perl's 0.2 each) keeps 0.2."""
    magnitudes = [abs(value) for value in tuned if value != 0]
    if not magnitudes:
        return DEFAULT_NEW_WEIGHT, f"{name}'s weights are all 0: {DEFAULT_NEW_WEIGHT:g}"
    median = float(f"{statistics.median(magnitudes):.3g}")
    return median, f"the median magnitude of {name}'s {len(magnitudes)} non-zero weights"


def refuse_spaces(what: str, path: str) -> None:
    """A path= Moses could not read: it splits a feature line at spaces and tabs, quoted or
    not (``FeatureFunction::ParseLine``: "Incorrect format for feature function arg: ...",
    as the real Moses says of ``path=/a/my tables/pt.gz``). ``what`` names where it is from."""
    if any(c.isspace() for c in path):
        raise RescorerError(
            f"{what}: the path {path!r} has a space: Moses splits a feature line at spaces, "
            "quoted or not ('Incorrect format for feature function arg'), so it could not open "
            "it; move or link the file (or the folder Moses runs in) to a path without spaces"
        )


def provenance_note(derived: float, why: str, new: int) -> str:
    """What the new columns of a fill-up start at, and why the provenance's weight is negative.
    combine-ptables.pl's convention, which extend follows: the provenance is 1 (exp 0) for the
    first table's pairs and 2.718 (exp 1) for the filled-up ones; Moses takes its ln, 0 or 1,
    so the weight is added once per new pair a translation uses: negative, a cost, the first
    table preferred as a fill-up means it (MERT may change its sign)."""
    others = f"new weight {derived:g} ({why}), and " if new > 1 else ""
    return (
        f"{others}{-derived:g} for the provenance column (ln 2.718 = 1 for a new pair, ln 1 = 0 "
        "for the table's own: a negative weight is a cost per new pair used, the first table "
        "preferred; --new-weight to choose)"
    )


def _replace_arg(line: str, key: str, value: str) -> str:
    """``line`` with the token ``key=...`` replaced by ``key=value`` (other bytes unchanged)."""
    code_end = len(code_part(line))
    for match in _TOKEN.finditer(line, 0, code_end):
        if match.group().startswith(key + "="):
            return f"{line[: match.start()]}{key}={value}{line[match.end() :]}"
    raise AssertionError(f"no {key}= in {line!r}")  # callers check the key exists


def _append_values(line: str, values: Sequence[float]) -> str:
    """A weight line with ``values`` appended after its last number (comment, ending kept)."""
    code = code_part(line)
    end = len(code.rstrip(" \t"))
    added = "".join(f" {v:g}" for v in values)
    return f"{line[:end]}{added}{line[end:]}"


@dataclass(frozen=True)
class IniUpdate:
    """A rewritten ini and what changed."""

    text: str
    feature: FeatureLine
    num_features: int  # the new count
    new_path: str  # the path= now in the ini
    binarize_command: str | None  # for compact / on-disk tables: how to rebuild them
    warnings: tuple[str, ...] = ()  # things to check before tuning
    added: AddedColumns | None = None  # what the new columns are (write_scored_ini checks)
    note: str = ""  # the new weight derived from the ini, and why (no --new-weight given)


def update_for_scored_table(
    ini: MosesIni,
    table_path: str,
    num_columns: int,
    *,
    weights: Sequence[float] = (),
    feature_name: str | None = None,
) -> IniUpdate:
    """Point a TranslationModel at a table with more columns: num-features, weights, path.

    ``weights`` are the added columns' weights, one per column in column order or one for all
    (default: :func:`derived_new_weight` for each); the added columns are the table's column
    count minus the feature's num-features (docs/moses-formats.md §2.2). Whether they are what
    a score run adds is :func:`check_added_columns`' question.
    """
    feature = pick_table_feature(
        ini,
        feature_name,
        fits=lambda m: (m.num_features or 0) < num_columns,
        why=f"have fewer than the new table's {num_columns} columns",
    )
    old = feature.num_features
    where = f"{ini.path}:{feature.lineno}"
    if old is None:
        raise RescorerError(f"{where}: {feature.name} has no num-features=")
    if not DENSE_NAME.match(feature.name):
        raise RescorerError(
            f"{where}: feature name {feature.name!r} is not [A-Za-z][0-9A-Za-z]*: "
            "mert-moses.pl would take its columns for sparse features"
        )
    if feature.kind not in REWRITABLE_TABLES:
        raise RescorerError(f"{where}: rescorer cannot rewrite a {feature.kind}; edit it by hand")
    if feature.get("tuneable-components") is not None:
        raise RescorerError(f"{where}: {feature.name} has tuneable-components=; edit it by hand")
    added = num_columns - old
    if added <= 0:
        raise RescorerError(
            f"{table_path} has {num_columns} score columns, {feature.name} already has "
            f"num-features={old}: is it the scored table?"
        )
    if len(weights) > 1 and len(weights) != added:
        raise RescorerError(
            f"{table_path} has {num_columns} score columns, {feature.name} has {old}: that is "
            f"{added} new column(s), but {len(weights)} --new-weight values were given (give "
            "one per new column, in column order, or one for all)"
        )
    weight_line = ini.weight_line(feature.name)
    weight_note = ""
    if not weights:
        derived, why = derived_new_weight(feature.name, weight_line.values)
        weights, weight_note = (derived,), f"new weight {derived:g} ({why}; --new-weight to choose)"
    new_weights = tuple(weights) if len(weights) == added else (weights[0],) * added
    if len(weight_line.values) != old:
        raise InputError(
            ini.path,
            weight_line.lineno,
            f"{feature.name} has {len(weight_line.values)} weights but num-features={old}",
        )
    new_path, command = _binarized_target(feature, table_path, num_columns)
    if feature.get("path") is None:
        raise RescorerError(f"{where}: {feature.name} has no path=")
    # a binarised table is built after this (binarize_command): its file is not there yet
    unchecked = (feature.name,) if command is not None else ()
    lines = _absolute_path_lines(ini, {feature.name: new_path}, unchecked=unchecked)
    lines[feature.lineno] = _replace_arg(lines[feature.lineno], "num-features", str(num_columns))
    lines[weight_line.lineno] = _append_values(ini.lines[weight_line.lineno - 1], new_weights)
    return IniUpdate(ini.text(lines), feature, num_columns, new_path, command, note=weight_note)


def _binarized_target(
    feature: FeatureLine, table_path: str, num_columns: int
) -> tuple[str, str | None]:
    """The path for the ini and, for binarised tables, the command that builds it (§2.2)."""
    base = table_path[:-3] if table_path.endswith(".gz") else table_path
    if feature.kind == COMPACT_TABLE:
        command = (
            f"processPhraseTableMin -in {table_path} -out {base} -nscores {num_columns} -threads 1"
        )
        return f"{base}.minphr", command
    if feature.kind == ONDISK_TABLE:
        n_in = len((feature.get("input-factor") or "0").split(","))
        n_out = len((feature.get("output-factor") or "0").split(","))
        folder = f"{base}.folder"
        command = f"CreateOnDiskPt {n_in} {n_out} {num_columns} 100 2 {table_path} {folder}"
        return folder, command
    return table_path, None


def with_table_path(
    ini: MosesIni, feature: FeatureLine, table_path: str, *, written_later: bool = False
) -> str:
    """The ini's text with ``feature``'s path= replaced by ``table_path`` and every other path=
    absolute, each checked to exist (the rest byte for byte): an ini that runs anywhere.
    ``written_later``: the table is not written yet (its existence is not checked)."""
    paths = {feature.name: os.path.abspath(table_path)}
    unchecked = (feature.name,) if written_later else ()
    return ini.text(_absolute_path_lines(ini, paths, unchecked=unchecked))


def with_feature_paths(ini: MosesIni, paths: Mapping[str, str]) -> str:
    """The ini's text with the path= of each named feature replaced and every other path=
    resolved against ``ini.run_dir`` (other bytes unchanged); every file checked to exist."""
    return ini.text(_absolute_path_lines(ini, paths))


def with_start_weights(ini: MosesIni, start: MosesIni) -> str:
    """The ini's text with every ``[weight]`` line's values taken from ``start``'s line of the
    same name (e.g. the untuned moses.ini that train-model.perl wrote, to tune from Moses'
    starting weights rather than from tuned ones); every other byte unchanged. A line of
    ``ini`` that ``start`` lacks, or holds another number of values for, is an error naming
    both lines: a feature without a starting weight would keep a tuned one. A rewritten line
    is ``Name= v1 v2 ...`` (its indentation and a trailing comment dropped); lines ``start``
    has for features ``ini`` lacks are ignored; a ``[weight-file]`` is left as it is."""
    lines: dict[int, str] = {}
    for line in ini.weight_lines:
        where = f"{ini.path}:{line.lineno}"
        found = [w for w in start.weight_lines if w.name == line.name]
        if not found:
            raise RescorerError(
                f"{where}: {line.name} has no '{line.name}=' line in {start.path} to start from "
                "(expected the start ini to weigh every feature of the system)"
            )
        values = start.weight_line(line.name).values  # one line, or an error naming them
        if len(values) != len(line.values):
            raise RescorerError(
                f"{where}: {line.name} has {len(line.values)} weights, "
                f"{start.path}:{found[0].lineno} has {len(values)}: expected as many"
            )
        text = ini.lines[line.lineno - 1]
        ending = text[len(text.rstrip("\r\n")) :]
        lines[line.lineno] = f"{line.name}= {' '.join(map(repr, values))}{ending}"  # round trip
    return ini.text(lines)


def absolute_paths(ini: MosesIni) -> str:
    """The ini's text with every feature's path= absolute, resolved as Moses resolves it from
    ``ini.run_dir`` (not checked: the caller says which file it misses, and when).

    Moses resolves a relative path against the directory it runs in, and mert-moses.pl runs
    it in its working directory, so an ini meant to be used from elsewhere needs these.
    """
    return ini.text(_absolute_path_lines(ini, {}, unchecked=[f.name for f in ini.features]))


def _absolute_path_lines(
    ini: MosesIni, paths: Mapping[str, str], *, unchecked: Sequence[str] = ()
) -> dict[int, str]:
    """The ini's lines (by 1-based number) with every path= absolute: ``paths[name]`` (a path
    given on the command line, so relative to the current directory) for the named features,
    the path= resolved against ``ini.run_dir`` for the others. Each must name a file Moses
    finds, except those of the features in ``unchecked``."""
    lines = dict(enumerate(ini.lines, start=1))
    for name in paths:
        if ini.feature(name).get("path") is None:
            feature = ini.feature(name)
            raise RescorerError(f"{ini.path}:{feature.lineno}: {feature.name} has no path=")
    for feature in ini.features:
        raw = feature.get("path")
        if raw is None:
            continue
        path = os.path.abspath(paths[feature.name]) if feature.name in paths else raw
        resolved = ini.resolve(path)
        refuse_spaces(f"{ini.path}:{feature.lineno}: {feature.name}", resolved)
        if feature.name not in unchecked:
            ini.feature_file(feature, path)
        if resolved != raw:
            lines[feature.lineno] = _replace_arg(lines[feature.lineno], "path", resolved)
    return lines


def write_scored_ini(
    ini_path: str,
    table_path: str,
    out_path: str,
    *,
    weights: Sequence[float] = (),
    feature_name: str | None = None,
    run_dir: str | None = None,
) -> IniUpdate:
    """``rescorer moses-ini``: write ``out_path``, the ini pointing at the scored table, every
    path absolute (resolved from ``run_dir``, default the ini's folder) and checked to exist."""
    from rescorer.io.outputs import open_output
    from rescorer.io.reordering import not_a_reordering_table, sniff_table_kind

    for name, path in (("INI", ini_path), ("--phrase-table", table_path)):
        if same_file(out_path, path):
            raise RescorerError(f"-o {out_path} is {name} itself: write the new ini elsewhere")
    ini = read_ini(ini_path, run_dir)
    not_a_reordering_table(table_path, sniff_table_kind(table_path))
    num_columns = count_columns(table_path)
    # absolute paths: Moses resolves relative ones against the directory it runs in, and
    # mert-moses.pl runs it in its working dir
    update = update_for_scored_table(
        ini, os.path.abspath(table_path), num_columns, weights=weights, feature_name=feature_name
    )
    added = check_added_columns(table_path, update.feature.num_features or 0, num_columns)
    warnings = list(update.warnings)
    if os.path.exists(table_path + ".partial.json"):
        warnings.append(
            f"{table_path}.partial.json: a score run to {table_path} has not finished; "
            f"{table_path} is an earlier run's output"
        )
    if added.provenance and not weights:  # the provenance column starts as a cost
        derived, why = derived_new_weight(
            update.feature.name, ini.weight_line(update.feature.name).values
        )
        new = num_columns - (update.feature.num_features or 0)
        update = update_for_scored_table(
            ini,
            os.path.abspath(table_path),
            num_columns,
            weights=(derived,) * (new - 1) + (-derived,),
            feature_name=update.feature.name,
        )
        update = dataclasses.replace(update, note=provenance_note(derived, why, new))
    update = dataclasses.replace(update, added=added, warnings=tuple(warnings))
    with open_output(out_path) as out:
        out.write(update.text)
    return update
