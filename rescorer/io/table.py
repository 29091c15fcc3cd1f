"""Moses phrase tables in and out, losslessly, one line at a time: the owner of the format.

A line is ``src ||| tgt ||| s1 s2 ... ||| align ||| counts ||| sparse ||| props`` with exactly
``" ||| "`` between fields (docs/moses-formats.md §1.1). Reading splits off the source, the
target and the dense score field and keeps the rest of the line as it was, so an unchanged entry
is written back byte for byte and appending a column touches nothing outside the score field.
Here are the line grammar, its limits, the number grammar every reader of rescorer uses
(:func:`parse_number`), the score formats and the streaming reader (:class:`TableReader`).
Two neighbours read table text by this grammar: :mod:`rescorer.io.columns` (whole chunks at
once, the scoring workers' fast path) and :mod:`rescorer.io.reordering` (is it a lexicalised
reordering table?). Opening is :mod:`rescorer.io.inputs`', atomic writing
:mod:`rescorer.io.outputs`'.
"""

from __future__ import annotations

import math
import os
from collections.abc import Generator, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import BinaryIO

from rescorer.constants import DEFAULT_GZIP_LEVEL, FIELD_SEP, FIELD_SEP_B, GZIP_MAGIC, LOGP_FLOOR
from rescorer.errors import InputError
from rescorer.io.inputs import (
    InputMeter,
    display_name,
    gzip_text_size,
    iter_raw_lines,
    open_binary,
    open_input,
)
from rescorer.io.outputs import open_output
from rescorer.io.progress import Progress

PROGRESS_LINES = 8192  # lines between progress checks (each check is one clock read)

EXPECTED_SHAPE = "'src ||| tgt ||| score1 score2 ... [||| align ||| counts ||| ...]'"


@dataclass(frozen=True, slots=True)
class PhraseEntry:
    """One phrase-table line, split where rescorer needs it and otherwise kept verbatim."""

    lineno: int  # 1-based physical line number in the input
    src: str  # source phrase as in the file (tokens separated by spaces)
    tgt: str  # target phrase as in the file
    scores: tuple[float, ...]  # the dense scores, parsed
    score_field: str  # the dense score field exactly as in the file
    rest: str  # everything after the score field: "" or " ||| align ||| ..."

    @property
    def src_tokens(self) -> list[str]:
        return split_tokens(self.src)

    @property
    def tgt_tokens(self) -> list[str]:
        return split_tokens(self.tgt)

    @property
    def counts(self) -> tuple[float, ...] | None:
        """The counts field (Moses: target, source and joint counts), None when absent or
        not numbers (docs/contracts.md §8: only the scores are validated)."""
        fields = self.rest.split("|||")
        if len(fields) < 3:
            return None
        try:
            return tuple(parse_number(x) for x in fields[2].split())
        except ValueError:
            return None

    def line(self) -> str:
        """The original line, without its newline."""
        return f"{self.src}{FIELD_SEP}{self.tgt}{FIELD_SEP}{self.score_field}{self.rest}"

    def line_with_columns(self, texts: Sequence[str]) -> str:
        """The line with ``texts`` appended to the dense score field, without newline."""
        scores = " ".join((self.score_field, *texts)) if texts else self.score_field
        return f"{self.src}{FIELD_SEP}{self.tgt}{FIELD_SEP}{scores}{self.rest}"


def split_tokens(phrase: str) -> list[str]:
    """Tokens of a phrase: split on spaces and tabs as Moses does (not on other Unicode space)."""
    return [tok for tok in phrase.replace("\t", " ").split(" ") if tok]


def format_score(value: float) -> str:
    """A number the way Moses writes scores: C++ ``ostream << float``, i.e. ``%g``."""
    return f"{value:g}"


def format_prob(logp: float) -> str:
    """The probability column for Moses: exp(logp), floored at e^-100, never 0 or negative.

    ``%g`` keeps six significant digits, so ln(value) is within 5e-6 of ``logp`` (relative).
    """
    return f"{math.exp(max(logp, LOGP_FLOOR)):g}"


def format_logp(logp: float) -> str:
    """Raw natural-log probability (``--column logp``): eight significant digits."""
    return f"{logp:.8g}"


# Limits (docs/score.md, Limits): a longer line, or a phrase of more tokens, is a bad line (refused
# with its number, or skipped with --skip-bad-lines): the model's cost grows with the tokens,
# and no phrase table of a real system comes near either.
MAX_LINE_BYTES = 1 << 20
MAX_PHRASE_TOKENS = 256
EXCERPT_CHARS = 40  # the most of a bad token an error message quotes


def excerpt(text: str) -> str:
    """``text`` quoted for a message: whole when short, else its start and its length."""
    if len(text) <= EXCERPT_CHARS:
        return repr(text)
    return f"{text[:EXCERPT_CHARS]!r}... ({len(text):,} characters)"


def parse_number(text: str) -> float:
    """A number of a Moses text file (table scores and counts, n-best features, ini weights):
    the one grammar every reader of rescorer uses. ``float(text)`` limited to ASCII without
    ``_``: Python's float() alone also takes ``1_000`` and non-ASCII digits (Arabic-Indic
    ``١٢``, full-width ``１２``), where Moses reads ASCII decimal numbers only. Raises
    ValueError as float() does; ``inf`` and ``nan`` parse (callers say they are not finite).
    """
    if "_" in text or not text.isascii():
        raise ValueError(f"not a number: {text!r}")
    return float(text)


def parse_scores(text: str) -> tuple[float, ...] | str:
    """Parse a dense score field; return the scores, or a message saying what is wrong."""
    tokens = text.replace("\t", " ").split(" ")
    values = []
    for col, tok in enumerate(tokens, start=1):
        if not tok:
            continue
        try:
            value = parse_number(tok)
        except ValueError:
            return f"score {col} is {excerpt(tok)}, expected a number"
        if not math.isfinite(value):
            return f"score {col} is {excerpt(tok)}, expected a finite number"
        values.append(value)
    if not values:
        return "the score field is empty, expected at least one number"
    return tuple(values)


def parse_line(text: str, lineno: int) -> PhraseEntry | str:
    """Split a decoded line (no newline); return the entry, or what is wrong with it."""
    if "\r" in text:
        return (
            "found a carriage return (CR) in the line (a Windows or old Mac text file?), "
            "expected lines that end in LF only"
        )
    if "\0" in text:  # not text: Moses would copy it into its translations
        return (
            f"found a NUL byte at character {text.index(chr(0)) + 1} of the line (a binary "
            "file?), expected text"
        )
    fields = text.split(FIELD_SEP, 3)
    if len(fields) < 3:
        return f"found {len(fields)} field(s) separated by ' ||| ', expected {EXPECTED_SHAPE}"
    src, tgt, score_field = fields[0], fields[1], fields[2]
    if not src.strip(" \t"):
        return f"empty source phrase, expected {EXPECTED_SHAPE}"
    if not tgt.strip(" \t"):
        return f"empty target phrase, expected {EXPECTED_SHAPE}"
    for side, phrase in (("source", src), ("target", tgt)):
        if len(phrase) > MAX_PHRASE_TOKENS and len(split_tokens(phrase)) > MAX_PHRASE_TOKENS:
            return (
                f"a {side} phrase of {len(split_tokens(phrase)):,} tokens, expected at most "
                f"{MAX_PHRASE_TOKENS} (docs/score.md, Limits)"
            )
    scores = parse_scores(score_field)
    if isinstance(scores, str):
        return scores
    rest = FIELD_SEP + fields[3] if len(fields) == 4 else ""
    return PhraseEntry(lineno, src, tgt, scores, score_field, rest)


def parse_raw_line(raw: bytes, lineno: int, num_scores: int | None) -> PhraseEntry | str:
    """Decode and parse one raw line (newline stripped or not); the entry or what is wrong.

    ``num_scores``: the score count every line must have (that of the first line), if known.
    """
    if len(raw) > MAX_LINE_BYTES + 1:
        return (
            f"a line of {len(raw):,} bytes, expected at most {MAX_LINE_BYTES:,} "
            "(docs/score.md, Limits)"
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"invalid UTF-8 ({exc.reason} at byte {exc.start})"
    entry = parse_line(text[:-1] if text.endswith("\n") else text, lineno)
    if isinstance(entry, str) or num_scores is None or len(entry.scores) == num_scores:
        return entry
    return f"found {len(entry.scores)} scores, expected {num_scores} (the count of the first line)"


def _source_fields(path: str) -> Iterator[bytes]:
    """The raw source field of every line of the table ``path``, in one pass that looks at
    nothing else (a line without ``" ||| "`` is an InputError)."""
    name = display_name(path)
    with open_binary(path) as stream:
        for lineno, raw in enumerate(iter_raw_lines(stream, path), start=1):
            end = raw.find(FIELD_SEP_B)
            if end < 0:
                raise InputError(name, lineno, f"found 1 field, expected {EXPECTED_SHAPE}")
            yield raw[:end]


def sources_among(path: str, phrases: Iterable[str]) -> set[str]:
    """The ``phrases`` that are source phrases of the table ``path`` (one pass over its source
    fields)."""
    wanted = {phrase.encode("utf-8") for phrase in phrases}
    found = {source for source in _source_fields(path) if source in wanted}
    return {phrase.decode("utf-8") for phrase in found}


def source_words(path: str) -> set[bytes]:
    """Every word of every source phrase of the table ``path``, as bytes (split on ASCII white
    space; one pass over its source fields)."""
    words: set[bytes] = set()
    for source in _source_fields(path):
        words.update(source.split())
    return words


@dataclass
class ReadStats:
    """What a reader saw: every input line is either read or skipped as bad."""

    lines: int = 0
    bad: int = 0
    num_scores: int | None = None
    bad_examples: list[str] = field(default_factory=list)


class TableReader:
    """Stream the entries of a Moses phrase table, validating each line (docs/contracts.md §8).

    Use as a context manager; iterate to get PhraseEntry objects. With ``skip_bad_lines`` a
    malformed line is written to that file (verbatim) and counted instead of stopping the run.
    """

    def __init__(
        self, path: str, *, skip_bad_lines: str | None = None, progress: Progress | None = None
    ) -> None:
        """With ``progress``, it is told the lines read and the share of the input every
        PROGRESS_LINES lines (and closed at the end)."""
        self.path = path
        self.name = display_name(path)
        self.skip_bad_lines = skip_bad_lines
        self.stats = ReadStats()
        self._stack: list[object] = []
        self._bad_out: BinaryIO | None = None
        self.progress = progress
        self._meter = InputMeter()
        self._text_size: int | None = None

    def __enter__(self) -> TableReader:
        if self.progress is not None and self.path != "-" and os.path.isfile(self.path):
            # The decompressed size (gzip trailer) or the plain size: the share of the text
            # read is exact, where the compressed position runs megabytes ahead.
            self._text_size = gzip_text_size(self.path)
            if self._text_size is None and not _is_gzip(self.path):
                self._text_size = os.path.getsize(self.path)
        self._binary_cm = open_binary(self.path, self._meter)
        self._stream = self._binary_cm.__enter__()
        if self.skip_bad_lines is not None:
            self._bad_out = open(self.skip_bad_lines, "wb")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bad_out is not None:
            self._bad_out.close()
        if self.progress is not None:
            self.progress.close()
        self._binary_cm.__exit__(None, None, None)

    def _fraction(self, text_bytes: int) -> float | None:
        if self._text_size:
            return min(1.0, text_bytes / self._text_size)
        return self._meter.fraction()

    def _bad(self, raw: bytes, lineno: int, message: str) -> None:
        if self._bad_out is None:
            raise InputError(self.name, lineno, message)
        self.stats.bad += 1
        if len(self.stats.bad_examples) < 5:
            self.stats.bad_examples.append(f"{self.name}:{lineno}: {message}")
        self._bad_out.write(raw if raw.endswith(b"\n") else raw + b"\n")

    def __iter__(self) -> Iterator[PhraseEntry]:
        stats = self.stats
        progress = self.progress
        text_bytes = 0
        for lineno, raw in enumerate(iter_raw_lines(self._stream, self.path), start=1):
            stats.lines = lineno
            if progress is not None:
                text_bytes += len(raw)
                if lineno % PROGRESS_LINES == 0:
                    progress.update(lineno, self._fraction(text_bytes))
            entry = parse_raw_line(raw, lineno, stats.num_scores)
            if isinstance(entry, str):
                self._bad(raw, lineno, entry)
                continue
            if stats.num_scores is None:
                stats.num_scores = len(entry.scores)
            yield entry


def _is_gzip(path: str) -> bool:
    with open_input(path) as f:  # an unreadable input: one line naming it
        return f.read(2) == GZIP_MAGIC


def read_table(
    path: str, *, skip_bad_lines: str | None = None, progress: Progress | None = None
) -> Generator[PhraseEntry, None, None]:
    """Stream the entries of a phrase table (see TableReader)."""
    with TableReader(path, skip_bad_lines=skip_bad_lines, progress=progress) as reader:
        yield from reader


def copy_table(
    src_path: str,
    out_path: str,
    *,
    skip_bad_lines: str | None = None,
    compresslevel: int = DEFAULT_GZIP_LEVEL,
) -> ReadStats:
    """Read and rewrite a table through the parser (a lossless round trip, used by tests/bench)."""
    with TableReader(src_path, skip_bad_lines=skip_bad_lines) as reader:
        with open_output(out_path, compresslevel=compresslevel) as out:
            write = out.write
            for entry in reader:
                write(entry.line())
                write("\n")
        return reader.stats
