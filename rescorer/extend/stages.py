"""What an ``extend`` job's worker processes run: read a chunk into its source phrases (with
the targets the table already has for each), and write a chunk's output (the original lines
with the provenance column and the new lines among them in byte order, or the new lines
alone). No torch here: workers start without it."""

from __future__ import annotations

import hashlib
import heapq
import signal
from collections.abc import Sequence
from dataclasses import dataclass, field

from rescorer.io.chunks import Chunk
from rescorer.io.outputs import gzip_member
from rescorer.io.table import parse_raw_line

ORIGINAL, GENERATED = b"1", b"2.718"  # the provenance column: exp(0), exp(1) (combine-ptables)

_wanted: frozenset[str] | None = None  # the --input n-grams, or None for every source


def init_worker(wanted: frozenset[str] | None, in_pool: bool = False) -> None:
    """A worker's start: the source phrases to generate for (None: all). A pool worker leaves
    SIGINT to its parent (rescorer.score.stages.init_worker says why)."""
    global _wanted
    _wanted = wanted
    if in_pool:
        signal.signal(signal.SIGINT, signal.SIG_IGN)


@dataclass
class SourceGroup:
    """The lines of one source phrase in a chunk."""

    src: str  # the phrase, single-spaced
    first: int  # index of its first line among the chunk's good lines
    end: int  # one past its last
    known: set[str] = field(default_factory=set)  # its targets, single-spaced
    wanted: bool = True  # generate for it (--input)


@dataclass
class ExtendChunk:
    chunk_offset: int
    chunk_len: int
    first_line: int
    lines_in: int
    lines: list[bytes]  # good lines without newline
    cuts: list[int]  # byte offset of the end of each good line's score field
    groups: list[SourceGroup]
    bad: list[tuple[int, str, bytes]]  # (line number, message, raw line)
    last_unterminated: bool = False
    chunk_sha256: str = ""

    def line_of(self, good: int) -> int:
        """The input line number of good line ``good`` (its index among ``lines``)."""
        lineno = self.first_line + good
        for bad_line in sorted(b[0] for b in self.bad):  # good line i sits after these
            if bad_line <= lineno:
                lineno += 1
        return lineno


def parse_chunk(
    chunk: Chunk, num_scores: int | None, name: str, digest: bool = False
) -> ExtendChunk:
    """Validate a chunk's lines (as score does) and group them by source phrase. A source
    whose lines are not together (an unsorted table) is one group per run of lines; the
    targets it has are those of all its runs in the chunk (the chunk holds all of them: chunks
    are cut at source boundaries of a grouped table)."""
    data = chunk.content()
    raw_lines = data.split(b"\n")
    if raw_lines and raw_lines[-1] == b"":
        raw_lines.pop()
    lines: list[bytes] = []
    cuts: list[int] = []
    bad: list[tuple[int, str, bytes]] = []
    groups: list[SourceGroup] = []
    known: dict[str, set[str]] = {}
    for i, raw in enumerate(raw_lines):
        lineno = chunk.first_line + i
        entry = parse_raw_line(raw, lineno, num_scores)
        if isinstance(entry, str):
            bad.append((lineno, entry, raw))
            continue
        src = " ".join(entry.src_tokens)
        if not groups or groups[-1].src != src:
            targets = known.setdefault(src, set())
            wanted = _wanted is None or src in _wanted
            groups.append(SourceGroup(src, len(lines), len(lines), targets, wanted))
        groups[-1].known.add(" ".join(entry.tgt_tokens))
        groups[-1].end = len(lines) + 1
        lines.append(raw)
        cuts.append(len(raw) - len(entry.rest.encode("utf-8")))
    seen: set[str] = set()
    for group in groups:  # a source's later runs generate nothing more
        if group.src in seen:
            group.wanted = False
        seen.add(group.src)
    unterminated = bool(raw_lines) and not data.endswith(b"\n")
    last_kept = unterminated and not (bad and bad[-1][0] == chunk.first_line + len(raw_lines) - 1)
    return ExtendChunk(
        chunk.offset,
        len(data),
        chunk.first_line,
        len(raw_lines),
        lines,
        cuts,
        groups,
        bad,
        last_kept,
        hashlib.sha256(data).hexdigest() if digest else "",
    )


def new_line(src: str, tgt: str, scores: Sequence[str], alignment: str) -> bytes:
    """A generated pair's line: its scores, its alignment (empty without one: Moses reads an
    empty field as no alignment), counts 0 0 0 (the pair was never extracted), and the empty
    sparse-feature field a Moses table has."""
    return f"{src} ||| {tgt} ||| {' '.join(scores)} ||| {alignment} ||| 0 0 0 ||| |||".encode()


def format_chunk(
    lines: list[bytes],
    cuts: list[int],
    spans: list[tuple[int, int]],
    new_lines: list[list[bytes]],
    fill_up: bool,
    compresslevel: int | None,
    last_unterminated: bool = False,
) -> bytes:
    """The chunk's output. ``spans[g]`` are source group g's lines, ``new_lines[g]`` its new
    pairs' lines. Fill-up: every original line with the provenance column 1 and each group's
    new lines (2.718) among its lines in byte order, which keeps a table in Moses' byte order
    (a group's lines share the bytes ``src |||`` no other line has); otherwise the new lines
    alone."""
    out: list[bytes] = []
    for (first, end), new in zip(spans, new_lines, strict=True):
        if not fill_up:
            out += sorted(new)
            continue
        originals = (
            lines[i][: cuts[i]] + b" " + ORIGINAL + lines[i][cuts[i] :] for i in range(first, end)
        )
        out += heapq.merge(originals, sorted(new)) if new else originals
    data = b"".join(line + b"\n" for line in out)
    if fill_up and last_unterminated and data and not new_lines[-1]:
        data = data[:-1]  # the input's last line had no newline
    if compresslevel is not None:
        return gzip_member(data, compresslevel)
    return data
