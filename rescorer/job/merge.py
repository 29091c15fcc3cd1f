"""``rescorer merge``: check a set of shard outputs against their manifests
(:mod:`rescorer.job.shards`, the format's owner) and against each other (one model, one input,
one set of options, shards 1..N each once, ranges that meet end to start) and concatenate them:
gzip parts are multi-member gzip files cut at the same chunk boundaries as a single run, so the
merged file equals the single run's output byte for byte, with no recompression.

No torch here: merging runs on a login node.
"""

from __future__ import annotations

import hashlib
import os
import time
import zlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, BinaryIO

from rescorer.constants import GZIP_MAGIC
from rescorer.errors import RescorerError
from rescorer.io.inputs import open_binary
from rescorer.io.outputs import atomic_path, open_output_binary, open_writable, writes_in_place
from rescorer.job.shards import BLOCK, SUFFIX, Part, read_part

# The keys every shard of one table must share, and what to call them in a refusal.
SHARED = (
    ("input", "input table (size or content)"),
    ("model", "model (weights, vocabularies or config)"),
    ("options", "options"),
)
# Each output line is its input line and the new column(s): " " and a number ("%g" or "%.8g",
# at most 15 characters) each, one column per model and one for --word-penalty.
MAX_ADDED_PER_COLUMN = 16
FIRST_PIECE = 4096  # compressed bytes fed to a new gzip member at first (doubling after)


def parts_from_glob(pattern: str) -> list[str]:
    """The part files whose manifests match ``pattern`` (e.g. 'pt.part*.gz.manifest.json')."""
    import glob

    manifests = sorted(glob.glob(pattern))
    if not manifests:
        raise RescorerError(f"--manifest-glob {pattern!r}: matches no file")
    wrong = [m for m in manifests if not m.endswith(SUFFIX)]
    if wrong:
        raise RescorerError(f"--manifest-glob: {wrong[0]} is not a {SUFFIX} file")
    return [m[: -len(SUFFIX)] for m in manifests]


def check_parts(parts: Sequence[Part]) -> list[Part]:
    """The parts in shard order, after every check that needs no part's bytes."""
    if not parts:
        raise RescorerError("merge: no parts given")
    first = parts[0]
    for part in parts[1:]:
        if part.n != first.n:
            raise RescorerError(
                f"{part.name}: one of {part.n} shards, but {first.name} is one of {first.n}"
            )
        for key, what in SHARED:
            if part.manifest.get(key) != first.manifest.get(key):
                diff = _first_difference(first.manifest.get(key), part.manifest.get(key))
                raise RescorerError(f"{part.name}: another {what} than {first.name}{diff}")
    by_k: dict[int, Part] = {}
    for part in parts:
        if not 1 <= part.k <= part.n:
            raise RescorerError(f"{part.name}: shard number out of range")
        if part.k in by_k:
            raise RescorerError(
                f"shard {part.k}/{part.n} given twice: {by_k[part.k].path} and {part.path}"
            )
        by_k[part.k] = part
    missing = [k for k in range(1, first.n + 1) if k not in by_k]
    if missing:
        shown = ", ".join(f"{k}/{first.n}" for k in missing[:10])
        more = f" and {len(missing) - 10} more" if len(missing) > 10 else ""
        raise RescorerError(f"missing shard(s) {shown}{more}: score them, then merge again")
    ordered = [by_k[k] for k in range(1, first.n + 1)]
    end, line = 0, 1
    for part in ordered:
        rng = part.manifest["range"]
        if int(rng["start"]) != end or int(rng.get("first_line", line)) != line:
            raise RescorerError(
                f"{part.name}: starts at byte {rng['start']} (line {rng.get('first_line')}) of "
                f"the input, but the shards before it end at byte {end} (line {line})"
            )
        end, line = int(rng["end"]), line + int(part.manifest["lines"]["in"])
    total = first.manifest["range"].get("input_bytes")
    if total is not None and end != int(total):
        raise RescorerError(
            f"{ordered[-1].name}: the shards end at byte {end} of an input of {total} bytes"
        )
    return ordered


def _first_difference(a: Any, b: Any, path: str = "") -> str:
    """': key x is A here, B there' for the first differing key of two JSON values."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            if a.get(key) != b.get(key):
                return _first_difference(a.get(key), b.get(key), f"{path}.{key}" if path else key)
    return f": {path or 'value'} {b!r} against {a!r}"


@dataclass
class MergeStats:
    shards: int = 0
    lines_in: int = 0
    lines_out: int = 0
    bad: int = 0
    bytes: int = 0
    seconds: float = 0.0
    devices: tuple[str, ...] = ()
    command: str = "score"  # what wrote the parts: score or extend

    def lines(self) -> str:
        """The line counts as the summary says them: a scored part writes each line it reads
        but the bad ones, an extend part its new pairs (and, fill-up, the table's lines)."""
        if self.command == "score":
            return f"{self.lines_out:,} of {self.lines_in:,} lines ({self.bad:,} bad)"
        return (
            f"{self.lines_out:,} lines written by {self.command} from {self.lines_in:,} input "
            f"lines ({self.bad:,} bad)"
        )


def merge(out: str, part_paths: Sequence[str]) -> MergeStats:
    """Check the parts (module docstring) and write their concatenation to ``out`` atomically
    (``-``: stdout; stdout, a device or a FIFO once every part has been checked whole).

    Each part's bytes are hashed as they are copied; a part whose size or sha256 differs from
    its manifest stops the merge, naming the shard, and ``out`` is left as it was.
    """
    t0 = time.monotonic()
    for path in part_paths:
        if out != "-" and os.path.exists(out) and os.path.samefile(out, path):
            raise RescorerError(f"{out}: is one of the parts; write the merged table elsewhere")
    ordered = check_parts([read_part(p) for p in part_paths])
    stats = MergeStats(shards=len(ordered))
    stats.command = str(ordered[0].manifest.get("command", "score"))
    gzip_out = bool(ordered[0].manifest["options"]["gzip"])
    if out == "-" or writes_in_place(out):  # stdout, a device, a FIFO: cannot be undone, so
        for part in ordered:  # nothing goes out before every part is known good
            _copy_checked(part, None, gzip_out)
    elif gzip_out != out.endswith(".gz"):
        kind, want = ("gzip", "a name ending in .gz") if gzip_out else ("plain", "a plain name")
        raise RescorerError(
            f"{out}: the parts are {kind} text, and an output's compression follows its name: "
            f"give it {want} (or score the parts with -o names like it)"
        )
    all_empty = all(int(p.manifest["lines"]["in"]) == 0 for p in ordered)
    with _merged(out) as sink:
        for i, part in enumerate(ordered):
            lines = part.manifest["lines"]
            # An empty shard of a gzip output is one empty gzip member; a single run writes it
            # only when the whole table is empty.
            keep = not (gzip_out and int(lines["in"]) == 0 and not (all_empty and i == 0))
            size, written = _copy_checked(part, sink if keep else None, gzip_out)
            if written != int(lines["out"]):  # count what is written, not what is said
                raise RescorerError(
                    f"{part.name}: holds {written:,} lines, its manifest says {lines['out']:,}; "
                    "re-run that shard"
                )
            stats.bytes += size
            stats.lines_in += int(lines["in"])
            stats.lines_out += written
            stats.bad += int(lines.get("bad", 0))
    stats.devices = tuple(sorted({str(p.manifest.get("device", "?")) for p in ordered}))
    stats.seconds = time.monotonic() - t0
    return stats


@contextmanager
def _merged(out: str) -> Iterator[BinaryIO]:
    """Where the merged bytes go: stdout for ``-``, else ``out`` written atomically and synced
    (:func:`~rescorer.io.outputs.atomic_path`: a device or a FIFO is written in place)."""
    if out == "-":
        with open_output_binary("-") as stdout:
            yield stdout
        return
    with atomic_path(out, fsync=True) as tmp, open_writable(tmp, shown=out) as sink:
        yield sink


def most_members(manifest: dict[str, Any]) -> int:
    """The most gzip members ``score`` writes for a shard: one per chunk, and a chunk holds at
    least one input line and ends past a multiple of --chunk-bytes (one empty member for a
    shard without lines)."""
    lines_in = int(manifest["lines"]["in"])
    chunk_bytes = manifest["options"].get("chunk_bytes")
    span = int(manifest["range"]["end"]) - int(manifest["range"]["start"])
    most = lines_in
    if isinstance(chunk_bytes, int) and chunk_bytes > 0:
        most = min(most, span // chunk_bytes + 2)
    return max(most, 1)


def _copy_checked(part: Part, sink: Any, gzipped: bool = False) -> tuple[int, int]:
    """Append the part to ``sink`` (or only read it), checking it against its manifest; the
    bytes written and the lines the part holds (counted, decompressed if ``gzipped``).

    The gzip members are walked one by one in pieces of the block (a piece grows while one
    member goes on), so the work is bounded by the part's size however many members it has,
    and a part of more members than ``score`` writes for its shard (:func:`most_members`) is
    refused as soon as they are counted."""
    want = part.manifest["output"]
    digest, size, lines, last, broken = hashlib.sha256(), 0, 0, b"", False
    inflate = zlib.decompressobj(wbits=31) if gzipped else None
    members, most = 0, most_members(part.manifest)
    with open(part.path, "rb") as f:
        if (f.read(2) == GZIP_MAGIC) != part.manifest["options"]["gzip"]:
            kind = "gzip" if part.manifest["options"]["gzip"] else "plain"
            raise RescorerError(f"{part.name}: its manifest says {kind}, its bytes are not")
        f.seek(0)
        while block := f.read(BLOCK):
            digest.update(block)
            size += len(block)
            if sink is not None:
                sink.write(block)
            view, at, piece = memoryview(block), 0, FIRST_PIECE
            while inflate is not None and at < len(view):  # one member per chunk: each in turn
                fed = view[at : at + piece]
                try:
                    text = inflate.decompress(fed)
                except zlib.error:  # the hash check below names the part
                    inflate, broken = None, True
                    break
                lines, last = lines + text.count(b"\n"), text[-1:] or last
                at += len(fed) - len(inflate.unused_data)  # a copy of at most one piece
                if not inflate.eof:
                    piece = min(2 * piece, BLOCK)
                    continue
                members += 1
                if members > most:
                    raise RescorerError(
                        f"{part.name}: more than {most:,} gzip members, the most score writes "
                        f"for its shard (one per chunk): not the output of that shard; re-run it"
                    )
                inflate, piece = zlib.decompressobj(wbits=31), FIRST_PIECE
            if not gzipped:
                lines, last = lines + block.count(b"\n"), block[-1:] or last
    lines += last not in (b"", b"\n")  # a last line without its newline (kept as it was)
    if size != int(want["bytes"]) or digest.hexdigest() != want["sha256"]:
        raise RescorerError(
            f"{part.name}: its bytes no longer match its manifest ({size} bytes, manifest says "
            f"{want['bytes']}{'' if size != int(want['bytes']) else '; sha256 differs'}); "
            "re-run that shard"
        )
    if broken:
        raise RescorerError(f"{part.name}: not valid gzip data; re-run that shard")
    _check_text(part)
    return (size if sink is not None else 0), lines


def _check_text(part: Part) -> None:
    """The part's text must be what its input range gives: lines.out lines, each an input line
    with the new column(s). Catches a part whose bytes are another shard's under a manifest
    forged to match them (its range, from its neighbours, cannot be forged as well)."""
    lines = part.manifest["lines"]
    rng = part.manifest["range"]
    newlines, size, last = 0, 0, b"\n"
    with open_binary(part.path) as stream:
        while block := stream.read(BLOCK):
            newlines += block.count(b"\n")
            size += len(block)
            last = block[-1:]
    count = newlines + (last != b"\n")
    if count != lines["out"]:
        raise RescorerError(
            f"{part.name}: holds {count:,} lines, its manifest says {lines['out']:,}: not the "
            "output of that shard; re-run it"
        )
    if part.manifest.get("command", "score") != "score":
        return  # an extend part's lines are not its input's lines with columns added
    span = rng["end"] - rng["start"]
    hashes = part.manifest["model"]["sha256"]
    columns = (len(hashes) if isinstance(hashes, list) else 1) + bool(
        part.manifest["options"]["word_penalty"]
    )
    added = MAX_ADDED_PER_COLUMN * columns * count
    fits = span == size == 0 if count == 0 else span < size <= span + added
    if lines["bad"] == 0 and not fits:
        raise RescorerError(
            f"{part.name}: {size:,} bytes of text for {span:,} bytes of input (bytes "
            f"{rng['start']:,} to {rng['end']:,}): not the output of that shard; re-run it"
        )
