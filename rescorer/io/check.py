"""``rescorer check``: validate a whole phrase table in one pass and describe it.

Every line is parsed as ``score`` parses it (fields, ASCII decimal scores, the first line's score
count, UTF-8, no carriage return); the gzip stream is read to its end (a truncated or corrupt
file is an error); sources are checked to come in Moses' order (whole lines sorted by bytes, so
"a b ||| ..." before "a ||| ..."), in which each source is one contiguous group (what shards and
chunks cut at). Its kind, from the first lines: a phrase table or a lexicalised reordering table
(which score and train refuse). Statistics: lines, distinct sources, targets
per source, phrase lengths, and with a model's shortlists, how many tokens they cover.

No torch: coverage takes any container of words (a Vocab, a set).
"""

from __future__ import annotations

from collections.abc import Container, Iterator
from dataclasses import dataclass, field

from rescorer.errors import InputError
from rescorer.io.inputs import display_name, iter_raw_lines, open_binary
from rescorer.io.reordering import SNIFF_LINES, TableKind, table_kind
from rescorer.io.table import parse_raw_line, split_tokens

MAX_EXAMPLES = 10


@dataclass
class TableCheck:
    """What ``check_table`` found."""

    path: str
    lines: int = 0
    bad: int = 0
    errors: list[tuple[int, str]] = field(default_factory=list)  # first MAX_EXAMPLES (line, what)
    num_scores: int | None = None
    sources: int = 0  # distinct source groups
    out_of_order: int = 0  # lines whose source sorts before the previous line's
    first_out_of_order: str | None = None
    max_targets: int = 0  # the most targets of one source
    src_tokens: int = 0  # over distinct sources
    tgt_tokens: int = 0  # over all pairs
    max_src_len: int = 0
    max_tgt_len: int = 0
    src_covered: int = 0  # tokens in the source shortlist (when given)
    tgt_covered: int = 0
    pairs_covered: int = 0  # pairs with every word in the shortlists
    unterminated: bool = False  # the last line has no newline (kept as it is by score)
    kind: TableKind | None = None  # from the first SNIFF_LINES lines

    @property
    def ok(self) -> bool:
        return self.bad == 0

    def summary(self, with_coverage: bool) -> Iterator[str]:
        """The report, line by line."""
        pairs = self.lines - self.bad
        yield f"{self.path}: {self.lines:,} lines, {self.bad:,} malformed"
        if self.kind is not None and self.lines:
            refused = ", which score and train refuse" if self.kind.reordering else ""
            yield f"kind: {self.kind.what}{refused}"
        for lineno, message in self.errors:
            yield f"  {self.path}:{lineno}: {message}"
        if self.bad > len(self.errors):
            yield f"  ... and {self.bad - len(self.errors):,} more"
        if not pairs:
            return
        yield f"score columns: {self.num_scores}"
        yield (
            f"distinct sources: {self.sources:,}; targets per source: "
            f"{pairs / max(self.sources, 1):.2f} on average, {self.max_targets:,} at most"
        )
        yield (
            f"source length: {self.src_tokens / max(self.sources, 1):.2f} words on average, "
            f"{self.max_src_len} at most; target length: {self.tgt_tokens / pairs:.2f}, "
            f"{self.max_tgt_len} at most"
        )
        if self.out_of_order:
            yield (
                f"source order: {self.out_of_order:,} line(s) out of Moses' byte order (first: "
                f"{self.first_out_of_order}); a source that comes back later is scored in "
                "two groups: sort with LC_ALL=C sort before sharding"
            )
        else:
            yield "source order: sorted by bytes, every source one contiguous group"
        if self.unterminated:
            yield "the last line has no final newline (kept as it is)"
        if with_coverage:
            yield (
                f"shortlist coverage: {100 * self.src_covered / max(self.src_tokens, 1):.2f}% of "
                f"source words, {100 * self.tgt_covered / max(self.tgt_tokens, 1):.2f}% of "
                f"target words; {100 * self.pairs_covered / pairs:.2f}% of pairs have no word "
                "outside them"
            )


def check_table(
    path: str, src_words: Container[str] | None = None, tgt_words: Container[str] | None = None
) -> TableCheck:
    """Read all of ``path`` and report on it (see the module docstring). Malformed lines are
    counted, not raised; a corrupt or truncated gzip stream raises InputError."""
    result = TableCheck(display_name(path))
    name = result.path
    previous: bytes | None = None
    targets = 0
    last_raw = b""
    first_lines: list[bytes] = []
    with open_binary(path) as stream:
        for lineno, raw in enumerate(iter_raw_lines(stream, path), start=1):
            result.lines = lineno
            last_raw = raw
            if lineno <= SNIFF_LINES:
                first_lines.append(raw)
            entry = parse_raw_line(raw, lineno, result.num_scores)
            if isinstance(entry, str):
                result.bad += 1
                if len(result.errors) < MAX_EXAMPLES:
                    result.errors.append((lineno, entry))
                continue
            if result.num_scores is None:
                result.num_scores = len(entry.scores)
            # Moses sorts whole lines (LC_ALL=C): sources compare with their " ||| " attached
            src = entry.src.encode("utf-8") + b" ||| "
            tgt_tokens = split_tokens(entry.tgt)
            if src != previous:
                if previous is not None and src < previous:
                    result.out_of_order += 1
                    if result.first_out_of_order is None:
                        result.first_out_of_order = f"{name}:{lineno}"
                result.sources += 1
                targets = 0
                src_tokens = split_tokens(entry.src)
                result.src_tokens += len(src_tokens)
                result.max_src_len = max(result.max_src_len, len(src_tokens))
                src_unknown = 0
                if src_words is not None:
                    covered = sum(tok in src_words for tok in src_tokens)
                    result.src_covered += covered
                    src_unknown = len(src_tokens) - covered
                previous = src
            targets += 1
            result.max_targets = max(result.max_targets, targets)
            result.tgt_tokens += len(tgt_tokens)
            result.max_tgt_len = max(result.max_tgt_len, len(tgt_tokens))
            if tgt_words is not None:
                covered = sum(tok in tgt_words for tok in tgt_tokens)
                result.tgt_covered += covered
                if covered == len(tgt_tokens) and src_unknown == 0:
                    result.pairs_covered += 1
    result.unterminated = bool(last_raw) and not last_raw.endswith(b"\n")
    result.kind = table_kind(first_lines)
    return result


def first_error(path: str) -> InputError | None:
    """The first malformed line of ``path`` as the InputError ``score`` would raise, or None."""
    found = check_table(path)
    if found.ok:
        return None
    lineno, message = found.errors[0]
    return InputError(found.path, lineno, message)
