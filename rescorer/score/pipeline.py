"""``rescorer score``: stream a phrase table through the model and append the feature column(s).

Stages (docs/contracts.md §2, §4, §8):

- the reader cuts the decompressed input into chunks at source-phrase boundaries
  (:mod:`rescorer.io.chunks`: the same cuts in a single run, a resumed run and a shard);
- workers parse and validate each chunk and turn it into id arrays (:func:`parse_chunk`);
- the main process scores the chunk on the device (:class:`rescorer.score.Scorer`);
- workers format the new columns into the lines and compress them, one gzip member per chunk
  (a multi-member gzip file, which zcat, Python and Moses read as one stream);
- the main process writes chunks in input order to ``OUT.partial`` and records its progress in
  ``OUT.partial.json``; on success the partial file is renamed to OUT. ``--resume`` truncates the
  partial file to the last recorded chunk and goes on from there.

Memory is bounded by ``chunk_bytes`` times the number of chunks in flight, never by the table.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import glob
import hashlib
import itertools
import json
import multiprocessing
import os
import signal
import sys
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field, replace
from typing import IO, Any

import numpy as np

from rescorer.constants import (
    CONFIG_FILE,
    DEFAULT_GZIP_LEVEL,
    SRC_VOCAB_FILE,
    TGT_VOCAB_FILE,
    WEIGHTS_FILE,
)
from rescorer.errors import InputError, RescorerError
from rescorer.io.chunks import Chunk, iter_chunks, shard_bounds
from rescorer.io.files import (
    GZIP_MEMBER_LEVELS,
    InputMeter,
    display_name,
    gzip_member,
    gzip_text_size,
    iter_raw_lines,
    open_binary,
    read_json,
    write_json,
)
from rescorer.io.progress import DEFAULT_EVERY, Progress
from rescorer.io.table import (
    column_texts,
    insert_columns,
    parse_raw_line,
    split_columns,
)
from rescorer.score.pairs import GroupedPairs, GroupedPairsBuilder, encode_columns
from rescorer.score.profile import Phases, nothing
from rescorer.score.shards import (
    chain_sha256,
    file_sha256,
    manifest_path,
    read_part,
    write_manifest,
)
from rescorer.vocab import Vocab

DEFAULT_CHUNK_BYTES = 1 << 20
# Options that do not change the output's bytes: a --resume run may change them.
NOT_IN_RUN_KEY = ("resume", "quiet", "workers", "progress_every", "profile")


@dataclass(frozen=True)
class ScoreConfig:
    """Options of ``rescorer score`` (flag names match field names)."""

    column: str = "prob"  # "prob" (exp(log p), what Moses expects) or "logp"
    word_penalty: bool = False  # also append exp(#target words outside the shortlist)
    device: str = "auto"
    precision: str = "auto"
    batch_tokens: int | None = None  # padded tokens per batch; None: 4096 on CPU, 65536 on GPU
    chunk_bytes: int = DEFAULT_CHUNK_BYTES
    workers: int | str = 0  # parse/format worker processes; 0 = in the main process; "auto"
    compile: str = "auto"  # torch.compile the steps and readout: "yes", "no", "auto" (big tables)
    shard: tuple[int, int] | None = None  # (K, N): the K-th (1-based) of N shards
    resume: bool = False
    compresslevel: int = DEFAULT_GZIP_LEVEL
    skip_bad_lines: str | None = None
    quiet: bool = False
    progress_every: float = DEFAULT_EVERY  # seconds between progress lines off a terminal; 0: off
    profile: bool = False  # print where the time went (rescorer/score/profile.py)

    def __post_init__(self) -> None:
        """Out-of-range values are errors here too, not only on the command line."""
        if isinstance(self.workers, str) and self.workers != "auto":
            raise RescorerError(f"--workers {self.workers!r}: expected a count or auto")
        for flag, value, low, high in (
            ("--chunk-bytes", self.chunk_bytes, 1, None),
            ("--workers", self.workers if isinstance(self.workers, int) else None, 0, None),
            ("--batch-tokens", self.batch_tokens, 1, None),
            ("--compress-level", self.compresslevel, *GZIP_MEMBER_LEVELS),
        ):
            if value is not None and (value < low or (high is not None and value > high)):
                span = f"{low} to {high}" if high is not None else f"at least {low}"
                raise RescorerError(f"{flag} {value}: expected {span}")


@dataclass
class ScoreStats:
    lines_in: int = 0
    lines_out: int = 0
    bad: int = 0
    pairs_scored: int = 0
    seconds: float = 0.0
    resumed_from_line: int = 0
    device: str = ""
    precision: str = ""
    bad_examples: list[str] = field(default_factory=list)
    next_offset: int = 0  # the input offset the output covers up to
    range_sha256: str = ""  # chained over the chunks written (shards.chain_sha256)
    earlier_seconds: float = 0.0  # spent by the runs this one resumed
    started: float = field(default_factory=time.monotonic)
    already_done: bool = False  # a finished shard found as its manifest says: nothing redone
    phases: Phases | None = None  # with --profile: where the time went


# ------------------------------------------------------------------------------ workers
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


# ------------------------------------------------------------------------------ the run
class _Inline:
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


def _first_num_scores(path: str) -> int | None:
    """The score count of the input's first well-formed line (what every line must match)."""
    with open_binary(path) as stream:
        return _num_scores(iter_raw_lines(stream, path), 1)


def _num_scores(raw_lines: Iterable[bytes], first_line: int) -> int | None:
    """The score count of the first well-formed line among ``raw_lines``."""
    for lineno, raw in enumerate(raw_lines, start=first_line):
        entry = parse_raw_line(raw, lineno, None) if raw.strip(b"\n") else ""
        if not isinstance(entry, str):
            return len(entry.scores)
    return None


TAIL_BYTES = 1 << 16  # the output bytes a progress record vouches for by hash
HEAD_BYTES = 1 << 20  # the input bytes at each end that its fingerprint hashes


def _tail_sha256(path: str, end: int) -> str:
    """sha256 of the TAIL_BYTES of ``path`` before offset ``end``."""
    start = max(0, end - TAIL_BYTES)
    with open(path, "rb") as f:
        f.seek(start)
        return hashlib.sha256(f.read(end - start)).hexdigest()


def _input_fingerprint(path: str) -> dict[str, Any]:
    """Size and sha256 of the first and last HEAD_BYTES: cheap on 10^9-line tables, and a
    table that was rewritten, appended to or truncated since the record changes it."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = hashlib.sha256(f.read(HEAD_BYTES)).hexdigest()
        f.seek(max(0, size - HEAD_BYTES))
        tail = hashlib.sha256(f.read(HEAD_BYTES)).hexdigest()
    return {"bytes": size, "head_sha256": head, "tail_sha256": tail}


def _model_fingerprint(model_dir: str) -> str | None:
    """sha256 over the files that decide the scores (config, vocabularies, weights)."""
    digest = hashlib.sha256()
    try:
        for name in (CONFIG_FILE, SRC_VOCAB_FILE, TGT_VOCAB_FILE, WEIGHTS_FILE):
            with open(os.path.join(model_dir, name), "rb") as f:
                for block in iter(functools.partial(f.read, 1 << 20), b""):
                    digest.update(block)
    except OSError:
        return None  # load_model_dir has said what is missing
    return digest.hexdigest()


def _same_file(a: str, b: str) -> bool:
    """Whether two names are one file (same device and inode), so links and ./ tricks count."""
    try:
        sa, sb = os.stat(a), os.stat(b)
    except OSError:
        return False
    return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)


@dataclass
class _Resume:
    """Where a run starts: the input offset and line, and what the outputs already hold."""

    offset: int = 0
    first_line: int = 1
    out_bytes: int = 0
    bad_bytes: int = 0
    stats: dict[str, Any] = field(default_factory=dict)


class _Output:
    """OUT.partial plus its progress record OUT.partial.json (or stdout, not resumable)."""

    def __init__(self, out: str, run_key: dict[str, Any], skip_bad_lines: str | None) -> None:
        self.out = out
        self.partial, self.record = out + ".partial", out + ".partial.json"
        self.run_key = json.loads(json.dumps(run_key))
        self.skip_bad_lines = skip_bad_lines
        self.sink: IO[bytes] | None = None
        self.bad_out: IO[bytes] | None = None
        self.lock_path, self.lock_fd = self.partial + ".lock", -1
        self.tail = bytearray()

    def lock(self) -> None:
        """Take OUT.partial.lock (an exclusive flock holding our pid) or refuse, naming the pid
        of the run that holds it. The kernel drops the lock when a run dies, however it dies."""
        if self.out == "-":
            return
        if os.path.isdir(self.out):
            raise RescorerError(f"{self.out}: is a folder, expected a file name to write")
        try:
            fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o666)
        except OSError as exc:
            raise RescorerError(f"{self.out}: cannot write beside it: {exc.strerror}") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            other = os.read(fd, 32).decode("ascii", "replace").strip() or "unknown"
            os.close(fd)
            raise RescorerError(
                f"{self.out}: another rescorer score (pid {other}) is writing it; wait for it to "
                "end or write elsewhere"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode("ascii"))
        self.lock_fd = fd
        # A run killed while it replaced its record or wrote its manifest leaves the temporary
        # file behind; the lock says that run is gone, so its leftovers can go.
        for path in (self.record, manifest_path(self.out)):
            folder, name = os.path.split(os.path.abspath(path))
            pattern = os.path.join(glob.escape(folder), f".{glob.escape(name)}.*.tmp")
            for leftover in glob.glob(pattern):
                _remove(leftover)

    def unlock(self) -> None:
        if self.lock_fd >= 0:
            _remove(self.lock_path)
            os.close(self.lock_fd)
            self.lock_fd = -1

    def load_resume(self, fresh: _Resume) -> _Resume:
        """Where the recorded run stopped, or ``fresh`` (the run's own start) without a record.

        The record must be for this input (path and fingerprint), this model directory (path
        and content hash) and these options, and OUT.partial must still hold what it says.
        """
        if not os.path.exists(self.record):
            return fresh
        state = read_json(self.record, what="the progress record of an interrupted run")
        again = "run without --resume to start over"
        old = state.get("run", {}) if isinstance(state, dict) else {}
        for key, what in (
            ("table", "for another input table"),
            ("input", "for other input content (the table changed since)"),
            ("model_dir", "for another model directory"),
            ("model", "for another model (the model directory changed since)"),
            ("config", "with other options"),
        ):
            if old.get(key) != self.run_key.get(key):
                raise RescorerError(f"{self.record}: was written {what}; {again}")
        out_bytes = int(state["out_bytes"])
        try:
            size = os.path.getsize(self.partial)
        except OSError:
            raise RescorerError(
                f"{self.partial}: missing, but {self.record} says {out_bytes} bytes were "
                f"written; {again}"
            ) from None
        if size < out_bytes:
            raise RescorerError(
                f"{self.partial}: {size} bytes, shorter than the {out_bytes} its record says "
                f"(lost in a crash or power loss?); {again}"
            )
        if _tail_sha256(self.partial, out_bytes) != state.get("tail_sha256"):
            raise RescorerError(
                f"{self.partial}: its last written bytes differ from its record; {again}"
            )
        return _Resume(
            state["offset"],
            state["next_line"],
            state["out_bytes"],
            state["bad_bytes"],
            state["stats"],
        )

    def open(self, resume: _Resume) -> None:
        if self.out == "-":
            self.sink = sys.stdout.buffer
        else:
            sink = open(self.partial, "r+b" if resume.out_bytes else "wb")  # noqa: SIM115
            sink.truncate(resume.out_bytes)
            if resume.out_bytes:  # the tail the record hashed, to go on hashing from
                start = max(0, resume.out_bytes - TAIL_BYTES)
                sink.seek(start)
                self.tail = bytearray(sink.read(resume.out_bytes - start))
            sink.seek(resume.out_bytes)
            self.sink = sink
        if self.skip_bad_lines:
            mode = "r+b" if resume.bad_bytes else "wb"
            bad_out = open(self.skip_bad_lines, mode)  # noqa: SIM115
            bad_out.truncate(resume.bad_bytes)
            bad_out.seek(resume.bad_bytes)
            self.bad_out = bad_out

    def write(self, data: bytes, bad_lines: list[bytes]) -> None:
        assert self.sink is not None
        self.sink.write(data)
        self.tail += data
        del self.tail[:-TAIL_BYTES]  # the last TAIL_BYTES written, kept for the record's hash
        if bad_lines:
            assert self.bad_out is not None
            self.bad_out.write(b"".join(line + b"\n" for line in bad_lines))

    def checkpoint(self, offset: int, next_line: int, stats: ScoreStats) -> None:
        """Record that the input up to ``offset`` is in the output (after flushing both)."""
        if self.out == "-":
            return
        assert self.sink is not None
        for f in (self.sink, self.bad_out):  # what the record promises reaches the disk first
            if f is not None:
                f.flush()
                os.fsync(f.fileno())
        out_bytes = self.sink.tell()
        state = {
            "run": self.run_key,
            "offset": offset,
            "next_line": next_line,
            "out_bytes": out_bytes,
            "tail_sha256": hashlib.sha256(self.tail).hexdigest(),
            "bad_bytes": self.bad_out.tell() if self.bad_out is not None else 0,
            "stats": {
                "lines_in": stats.lines_in,
                "lines_out": stats.lines_out,
                "bad": stats.bad,
                "range_sha256": stats.range_sha256,
                "seconds": stats.earlier_seconds + time.monotonic() - stats.started,
            },
        }
        write_json(self.record, state, indent=None, ensure_ascii=True, fsync=True)

    def close(self, ok: bool, keep_partial: bool, manifest: dict[str, Any] | None = None) -> None:
        """Rename OUT.partial to OUT if ``ok`` (writing OUT.manifest.json first if given, so a
        finished shard is never without one); else remove it unless ``keep_partial``."""
        if self.bad_out is not None:
            self.bad_out.close()
        if self.out == "-":
            if ok and self.sink is not None:
                self.sink.flush()
            return
        if self.sink is not None:
            self.sink.close()
        if ok:
            if manifest is not None:
                write_manifest(self.out, manifest, data_path=self.partial)
            # The record goes first: killed in between, a --resume run finds OUT.partial
            # without a record and starts afresh, never a record whose partial file is gone.
            _remove(self.record)
            os.replace(self.partial, self.out)
        elif not keep_partial:  # bad input or a crash: leave nothing behind
            _remove(self.partial)
            _remove(self.record)
        self.unlock()


COMPILE_MIN_BYTES = 4 << 20


def resolve_workers(workers: int | str, device: Any) -> int:
    """``auto``: on a GPU one parse/format process per core but one (at most 16), so a
    many-core host can feed the device; on the CPU none, as the model's threads need the cores
    (and ScoreConfig's count as it is otherwise)."""
    if workers != "auto":
        return int(workers)
    if getattr(device, "type", "cpu") != "cuda":
        return 0
    return max(1, min(16, (os.cpu_count() or 2) - 1))


def want_compile(choice: str, table: str) -> bool:
    """``auto`` compiles for input files of at least 4 MiB: compiling costs tens of seconds once
    and pays off after some ten thousand pairs."""
    if choice not in ("auto", "yes", "no"):
        raise RescorerError(f"--compile {choice!r}: expected auto, yes or no")
    if choice != "auto":
        return choice == "yes"
    return table != "-" and os.path.isfile(table) and os.path.getsize(table) >= COMPILE_MIN_BYTES


def score_table(table: str, model_dir: str, out: str, config: ScoreConfig) -> ScoreStats:
    """Append the log p(y|x) feature column(s) to every line of ``table``; write ``out``.

    Raises InputError at the first malformed line (unless ``skip_bad_lines``), leaving no output.
    """
    import torch

    from rescorer.device import resolve_device, resolve_precision
    from rescorer.model.checkpoint import load_model_dir
    from rescorer.score.scorer import Scorer

    if out == "-" and config.resume:
        raise RescorerError("--resume needs an output file, not stdout")
    regular = table != "-" and os.path.isfile(table)  # stdin, a FIFO, <(...) can be read once
    for flag, path in (("-o", out), ("--skip-bad-lines", config.skip_bad_lines)):
        if regular and path not in (None, "-") and _same_file(table, str(path)):
            raise RescorerError(f"{flag} {path} is the input table itself: write elsewhere")
    if not regular and (config.resume or config.shard):
        raise RescorerError("--resume and --shard need a regular input file, not stdin or a pipe")
    device = resolve_device(config.device)
    precision = resolve_precision(config.precision, device, "score")
    loaded = load_model_dir(model_dir, device=device)
    batch_tokens = config.batch_tokens or (4096 if device.type == "cpu" else 65536)
    compile_ = want_compile(config.compile, table)
    scorer = Scorer(loaded.model, precision, batch_tokens, compile_)
    workers = resolve_workers(config.workers, device)
    if workers != config.workers:
        config = replace(config, workers=workers)
    if device.type == "cpu" and workers > 0:
        torch.set_num_threads(max(1, torch.get_num_threads()))
    phases = Phases(device) if config.profile else None
    if phases is not None:
        scorer.phase = phases
    stats = ScoreStats(device=str(device), precision=precision)
    start, first_line, end = 0, 1, None
    shard_range = None
    if config.shard is not None:
        shard_range = shard_bounds(table, config.chunk_bytes, config.shard)
        start, first_line, end = shard_range.start, shard_range.first_line, shard_range.end
    stats.next_offset = start
    run_key = {
        "table": os.path.abspath(table) if table != "-" else "-",
        "input": _input_fingerprint(table) if regular else None,
        "model_dir": os.path.abspath(model_dir),
        "model": _model_fingerprint(model_dir),
        "config": {k: v for k, v in asdict(config).items() if k not in NOT_IN_RUN_KEY},
    }
    manifest: dict[str, Any] | None = None
    if shard_range is not None and config.shard is not None and out != "-":
        options = {
            "column": config.column,
            "word_penalty": config.word_penalty,
            "precision": precision,
            "device_type": device.type,
            "batch_tokens": batch_tokens,
            "chunk_bytes": config.chunk_bytes,
            "compile": compile_,
            "gzip": out.endswith(".gz"),
            "compresslevel": config.compresslevel if out.endswith(".gz") else None,
            "skip_bad_lines": config.skip_bad_lines is not None,
        }
        manifest = {
            "shard": {"k": config.shard[0], "n": config.shard[1]},
            "input": run_key["input"],
            "input_path": run_key["table"],
            "range": {
                "start": shard_range.start,
                "end": shard_range.end,
                "first_line": shard_range.first_line,
                "input_bytes": shard_range.input_bytes,
            },
            "model": {"sha256": run_key["model"]},
            "model_path": run_key["model_dir"],
            "options": options,
        }
    output = _Output(out, run_key, config.skip_bad_lines)
    output.lock()  # one run per OUT: a second one is refused, naming the first one's pid
    fresh = _Resume(start, first_line)  # a shard starts at its own first chunk
    try:
        if config.resume and manifest is not None and _finished_shard(output, manifest, stats):
            output.unlock()  # a re-run of a finished task (a requeue): nothing to redo
            return stats
        resume = output.load_resume(fresh) if config.resume else fresh
    except BaseException:
        output.unlock()
        raise
    if resume.stats:
        stats.lines_in = resume.stats["lines_in"]
        stats.lines_out = resume.stats["lines_out"]
        stats.bad = resume.stats["bad"]
        stats.range_sha256 = resume.stats.get("range_sha256", "")
        stats.earlier_seconds = resume.stats.get("seconds", 0.0)
        stats.resumed_from_line = resume.first_line
        stats.next_offset = resume.offset
    name = display_name(table)
    pool: Any = _Inline()
    progress = Progress(
        f"rescorer score {name}", "pairs", every=config.progress_every, enabled=not config.quiet
    )
    meter = InputMeter()
    # The decompressed size, where the gzip trailer tells it: the decompressing thread reads
    # megabytes ahead, so the compressed position says little on a table of a few MB.
    text_size = gzip_text_size(table) if regular else None

    def fraction() -> float | None:
        if shard_range is not None:  # the shard's own range of the decompressed input
            span = max(shard_range.end - shard_range.start, 1)
            return (stats.next_offset - shard_range.start) / span
        if text_size and stats.next_offset <= text_size:
            return stats.next_offset / text_size
        return meter.fraction()

    t0 = time.monotonic()
    ok = interrupted = False
    try:  # from here on an error leaves no OUT.partial behind (unless interrupted)
        output.open(resume)
        num_scores = _first_num_scores(table) if regular else None  # a pipe: its first chunk
        if workers > 0:
            # Started with SIGINT ignored, which a new interpreter inherits through exec and
            # keeps: a Ctrl-C while a worker still imports cannot interrupt it either.
            handler = signal.signal(signal.SIGINT, signal.SIG_IGN)
            try:
                pool = multiprocessing.get_context("spawn").Pool(
                    workers,
                    initializer=init_worker,
                    initargs=(loaded.src_vocab, loaded.tgt_vocab, True),
                )
            finally:
                signal.signal(signal.SIGINT, handler)
        else:
            init_worker(loaded.src_vocab, loaded.tgt_vocab)
        with open_binary(table, meter) as stream:
            chunks = iter_chunks(
                stream, config.chunk_bytes, start=resume.offset, first_line=resume.first_line
            )
            if not regular:  # read once: the score count comes from the first chunk itself
                first = next(chunks, None)
                if first is not None:
                    num_scores = _num_scores(first.data.split(b"\n"), first.first_line)
                    chunks = itertools.chain([first], chunks)
            if end is not None:
                chunks = (c for c in chunks if c.offset < end)
            _run(
                chunks,
                pool,
                scorer,
                output,
                config,
                num_scores,
                name,
                stats,
                lambda: progress.update(stats.pairs_scored, fraction()),
                out,
                phases or nothing,
            )
        if shard_range is not None and stats.next_offset != shard_range.end:
            raise RescorerError(
                f"{name}: the input ended at byte {stats.next_offset}, but shard "
                f"{config.shard} should end at byte {shard_range.end}: did it change?"
            )
        if out.endswith(".gz") and output.sink is not None and output.sink.tell() == 0:
            # no line, no member: an empty gzip member keeps OUT a valid gzip file
            output.write(gzip_member(b"", config.compresslevel), [])
        ok = True
    except KeyboardInterrupt:
        interrupted = True  # keep OUT.partial and its record for --resume
        raise
    finally:
        progress.close()
        (pool.close if ok else pool.terminate)()
        pool.join()
        if ok and manifest is not None:
            manifest = _completed(manifest, stats, device)
        output.close(ok, keep_partial=interrupted, manifest=manifest)
    stats.seconds = time.monotonic() - t0
    stats.phases = phases
    return stats


def _completed(manifest: dict[str, Any], stats: ScoreStats, device: Any) -> dict[str, Any]:
    """The shard's manifest with what the finished run found (shards.py owns the format)."""
    import platform

    import torch

    from rescorer import __version__

    done = dict(manifest)
    done["range"] = {**manifest["range"], "sha256_chain": stats.range_sha256}
    done["lines"] = {"in": stats.lines_in, "out": stats.lines_out, "bad": stats.bad}
    done["versions"] = {
        "rescorer": __version__,
        "torch": torch.__version__,
        "python": platform.python_version(),
    }
    done["host"] = platform.node()
    done["device"] = _device_name(device)
    done["seconds"] = round(stats.earlier_seconds + time.monotonic() - stats.started, 3)
    done["finished_utc"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return done


def _device_name(device: Any) -> str:
    import torch

    if device.type == "cuda":
        return f"{device} ({torch.cuda.get_device_name(device)})"
    return "cpu"


def _finished_shard(output: _Output, manifest: dict[str, Any], stats: ScoreStats) -> bool:
    """Whether OUT is this very shard, finished, as its manifest says: same input, model,
    options and range, and OUT's bytes unchanged. Then ``stats`` is filled from it."""
    if os.path.exists(output.record) or not os.path.exists(manifest_path(output.out)):
        return False
    try:
        found = read_part(output.out).manifest
    except RescorerError:
        return False
    for key in ("shard", "input", "model", "options"):
        if found.get(key) != manifest[key]:
            return False
    if {k: found["range"].get(k) for k in manifest["range"]} != manifest["range"]:
        return False
    if file_sha256(output.out) != (found["output"]["bytes"], found["output"]["sha256"]):
        return False
    lines = found["lines"]
    stats.lines_in, stats.lines_out, stats.bad = lines["in"], lines["out"], lines.get("bad", 0)
    stats.next_offset = manifest["range"]["end"]
    stats.already_done = True
    return True


def _run(
    chunks: Iterator[Chunk],
    pool: Any,
    scorer: Any,
    output: _Output,
    config: ScoreConfig,
    num_scores: int | None,
    name: str,
    stats: ScoreStats,
    progress: Callable[[], None],
    out: str,
    phase: Callable[[str], contextlib.AbstractContextManager[None]] = nothing,
) -> None:
    """Parse ahead in the pool, score in order, format in the pool, write in order."""
    gz_level = config.compresslevel if out.endswith(".gz") else None
    workers = config.workers
    assert isinstance(workers, int)  # score_table resolved "auto" to a count
    ahead = max(2, 2 * workers)  # chunks being parsed at once (bounds memory)
    parsing: deque[Any] = deque()
    formatting: deque[tuple[Any, ParsedChunk]] = deque()

    def submit_parse() -> None:
        while len(parsing) < ahead:
            with phase("read"):
                chunk = next(chunks, None)
            if chunk is None:
                return
            args = (chunk, num_scores, name, config.shard is not None)
            with phase("parse"):
                parsing.append(pool.apply_async(parse_chunk, args))

    def write_ready(limit: int) -> None:
        while len(formatting) > limit or (formatting and formatting[0][0].ready()):
            result, parsed = formatting.popleft()
            with phase("format"):
                data = result.get()
            with phase("write"):
                output.write(data, [raw for _, _, raw in parsed.bad])
            stats.lines_in += parsed.lines_in
            stats.lines_out += len(parsed.lines)
            stats.bad += len(parsed.bad)
            stats.next_offset = parsed.chunk_offset + parsed.chunk_len
            if parsed.chunk_sha256:  # shards only: their manifest vouches for the range
                stats.range_sha256 = chain_sha256(stats.range_sha256, parsed.chunk_sha256)
            for lineno, message, _ in parsed.bad[: max(0, 5 - len(stats.bad_examples))]:
                stats.bad_examples.append(f"{name}:{lineno}: {message}")
            with phase("write"):
                output.checkpoint(
                    parsed.chunk_offset + parsed.chunk_len,
                    parsed.first_line + parsed.lines_in,
                    stats,
                )
            progress()

    submit_parse()
    while parsing:
        with phase("parse"):
            parsed: ParsedChunk = parsing.popleft().get()
        submit_parse()
        if parsed.bad and config.skip_bad_lines is None:
            lineno, message, _ = parsed.bad[0]
            raise InputError(name, lineno, message)
        logp = scorer.score(parsed.pairs)
        stats.pairs_scored += len(logp)
        args = (parsed.lines, parsed.cuts, logp, parsed.unk, config.column, config.word_penalty)
        with phase("format"):
            result = pool.apply_async(format_chunk, (*args, gz_level, parsed.last_unterminated))
        parsed.pairs = _EMPTY_PAIRS  # only what the writer needs stays in memory
        formatting.append((result, parsed))
        write_ready(limit=max(1, workers))
    write_ready(limit=0)


_EMPTY_PAIRS = GroupedPairs(
    np.zeros(0, np.int32),
    np.zeros(1, np.int64),
    np.zeros(0, np.int64),
    np.zeros(0, np.int32),
    np.zeros(1, np.int64),
)


def _remove(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
