"""moses.ini, the owner of the format: read features and weights.

Parsing follows Moses (docs/moses-formats.md §2): ``#`` starts a comment anywhere on a line
(``Parameter::ReadConfigFile``), ``[name]`` opens a section, ``[feature]`` lines are
``Type key=value ...`` (a feature without ``name=`` is called Type + its index among lines of
that type), ``[weight]`` lines are ``Name= v1 v2 ...``. Every line's original text is kept, so a
rewrite (:mod:`rescorer.moses.ini_rewrite`, by this module's grammar: ``code_part``, the
token pattern) changes only the tokens it means to change and leaves every other byte alone.

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
import stat
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from rescorer.constants import GZIP_MAGIC
from rescorer.errors import InputError, RescorerError
from rescorer.io.table import parse_number

MAX_INI_BYTES = 64 << 20  # the largest moses.ini read (a few KiB is usual)

TEXT_TABLE = "PhraseDictionaryMemory"
COMPACT_TABLE = "PhraseDictionaryCompact"
ONDISK_TABLE = "PhraseDictionaryOnDisk"
KENLM = "KENLM"
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
        """The one ``name=`` line of ``[weight]``. Moses takes the last of several and ignores
        the others (``moses -show-weights``; weights() does the same), so a rewrite of one of
        them would be a guess: several are refused, naming each line."""
        lines = [line for line in self.weight_lines if line.name == name]
        if len(lines) > 1:
            where = " and ".join(f"{self.path}:{line.lineno}" for line in lines)
            raise RescorerError(
                f"{where}: {len(lines)} '{name}=' weight lines, expected one (Moses uses the "
                "last and ignores the others): delete the ones you do not mean"
            )
        if not lines:
            raise RescorerError(f"{self.path}: no '{name}=' line in [weight]")
        return lines[0]

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
    data = _read_ini_bytes(path)
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


def _read_ini_bytes(path: str) -> bytes:
    """The bytes of the ini ``path``, which must be a regular file of at most MAX_INI_BYTES:
    a moses.ini is a small config whose relative paths are taken from its folder, and a FIFO
    with no writer (or a device) made every reader of it wait for ever."""
    try:
        # O_NONBLOCK: opening a FIFO with no writer returns at once, and is then refused
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise RescorerError(f"{path}: cannot open: {exc.strerror}") from exc
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        if stat.S_ISDIR(mode):
            raise RescorerError(f"{path}: is a folder, expected a moses.ini file")
        raise RescorerError(
            f"{path}: not a regular file (a FIFO, a device?), expected a moses.ini file (its "
            "relative paths are taken from its folder: save it as a file there first)"
        )
    with open(fd, "rb") as f:
        os.set_blocking(fd, True)
        try:
            data = f.read(MAX_INI_BYTES + 1)
        except OSError as exc:
            raise RescorerError(f"{path}: cannot read: {exc.strerror}") from exc
    if len(data) > MAX_INI_BYTES:
        raise RescorerError(f"{path}: over {MAX_INI_BYTES >> 20} MiB, expected a moses.ini")
    return data


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
