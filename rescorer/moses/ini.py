"""moses.ini: read features and weights, and rewrite the file for a new phrase table.

Parsing follows Moses (docs/moses-formats.md §2): ``#`` starts a comment anywhere on a line
(``Parameter::ReadConfigFile``), ``[name]`` opens a section, ``[feature]`` lines are
``Type key=value ...`` (a feature without ``name=`` is called Type + its index among lines of
that type), ``[weight]`` lines are ``Name= v1 v2 ...``. Every line's original text is kept, so a
rewrite changes only the tokens it means to change and leaves every other byte alone.

Paths: Moses opens a feature's ``path=`` as it is written, so a relative one is relative to the
folder Moses runs in (its current directory), not to the ini's. A MosesIni knows the folder it
is meant to run from (``run_dir``, by default the ini's own folder); every path it hands out is
resolved against it, and every ini rescorer writes names absolute paths that exist, so that it
decodes from any folder (mert-moses.pl runs Moses in its working directory).
A gzip ini is read as Moses reads one (``InputFileStream`` decompresses a ``.gz`` config).
"""

from __future__ import annotations

import dataclasses
import gzip
import math
import os
import re
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from rescorer.constants import GZIP_MAGIC
from rescorer.errors import InputError, RescorerError
from rescorer.io.table import parse_number

# mert-moses.pl and mert's extractor take a name with "_" for a sparse feature; a dense
# feature's name must look like this (mert-moses.pl:1517-1519, mert/Data.cpp:227).
DENSE_NAME = re.compile(r"[A-Za-z][0-9A-Za-z]*\Z")

TEXT_TABLE = "PhraseDictionaryMemory"
COMPACT_TABLE = "PhraseDictionaryCompact"
ONDISK_TABLE = "PhraseDictionaryOnDisk"
# Tables rescorer moses-ini can point at a new table (the others have no text-table path).
REWRITABLE_TABLES = (TEXT_TABLE, COMPACT_TABLE, ONDISK_TABLE, "PhraseDictionaryScope3")
KENLM = "KENLM"
DEFAULT_NEW_WEIGHT = 0.2
_TOKEN = re.compile(r"[^ \t\r\n]+")


def is_translation_model(kind: str) -> bool:
    """Feature types that are phrase tables (Moses' PhraseDictionary* family and ProbingPT)."""
    return kind.startswith("PhraseDictionary") or kind in ("ProbingPT", "RuleTable")


def code_part(text: str) -> str:
    """A line without its comment and line ending (Moses cuts at the first ``#``)."""
    return text.split("#", 1)[0].rstrip("\r\n")


@dataclass(frozen=True, slots=True)
class FeatureLine:
    """One line of ``[feature]``: its type, ``key=value`` arguments and (default) name."""

    lineno: int  # 1-based line number in the ini
    kind: str  # the feature's type, e.g. PhraseDictionaryMemory, KENLM, WordPenalty
    args: tuple[tuple[str, str], ...]
    name: str  # name= or the default Type<index>

    def get(self, key: str) -> str | None:
        return next((value for k, value in self.args if k == key), None)

    @property
    def num_features(self) -> int | None:
        value = self.get("num-features")
        return int(value) if value is not None and value.isdigit() else None


@dataclass(frozen=True, slots=True)
class WeightLine:
    """One line of ``[weight]``: ``Name= v1 v2 ...``."""

    lineno: int
    name: str
    values: tuple[float, ...]


@dataclass(frozen=True)
class MosesIni:
    """A parsed moses.ini that remembers every original line (with its line ending)."""

    path: str
    lines: tuple[str, ...]
    features: tuple[FeatureLine, ...]
    weight_lines: tuple[WeightLine, ...]
    run_dir: str  # absolute: the folder Moses runs this ini from (relative paths start there)

    def feature(self, name: str) -> FeatureLine:
        for feature in self.features:
            if feature.name == name:
                return feature
        known = ", ".join(f.name for f in self.features) or "none"
        raise RescorerError(f"{self.path}: no feature named {name!r} (features: {known})")

    def features_of_kind(self, *kinds: str) -> list[FeatureLine]:
        return [f for f in self.features if f.kind in kinds]

    def translation_models(self) -> list[FeatureLine]:
        return [f for f in self.features if is_translation_model(f.kind)]

    def weights(self) -> dict[str, tuple[float, ...]]:
        """Every ``[weight]`` line, name to values (dense and sparse alike)."""
        return {w.name: w.values for w in self.weight_lines}

    def weight_line(self, name: str) -> WeightLine:
        for line in self.weight_lines:
            if line.name == name:
                return line
        raise RescorerError(f"{self.path}: no '{name}=' line in [weight]")

    def resolve(self, path: str) -> str:
        """A path from the ini as Moses opens it: unless absolute, relative to ``run_dir``."""
        if os.path.isabs(path):
            return path
        return os.path.normpath(os.path.join(self.run_dir, path))

    def with_run_dir(self, run_dir: str | None) -> MosesIni:
        """The same ini meant to run from ``run_dir`` (None: unchanged)."""
        if run_dir is None:
            return self
        return dataclasses.replace(self, run_dir=_run_dir(run_dir))

    def feature_file(self, feature: FeatureLine, path: str | None = None) -> str:
        """``feature``'s path= (or ``path``) resolved, checked to name a file Moses would open;
        a RescorerError naming the feature, the line and the folder otherwise."""
        raw = path if path is not None else feature.get("path")
        if raw is None:
            raise RescorerError(f"{self.path}:{feature.lineno}: {feature.name} has no path=")
        resolved = self.resolve(raw)
        if not _moses_finds(feature, resolved):
            how = (
                f" (path={raw} taken relative to {self.run_dir}, the folder Moses is meant to "
                "run in, as Moses resolves it against its current directory: name that folder "
                "with --run-dir)"
                if not os.path.isabs(raw)
                else ""
            )
            raise RescorerError(
                f"{self.path}:{feature.lineno}: {feature.name} ({feature.kind}) names "
                f"{resolved}, which does not exist{how}"
            )
        return resolved

    def check_files(self, skip: Sequence[str] = ()) -> None:
        """Every feature's file exists (those named in ``skip`` aside)."""
        for feature in self.features:
            if feature.get("path") is not None and feature.name not in skip:
                self.feature_file(feature)

    def text(self, replacements: Mapping[int, str] | None = None) -> str:
        """The file's text with the given 1-based lines replaced (each with its line ending)."""
        replacements = replacements or {}
        return "".join(replacements.get(i, line) for i, line in enumerate(self.lines, start=1))


def _moses_finds(feature: FeatureLine, path: str) -> bool:
    """Whether Moses finds ``feature``'s file at ``path``: a reordering table may also be
    ``path.gz``, ``path.minlexr`` or ``path.binlexr.idx`` (LexicalReorderingTable.cpp:50-70,
    :163-167), a compact phrase table is ``path.minphr`` (PhraseDictionaryCompact.cpp:66-71)."""
    if feature.kind == "LexicalReordering":
        return any(os.path.exists(path + end) for end in ("", ".gz", ".minlexr", ".binlexr.idx"))
    if feature.kind == COMPACT_TABLE and not path.endswith(".minphr"):
        return os.path.exists(path + ".minphr")
    return os.path.exists(path)


def _run_dir(path: str) -> str:
    if not os.path.isdir(path):
        raise RescorerError(f"--run-dir {path}: not a folder")
    return os.path.abspath(path)


def same_file(a: str, b: str) -> bool:
    """Whether two names are one existing file (links and ./ included)."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def read_ini(path: str, run_dir: str | None = None) -> MosesIni:
    """Parse a moses.ini (plain, or gzip as Moses reads a .gz one), meant to run from
    ``run_dir`` (default: its own folder); malformed lines are InputErrors naming the line."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise RescorerError(f"{path}: cannot open: {exc.strerror}") from exc
    if data.startswith(GZIP_MAGIC):
        if not path.endswith(".gz"):
            raise InputError(
                path,
                None,
                "gzip data, expected a plain-text moses.ini (Moses decompresses a config only "
                "when its name ends in .gz)",
            )
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as exc:
            raise InputError(path, None, f"corrupt or truncated gzip data: {exc}") from exc
    parts = data.split(b"\n")
    raw_lines = [part + b"\n" for part in parts[:-1]] + ([parts[-1]] if parts[-1] else [])
    lines: list[str] = []
    for lineno, raw in enumerate(raw_lines, start=1):
        try:
            lines.append(raw.decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise InputError(
                path, lineno, f"invalid UTF-8 ({exc.reason}), expected a plain-text moses.ini"
            ) from exc
    folder = _run_dir(run_dir) if run_dir is not None else os.path.dirname(os.path.abspath(path))
    return _parse(path, tuple(lines), folder)


def _parse(path: str, lines: tuple[str, ...], run_dir: str) -> MosesIni:
    section = ""
    features: list[FeatureLine] = []
    weights: list[WeightLine] = []
    seen_kinds: dict[str, int] = {}
    for lineno, line in enumerate(lines, start=1):
        code = code_part(line).strip(" \t")
        if not code:
            continue
        if code.startswith("["):
            section = code[1 : code.index("]")] if "]" in code else code[1:]
            continue
        if section == "feature":
            feature = _parse_feature(path, lineno, code, seen_kinds)
            if any(f.name == feature.name for f in features):
                raise InputError(path, lineno, f"a second feature named {feature.name!r}")
            features.append(feature)
        elif section == "weight":
            weights.append(_parse_weight(path, lineno, code))
    return MosesIni(path, lines, tuple(features), tuple(weights), run_dir)


def _parse_feature(path: str, lineno: int, code: str, seen: dict[str, int]) -> FeatureLine:
    kind, *tokens = _TOKEN.findall(code)
    args: list[tuple[str, str]] = []
    for tok in tokens:
        key, sep, value = tok.partition("=")
        if not sep or not key:
            raise InputError(
                path, lineno, f"feature argument {tok!r} is not key=value, expected 'Type k=v ...'"
            )
        if any(k == key for k, _ in args):
            raise InputError(path, lineno, f"duplicate key {key!r} in feature line")
        args.append((key, value))
    index = seen.get(kind, 0)
    seen[kind] = index + 1
    name = next((v for k, v in args if k == "name"), f"{kind}{index}")
    feature = FeatureLine(lineno, kind, tuple(args), name)
    if feature.get("num-features") is not None and feature.num_features is None:
        raise InputError(
            path, lineno, f"num-features={feature.get('num-features')!r} is not a count"
        )
    return feature


def _parse_weight(path: str, lineno: int, code: str) -> WeightLine:
    name, *tokens = _TOKEN.findall(code)
    if not name.endswith("=") or len(name) < 2:
        raise InputError(
            path, lineno, f"weight line starts with {name!r}, expected 'Name= v1 v2 ...'"
        )
    try:
        values = tuple(parse_number(tok) for tok in tokens)
    except ValueError:
        raise InputError(
            path, lineno, f"weights of {name[:-1]} are not all numbers, expected 'Name= v1 v2 ...'"
        ) from None
    if not values:
        raise InputError(path, lineno, f"no weights after {name!r}, expected 'Name= v1 v2 ...'")
    if not all(math.isfinite(v) for v in values):
        raise InputError(
            path, lineno, f"weights of {name[:-1]} must be finite numbers, found nan or inf"
        )
    return WeightLine(lineno, name[:-1], values)


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


def pick_table_feature(
    ini: MosesIni,
    feature_name: str | None = None,
    *,
    fits: Callable[[FeatureLine], bool] | None = None,
    why: str = "",
) -> FeatureLine:
    """The phrase-table feature a command works on, by one rule for every command.

    The feature named by ``--feature-name`` (it must be a phrase table); else the ini's only
    phrase table; else the only one for which ``fits`` holds (``why`` says what fitting means).
    """
    if feature_name is not None:
        feature = ini.feature(feature_name)
        if not is_translation_model(feature.kind):
            raise RescorerError(
                f"{ini.path}: {feature_name} is a {feature.kind}, not a phrase table"
            )
        return feature
    models = ini.translation_models()
    if not models:
        raise RescorerError(f"{ini.path}: no phrase-table feature in [feature]")
    if len(models) == 1:
        return models[0]
    fitting = [m for m in models if fits is not None and fits(m)]
    if len(fitting) == 1:
        return fitting[0]
    described = ", ".join(f"{m.name} has num-features={m.num_features}" for m in models)
    raise RescorerError(
        f"{ini.path} has {len(models)} phrase tables ({described}) and {len(fitting)} of them "
        f"{why or 'fit'}: pass --feature-name"
    )


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
    (default 0.2 each); the added columns are the table's column count minus the feature's
    num-features (docs/moses-formats.md §2.2). Whether they are what a score run adds is
    :func:`check_added_columns`' question.
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
    new_weights = (
        tuple(weights)
        if len(weights) == added
        else ((weights[0] if weights else DEFAULT_NEW_WEIGHT),) * added
    )
    weight_line = ini.weight_line(feature.name)
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
    return IniUpdate(ini.text(lines), feature, num_columns, new_path, command)


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


def with_table_path(ini: MosesIni, feature: FeatureLine, table_path: str) -> str:
    """The ini's text with ``feature``'s path= replaced by ``table_path`` and every other path=
    absolute, each checked to exist (the rest byte for byte): an ini that runs anywhere."""
    return with_feature_paths(ini, {feature.name: os.path.abspath(table_path)})


def with_feature_paths(ini: MosesIni, paths: Mapping[str, str]) -> str:
    """The ini's text with the path= of each named feature replaced and every other path=
    resolved against ``ini.run_dir`` (other bytes unchanged); every file checked to exist."""
    return ini.text(_absolute_path_lines(ini, paths))


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
        if feature.name not in unchecked:
            ini.feature_file(feature, path)
        if resolved != raw:
            lines[feature.lineno] = _replace_arg(lines[feature.lineno], "path", resolved)
    return lines


CHECK_LINES = 1000  # the lines whose added columns moses-ini looks at


@dataclass(frozen=True)
class AddedColumns:
    """What the columns a score run appended are: ``models`` columns of probabilities, then
    the word penalty if ``word_penalty``; ``source`` says how moses-ini knows."""

    models: int
    word_penalty: bool
    source: str

    @property
    def count(self) -> int:
        return self.models + int(self.word_penalty)

    def describe(self) -> str:
        what = f"{self.models} model{'s' if self.models != 1 else ''}"
        return f"{what} + word penalty" if self.word_penalty else what


def _is_penalty(value: float) -> bool:
    """e^k, k = 0, 1, 2, ...: the word-penalty column as rescorer score writes it."""
    return value >= 1 and abs(math.log(value) - round(math.log(value))) <= 1e-4


def _from_manifest(table_path: str) -> AddedColumns | None:
    """The columns a shard's manifest (TABLE.manifest.json) says its run added, if it has one."""
    from rescorer.io.jsonfiles import read_json_object

    path = table_path + ".manifest.json"  # rescorer.score.shards.manifest_path (torch-free here)
    if not os.path.exists(path):
        return None
    manifest = read_json_object(path, what="a shard manifest")
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
      a model column with a value above 1, or two new columns equal on every line is a table
      scored more than once (or not a phrase table scored by rescorer): refused.
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
            if columns[j] == columns[k]:
                raise RescorerError(
                    f"{table_path}: new columns {j + 1} and {k + 1} are equal on the first "
                    f"{len(columns[j]):,} lines (one model twice): {twice}"
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
        return stated
    return AddedColumns(
        added - int(last_is_penalty), last_is_penalty, "the column count and values"
    )


def count_columns(table_path: str) -> int:
    """The number of dense scores on a phrase table's first line."""
    from rescorer.io.table import read_table

    for entry in read_table(table_path):
        return len(entry.scores)
    raise RescorerError(f"{table_path}: the table is empty")


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
    update = dataclasses.replace(update, added=added, warnings=tuple(warnings))
    with open_output(out_path) as out:
        out.write(update.text)
    return update
