"""The stages a scoring run hands to its worker processes: parse and validate a chunk into id
arrays (:func:`parse_chunk`), format the new columns into its lines (:func:`format_chunk`), the
worker's start (:func:`init_worker`), and a stand-in for the pool when there are no workers. No
torch here: workers start without it."""

from __future__ import annotations

import hashlib
import signal
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from rescorer.io.chunks import Chunk
from rescorer.io.files import gzip_member, iter_raw_lines, open_binary
from rescorer.io.table import column_texts, insert_columns, parse_raw_line, split_columns
from rescorer.score.pairs import GroupedPairs, GroupedPairsBuilder, encode_columns
from rescorer.vocab import Vocab

_vocabs: tuple[Vocab, Vocab] | None = None


def init_worker(src_vocab: Vocab, tgt_vocab: Vocab, in_pool: bool = False) -> None:
    """The worker's vocabularies. A pool worker ignores SIGINT: Ctrl-C reaches the whole
    process group, and the parent alone handles it (keeps OUT.partial, terminates the pool);
    a worker interrupted inside the pool's queue lock would leave the parent hanging."""
    global _vocabs
    _vocabs = (src_vocab, tgt_vocab)
    if in_pool:
        signal.signal(signal.SIGINT, signal.SIG_IGN)


@dataclass
class ParsedChunk:
    chunk_offset: int
    chunk_len: int
    first_line: int
    lines_in: int
    lines: list[bytes]  # good lines without newline
    cuts: list[int]  # byte offset of the end of each good line's score field
    pairs: GroupedPairs
    unk: np.ndarray  # (N,) int32 target words outside the shortlist
    bad: list[tuple[int, str, bytes]]  # (line number, message, raw line)
    last_unterminated: bool = False  # the input's last line, kept, has no final newline
    chunk_sha256: str = ""  # of the chunk's input bytes


def parse_chunk(
    chunk: Chunk, num_scores: int | None, name: str, digest: bool = False
) -> ParsedChunk:
    """Validate and encode a chunk (runs in a worker); with ``digest`` also hash its bytes (for
    a shard's manifest)."""
    assert _vocabs is not None
    src_vocab, tgt_vocab = _vocabs
    bad: list[tuple[int, str, bytes]] = []
    columns = split_columns(chunk.data, num_scores)  # the whole chunk at once, if it can
    if columns is not None:
        raw_lines = lines = columns.lines
        cuts = columns.cuts
        pairs, unk = encode_columns(src_vocab, tgt_vocab, columns.src, columns.tgt)
    else:  # some line is bad or unusual: line by line, naming the bad ones
        raw_lines = chunk.data.split(b"\n")
        if raw_lines and raw_lines[-1] == b"":
            raw_lines.pop()
        lines, cuts = [], []
        builder = GroupedPairsBuilder(src_vocab, tgt_vocab)
        unk_counts: list[int] = []
        for i, raw in enumerate(raw_lines):
            lineno = chunk.first_line + i
            entry = parse_raw_line(raw, lineno, num_scores)
            if isinstance(entry, str):
                bad.append((lineno, entry, raw))
                continue
            lines.append(raw)
            rest = entry.rest.encode("utf-8")
            cuts.append(len(raw) - len(rest))
            tgt_tokens = entry.tgt_tokens
            builder.add(entry.src, tgt_tokens)
            unk_counts.append(tgt_vocab.unk_count(tgt_tokens))
        pairs = builder.build()
        unk = np.asarray(unk_counts, dtype=np.int32)
    unterminated = bool(raw_lines) and not chunk.data.endswith(b"\n")
    last_kept = unterminated and not (bad and bad[-1][0] == chunk.first_line + len(raw_lines) - 1)
    return ParsedChunk(
        chunk.offset,
        len(chunk.data),
        chunk.first_line,
        len(raw_lines),
        lines,
        cuts,
        pairs,
        unk,
        bad,
        last_kept,
        hashlib.sha256(chunk.data).hexdigest() if digest else "",
    )


def format_chunk(
    lines: list[bytes],
    cuts: list[int],
    logp: np.ndarray,
    unk: np.ndarray,
    column: str,
    word_penalty: bool,
    compresslevel: int | None,
    last_unterminated: bool = False,
) -> bytes:
    """The chunk's lines with the new column(s) in the score field; gzip member if asked. With
    ``last_unterminated`` the last line gets no newline, as the input's last line had none."""
    texts = column_texts(logp.tolist(), column, unk.tolist() if word_penalty else None)
    data = insert_columns(lines, cuts, texts)
    if last_unterminated and data:
        data = data[:-1]
    if compresslevel is not None:
        return gzip_member(data, compresslevel)
    return data


class Inline:
    """The subset of a multiprocessing Pool used here, run in the calling process."""

    def apply_async(self, func: Callable[..., Any], args: tuple[Any, ...]) -> _Done:
        return _Done(func(*args))

    def close(self) -> None:
        pass

    def terminate(self) -> None:
        pass

    def join(self) -> None:
        pass


class _Done:
    def __init__(self, value: Any) -> None:
        self.value = value

    def get(self) -> Any:
        return self.value

    def ready(self) -> bool:
        return True


def first_num_scores(path: str) -> int | None:
    """The score count of the input's first well-formed line (what every line must match)."""
    with open_binary(path) as stream:
        return num_scores_of(iter_raw_lines(stream, path), 1)


def num_scores_of(raw_lines: Iterable[bytes], first_line: int) -> int | None:
    """The score count of the first well-formed line among ``raw_lines``."""
    for lineno, raw in enumerate(raw_lines, start=first_line):
        entry = parse_raw_line(raw, lineno, None) if raw.strip(b"\n") else ""
        if not isinstance(entry, str):
            return len(entry.scores)
    return None
