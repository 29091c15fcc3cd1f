"""The log-linear score Moses ranks a phrase pair by when it loads a table (no torch here).

For ``table-limit`` the decoder sorts each source phrase's targets by their future score
(docs/moses-formats.md §3.4, moses/TargetPhrase.cpp:185-201):

    sum_i  w_i * max(ln v_i, -100)          the table's dense columns (LoaderStandard.cpp:203)
  + w_WordPenalty * (-#target words)        FF/WordPenaltyProducer.cpp:20-27
  + w_PhrasePenalty * 1                     FF/PhrasePenalty.cpp:18-38
  + w_LM * ln P_LM(target phrase alone)     moses/LM/Base.cpp:62-87, see rescorer.moses.lm

Distortion and lexicalised reordering score nothing for a phrase on its own. Weights come from a
moses.ini's ``[weight]`` section and ``--weight NAME=v1,v2,...`` overrides.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from rescorer.constants import FIELD_SEP, LOGP_FLOOR
from rescorer.errors import InputError, RescorerError
from rescorer.io.table import parse_number
from rescorer.moses.ini import KENLM, MosesIni, pick_table_feature

if TYPE_CHECKING:
    from rescorer.io.table import PhraseEntry

# Names used when there is no moses.ini: the ones train-model.perl writes.
DEFAULT_TABLE = "TranslationModel0"
DEFAULT_WORD_PENALTY = "WordPenalty0"
DEFAULT_PHRASE_PENALTY = "PhrasePenalty0"
DEFAULT_LM = "LM0"
OTHER_LMS = ("SRILM", "IRSTLM", "RANDLM", "DALM", "LanguageModelIRST")


def parse_weight_option(text: str) -> tuple[str, tuple[float, ...]]:
    """``NAME=v1,v2,...`` (the ``--weight`` option) as a name and its values."""
    name, sep, values = text.partition("=")
    try:
        numbers = tuple(parse_number(v) for v in values.split(","))
    except ValueError:
        numbers = ()
    if not sep or not name or not numbers or not all(map(math.isfinite, numbers)):
        raise RescorerError(f"--weight {text!r}: expected NAME=v1,v2,... (numbers)")
    return name, numbers


@dataclass(frozen=True)
class Weights:
    """Feature name to weight values, as in a moses.ini ``[weight]`` section."""

    values: Mapping[str, tuple[float, ...]] = field(default_factory=dict)

    @classmethod
    def build(
        cls, ini: MosesIni | None, overrides: Iterable[tuple[str, tuple[float, ...]]] = ()
    ) -> Weights:
        """The ini's weights (if any), then each override replacing a whole line."""
        values = dict(ini.weights()) if ini is not None else {}
        for name, numbers in overrides:
            values[name] = numbers
        return cls(values)

    def get(self, name: str) -> tuple[float, ...] | None:
        return self.values.get(name)

    def single(self, name: str) -> float:
        """The weight of a one-value feature (0 when it has none)."""
        numbers = self.values.get(name, (0.0,))
        if len(numbers) != 1:
            raise RescorerError(f"{name} has {len(numbers)} weights, expected 1")
        return numbers[0]


@dataclass(frozen=True, slots=True)
class LMTerm:
    name: str
    path: str
    weight: float


@dataclass(frozen=True)
class CombinerConfig:
    """Everything the combiner needs: the weights by role, the LM files."""

    table_feature: str
    table_weights: tuple[float, ...]
    word_penalty: float = 0.0
    phrase_penalty: float = 0.0
    lms: tuple[LMTerm, ...] = ()


@dataclass(frozen=True)
class WeightSpec:
    """How to weight features, as every command takes it (``--weights``, ``--weight``,
    ``--feature-name``, ``--lm``, ``--no-lm``): built once by the command line."""

    ini: MosesIni | None = None
    overrides: tuple[tuple[str, tuple[float, ...]], ...] = ()
    feature_name: str | None = None
    lm_path: str | None = None
    use_lm: bool = True

    @property
    def given(self) -> bool:
        """Whether any weights were given (an ini or an override)."""
        return self.ini is not None or bool(self.overrides)

    def require(self) -> WeightSpec:
        """``self``, or a RescorerError when no weights were given."""
        if not self.given:
            raise RescorerError("no weights: give --weights moses.ini and/or --weight NAME=v1,...")
        return self

    def weights(self) -> Weights:
        return Weights.build(self.ini, self.overrides)

    def combiner_config(self, num_columns: int) -> CombinerConfig:
        return build_config(
            self.ini,
            self.overrides,
            num_columns,
            feature_name=self.feature_name,
            lm_path=self.lm_path,
            use_lm=self.use_lm,
        )


def build_config(
    ini: MosesIni | None,
    overrides: Sequence[tuple[str, tuple[float, ...]]],
    num_columns: int,
    *,
    feature_name: str | None = None,
    lm_path: str | None = None,
    use_lm: bool = True,
) -> CombinerConfig:
    """Bind weights to roles from a moses.ini (or train-model.perl's default names)."""
    weights = Weights.build(ini, overrides)
    known = _role_names(ini, num_columns, feature_name)
    unknown = sorted({name for name, _ in overrides} - set(known.all_names))
    if unknown:
        raise RescorerError(
            f"--weight {unknown[0]}=...: no such feature (known: {', '.join(known.all_names)})"
        )
    table_weights = weights.get(known.table)
    if table_weights is None:
        raise RescorerError(f"no weights for {known.table}: give --weight {known.table}=v1,v2,...")
    if len(table_weights) != num_columns:
        raise RescorerError(
            f"the table has {num_columns} score columns but {known.table} has "
            f"{len(table_weights)} weights: give all of them with --weight {known.table}=v1,v2,..."
        )
    lms: list[LMTerm] = []
    if use_lm:
        if lm_path is not None and len(known.lms) != 1:
            raise RescorerError(f"--lm needs exactly one LM feature, found {len(known.lms)}")
        for name, path in known.lms:
            if lm_path is not None:
                path = lm_path
            elif path is None:
                continue  # no ini, no --lm: no LM term
            elif ini is not None:  # resolved from the ini's run folder, as Moses opens it
                path = _ini_lm_file(ini, name)
            lms.append(LMTerm(name, path, weights.single(name)))
    return CombinerConfig(
        table_feature=known.table,
        table_weights=table_weights,
        word_penalty=sum(weights.single(name) for name in known.word_penalties),
        phrase_penalty=sum(weights.single(name) for name in known.phrase_penalties),
        lms=tuple(lms),
    )


def _ini_lm_file(ini: MosesIni, name: str) -> str:
    try:
        return ini.feature_file(ini.feature(name))
    except RescorerError as exc:
        raise RescorerError(f"{exc}; or give --lm FILE, or --no-lm") from None


@dataclass(frozen=True)
class _Roles:
    table: str
    word_penalties: tuple[str, ...]
    phrase_penalties: tuple[str, ...]
    lms: tuple[tuple[str, str | None], ...]  # name, resolved path
    all_names: tuple[str, ...]


def _role_names(ini: MosesIni | None, num_columns: int, feature_name: str | None) -> _Roles:
    if ini is None:
        table = feature_name or DEFAULT_TABLE
        names = (table, DEFAULT_WORD_PENALTY, DEFAULT_PHRASE_PENALTY, DEFAULT_LM)
        return _Roles(table, names[1:2], names[2:3], ((DEFAULT_LM, None),), names)
    others = [f for f in ini.features if f.kind in OTHER_LMS]
    if others:
        raise RescorerError(
            f"{ini.path}:{others[0].lineno}: {others[0].kind} models cannot be read here; "
            "pass --lm with a KenLM file of the same model, or --no-lm"
        )
    return _Roles(
        table=pick_table_feature(
            ini,
            feature_name,
            fits=lambda m: m.num_features == num_columns,
            why=f"have num-features={num_columns} like the table",
        ).name,
        word_penalties=tuple(f.name for f in ini.features_of_kind("WordPenalty")),
        phrase_penalties=tuple(f.name for f in ini.features_of_kind("PhrasePenalty")),
        lms=tuple((f.name, ini.resolve(f.get("path") or "")) for f in ini.features_of_kind(KENLM)),
        all_names=tuple(f.name for f in ini.features),
    )


class _LM(Protocol):
    def phrase_estimate(self, tokens: list[str]) -> float: ...


class Combiner:
    """Scores phrase pairs with a CombinerConfig (loads the LMs once)."""

    def __init__(self, config: CombinerConfig, source_name: str = "<table>") -> None:
        self.config = config
        self.source_name = source_name
        self._lms: list[tuple[float, _LM]] = []
        if config.lms:
            from rescorer.moses.lm import KenLM  # deferred: kenlm only when an LM is used

            self._lms = [(term.weight, KenLM(term.path)) for term in config.lms]

    def score(self, entry: PhraseEntry) -> float:
        """The weighted score Moses gives ``entry`` for table-limit pruning (natural log)."""
        config = self.config
        try:
            total = 0.0
            for weight, value in zip(config.table_weights, entry.scores, strict=True):
                total += weight * max(math.log(value), LOGP_FLOOR)
        except ValueError:  # ln of 0 or of a negative number: rare, done again with care
            total = self._table_score_with_zeros(entry)
        tokens = entry.tgt_tokens
        total += config.phrase_penalty - config.word_penalty * len(tokens)
        for weight, lm in self._lms:
            total += weight * lm.phrase_estimate(tokens)
        return total

    def _table_score_with_zeros(self, entry: PhraseEntry) -> float:
        total = 0.0
        for col, (weight, value) in enumerate(
            zip(self.config.table_weights, entry.scores, strict=True)
        ):
            if value < 0.0:
                raise InputError(
                    self.source_name,
                    entry.lineno,
                    f"score column {col} is {value:g}: Moses takes ln() of every column, "
                    "so values must be probabilities (> 0)",
                )
            # ln 0 = -inf, floored like every other column
            total += weight * (max(math.log(value), LOGP_FLOOR) if value else LOGP_FLOOR)
        return total


def format_combined(value: float) -> str:
    return f"{value:.8g}"


def combined_lines(
    entries: Iterable[PhraseEntry], combiner: Combiner, *, column_only: bool = False
) -> Iterator[str]:
    """Each entry's line with ``" ||| <score>"`` appended, or just the score (``column_only``)."""
    for entry in entries:
        value = format_combined(combiner.score(entry))
        yield value if column_only else f"{entry.line()}{FIELD_SEP}{value}"


@dataclass(frozen=True)
class CombineStats:
    lines: int


def combine_table(
    table_path: str,
    out_path: str,
    weights: WeightSpec,
    *,
    column_only: bool = False,
    progress_every: float = 0.0,
) -> CombineStats:
    """``rescorer combine``: stream a table, write each pair's combined score (a progress
    line every ``progress_every`` seconds off a terminal; 0: none)."""
    from rescorer.io.inputs import display_name
    from rescorer.io.outputs import open_output
    from rescorer.io.progress import Progress
    from rescorer.io.table import read_table

    progress = Progress(
        f"rescorer combine {display_name(table_path)}", "lines", every=progress_every
    )
    # closed here, not by the garbage collector: an abandoned reader's gzip thread
    # joined from a collection in another thread's start-up can deadlock
    table = read_table(table_path, progress=progress)
    try:
        first, entries = peek(table)
        if first is None:  # an empty table gives an empty output
            with open_output(out_path):
                return CombineStats(0)
        combiner = Combiner(
            weights.require().combiner_config(len(first.scores)), display_name(table_path)
        )
        lines = 0
        with open_output(out_path) as out:
            for line in combined_lines(entries, combiner, column_only=column_only):
                out.write(line)
                out.write("\n")
                lines += 1
        return CombineStats(lines)
    finally:
        table.close()


def peek(entries: Iterator[PhraseEntry]) -> tuple[PhraseEntry | None, Iterator[PhraseEntry]]:
    """The first entry (None if there is none) and an iterator over all of them."""
    first = next(entries, None)
    if first is None:
        return None, iter(())
    return first, itertools.chain((first,), entries)
