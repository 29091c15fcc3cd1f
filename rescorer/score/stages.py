"""The stages a scoring run hands to its worker processes: parse and validate a chunk into id
arrays (:func:`parse_chunk`), format the new columns into its lines (:func:`format_chunk`), the
worker's start (:func:`init_worker`), and a stand-in for the pool when there are no workers. No
torch here: workers start without it."""

from __future__ import annotations

import hashlib
import signal
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from rescorer.constants import FORWARD
from rescorer.io.chunks import Chunk
from rescorer.io.columns import (
    ChunkColumns,
    column_texts,
    insert_at,
    insert_prob_columns,
    split_columns,
)
from rescorer.io.outputs import gzip_member
from rescorer.io.shared import SharedText, as_bytes, keep_freed_memory
from rescorer.io.table import parse_raw_line, split_tokens
from rescorer.score.pairs import (
    GroupedPairs,
    GroupedPairsBuilder,
    count_unknown,
    encode_inverse,
    encode_spans,
)
from rescorer.score.plan import Plan, plan_chunk
from rescorer.vocab import Vocab


@dataclass(frozen=True)
class ModelSides:
    """What a worker needs of one model: its shortlists and what it conditions on."""

    src_vocab: Vocab  # the model's encoder side (an inverse model's: the table's targets)
    tgt_vocab: Vocab
    direction: str = FORWARD
    plan: tuple[int, int] | None = None  # (target rows, readout rows): the worker plans the
    # chunk's trees for the scorer (plan_chunk), so the main process, which feeds the device,
    # does not


def word_penalty_model(models: Sequence[ModelSides]) -> int:
    """The model whose shortlist of the table's target words counts --word-penalty's unknown
    words: the first forward model (its target shortlist, as with one model), else the first
    model (an inverse model's source shortlist holds the table's target words)."""
    return next((i for i, m in enumerate(models) if m.direction == FORWARD), 0)


_models: list[ModelSides] | None = None


def init_worker(
    models: Sequence[ModelSides] | Vocab, tgt_vocab: Vocab | None = None, in_pool: bool = False
) -> None:
    """The worker's models' shortlists: a list of ModelSides, or one forward model's source and
    target shortlists (as the benchmarks call it). A pool worker ignores SIGINT: Ctrl-C reaches
    the whole process group, and the parent alone handles it (keeps OUT.partial, terminates the
    pool); a worker interrupted inside the pool's queue lock would leave the parent hanging."""
    global _models
    if isinstance(models, Vocab):
        assert tgt_vocab is not None
        _models = [ModelSides(models, tgt_vocab)]
    else:
        _models = list(models)
    if in_pool:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        keep_freed_memory()


@dataclass
class ParsedChunk:
    chunk_offset: int
    chunk_len: int
    first_line: int
    lines_in: int
    # The good lines, each with its newline (an unterminated last one without); where they
    # are the whole chunk and it came in shared memory, its slot (rescorer.io.shared).
    text: bytes | SharedText
    cuts: np.ndarray  # (N,) int64 where each good line's score field ends in text
    by_model: list[GroupedPairs]  # one per model, in its direction
    orders: list[np.ndarray | None]  # per model: None (line order) or (N,) the line of each pair
    unk: np.ndarray  # (N,) int32 target words outside the shortlist (word_penalty_model's)
    bad: list[tuple[int, str, bytes]]  # (line number, message, raw line)
    last_unterminated: bool = False  # the input's last line, kept, has no final newline
    chunk_sha256: str = ""  # of the chunk's input bytes
    plans: list[Plan | None] = field(default_factory=list)  # per model, with ModelSides.plan

    @property
    def lines(self) -> list[bytes]:
        """The good lines without newline (copies: for messages and tests)."""
        lines = as_bytes(self.text).split(b"\n")
        if lines[-1] == b"":
            lines.pop()
        return lines

    @property
    def num_lines(self) -> int:
        """The good lines, what the chunk writes."""
        return len(self.cuts)

    @property
    def pairs(self) -> GroupedPairs:
        """The first model's pairs (what a one-model caller reads)."""
        return self.by_model[0]


def parse_chunk(
    chunk: Chunk, num_scores: int | None, name: str, digest: bool = False
) -> ParsedChunk:
    """Validate and encode a chunk (runs in a worker) once for every model: a forward model's
    pairs in line order, an inverse model's grouped by target (:func:`encode_inverse`); with
    ``digest`` also hash its bytes (for a shard's manifest)."""
    assert _models is not None
    data = chunk.content()
    # The whole chunk at once, if it can; where a forward model encodes the phrases in place,
    # the spaces it found are kept for it.
    spaces = any(m.direction == FORWARD for m in _models)
    columns = split_columns(data, num_scores, keep_spaces=spaces)
    text: bytes | SharedText
    if columns is not None:
        lines_in = len(columns.starts)
        # Every line is kept: no copy; from shared memory, the formatter reads the same slot.
        text = data if chunk.shared is None else chunk.shared
        cuts = columns.score_ends
        pairs, orders, unk = _encode_columns(_models, columns)
        bad: list[tuple[int, str, bytes]] = []
    else:  # some line is bad or unusual: line by line, naming the bad ones
        raw_lines = data.split(b"\n")
        if raw_lines and raw_lines[-1] == b"":
            raw_lines.pop()
        lines_in = len(raw_lines)
        lines, line_cuts, (pairs, orders, unk), bad = _parse_lines(
            _models, raw_lines, chunk.first_line, num_scores
        )
        starts = np.cumsum([0] + [len(line) + 1 for line in lines], dtype=np.int64)[:-1]
        cuts = starts + np.asarray(line_cuts, dtype=np.int64)
        text = b"".join(line + b"\n" for line in lines)
    unterminated = lines_in > 0 and not data.endswith(b"\n")
    last_kept = unterminated and not (bad and bad[-1][0] == chunk.first_line + lines_in - 1)
    if last_kept and isinstance(text, bytes) and text.endswith(b"\n"):
        text = text[:-1]  # the input's last line had no newline
    plans = [
        plan_chunk(p, *m.plan) if m.plan is not None and p.num_pairs else None
        for m, p in zip(_models, pairs, strict=True)
    ]
    return ParsedChunk(
        chunk.offset,
        len(data),
        chunk.first_line,
        lines_in,
        text,
        cuts,
        pairs,
        orders,
        unk,
        bad,
        last_kept,
        hashlib.sha256(data).hexdigest() if digest else "",
        plans if any(plan is not None for plan in plans) else [],
    )


Encoded = tuple[list[GroupedPairs], list[np.ndarray | None], np.ndarray]  # pairs, orders, unk


def _word_penalty_vocab(models: Sequence[ModelSides]) -> Vocab:
    """The shortlist --word-penalty counts with (:func:`word_penalty_model`)."""
    wp = models[word_penalty_model(models)]
    return wp.tgt_vocab if wp.direction == FORWARD else wp.src_vocab


def _encode_columns(models: Sequence[ModelSides], columns: ChunkColumns) -> Encoded:
    """The fast path: a chunk's plain columns encoded for every model at once, a forward
    model's from where the phrases lie in the chunk (:func:`encode_spans`)."""
    wp = word_penalty_model(models)
    text = np.frombuffer(columns.data, dtype=np.uint8)
    spans = (columns.starts, columns.src_ends, columns.tgt_starts, columns.tgt_ends)
    pairs: list[GroupedPairs] = []
    orders: list[np.ndarray | None] = []
    unk: np.ndarray | None = None
    for i, m in enumerate(models):
        if m.direction == FORWARD:
            grouped, tgt_unk = encode_spans(m.src_vocab, m.tgt_vocab, text, spans, columns)
            pairs.append(grouped)
            orders.append(None)
            if i == wp:
                unk = tgt_unk
        else:
            src_col, tgt_col = columns.src, columns.tgt
            grouped, order = encode_inverse(m.src_vocab, m.tgt_vocab, src_col, tgt_col)
            pairs.append(grouped)
            orders.append(order)
    if unk is None:
        unk = count_unknown(_word_penalty_vocab(models), columns.tgt)
    return pairs, orders, unk


def _parse_lines(
    models: Sequence[ModelSides],
    raw_lines: list[bytes],
    first_line: int,
    num_scores: int | None,
) -> tuple[list[bytes], list[int], Encoded, list[tuple[int, str, bytes]]]:
    """The exact path, line by line: the good lines, their cuts, their encoding for every
    model, and the bad lines (number, message, raw line)."""
    wp_vocab = _word_penalty_vocab(models)
    bad: list[tuple[int, str, bytes]] = []
    lines, cuts = [], []
    builders = [
        GroupedPairsBuilder(m.src_vocab, m.tgt_vocab) if m.direction == FORWARD else None
        for m in models
    ]
    plain_src: list[bytes] = []  # the phrases with single spaces, for the inverse models
    plain_tgt: list[bytes] = []
    unk_counts: list[int] = []
    for i, raw in enumerate(raw_lines):
        lineno = first_line + i
        entry = parse_raw_line(raw, lineno, num_scores)
        if isinstance(entry, str):
            bad.append((lineno, entry, raw))
            continue
        lines.append(raw)
        rest = entry.rest.encode("utf-8")
        cuts.append(len(raw) - len(rest))
        tgt_tokens = entry.tgt_tokens
        for builder in builders:
            if builder is not None:
                builder.add(entry.src, tgt_tokens)
        if None in builders:
            plain_src.append(" ".join(split_tokens(entry.src)).encode("utf-8"))
            plain_tgt.append(" ".join(tgt_tokens).encode("utf-8"))
        unk_counts.append(wp_vocab.unk_count(tgt_tokens))
    pairs: list[GroupedPairs] = []
    orders: list[np.ndarray | None] = []
    for m, builder in zip(models, builders, strict=True):
        if builder is not None:
            pairs.append(builder.build())
            orders.append(None)
        else:
            grouped, order = encode_inverse(m.src_vocab, m.tgt_vocab, plain_src, plain_tgt)
            pairs.append(grouped)
            orders.append(order)
    return lines, cuts, (pairs, orders, np.asarray(unk_counts, dtype=np.int32)), bad


def format_chunk(
    text: bytes | SharedText,
    cuts: np.ndarray,
    logp: np.ndarray,
    unk: np.ndarray,
    column: str,
    word_penalty: bool,
    compresslevel: int | None,
) -> bytes:
    """The chunk's lines (``text``, a ParsedChunk's) with the new column(s) at the end of each
    score field (``cuts``); a gzip member if asked. ``logp`` is (N,) for one model or (N,M)
    for M, one column each in that order, then the word penalty."""
    text = as_bytes(text)
    by_model = logp[:, None] if logp.ndim == 1 else logp  # (N,M)
    if column == "prob":  # the common case, with numpy over the chunk
        data = insert_prob_columns(text, cuts, by_model, unk if word_penalty else None)
        return data if compresslevel is None else gzip_member(data, compresslevel)
    last = by_model.shape[1] - 1
    per_model = [
        column_texts(
            by_model[:, k].tolist(),
            column,
            unk.tolist() if word_penalty and k == last else None,
            " " if k == 0 else "",
        )
        for k in range(last + 1)
    ]
    texts = per_model[0] if last == 0 else list(map(b" ".join, zip(*per_model, strict=True)))
    data = insert_at(text, cuts.tolist(), texts)
    if compresslevel is not None:
        return gzip_member(data, compresslevel)
    return data
