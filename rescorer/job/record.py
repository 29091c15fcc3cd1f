"""The progress record ``OUT.partial.json`` of ``rescorer score``: its schema, what ties it to
its run (the fingerprints of the input and the model, in the run key) and to the output (the
sha256 of the output's tail it vouches for), and the checks a ``--resume`` run makes before it
trusts a record (its shape, the options that changed, a resume point at a line start:
:func:`recorded_resume`). :class:`~rescorer.job.output.Output` writes and reads it. No torch
here."""

from __future__ import annotations

import functools
import hashlib
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from rescorer.constants import CONFIG_FILE, SRC_VOCAB_FILE, TGT_VOCAB_FILE, WEIGHTS_FILE
from rescorer.errors import RescorerError
from rescorer.io.inputs import open_input
from rescorer.io.jsonfiles import read_json
from rescorer.io.schema import schema_problem
from rescorer.job.stats import NOT_IN_RUN_KEY

TAIL_BYTES = 1 << 16  # the output bytes a progress record vouches for by hash
HEAD_BYTES = 1 << 20  # the input bytes at each end that its fingerprint hashes


@dataclass
class Resume:
    """Where a run starts: the input offset and line, and what the outputs already hold."""

    offset: int = 0
    first_line: int = 1
    out_bytes: int = 0
    bad_bytes: int = 0
    stats: dict[str, Any] = field(default_factory=dict)


# How every refusal of a --resume run ends (the record is for other input, model or options,
# or damaged): a driver that resumes for its user (scripts/table1.py's score and extend steps)
# recognises it and starts over with --restart.
RESUME_REFUSED = "add --restart instead of --resume to start over"


def tail_sha256(path: str, end: int) -> str:
    """sha256 of the TAIL_BYTES of ``path`` before offset ``end``."""
    start = max(0, end - TAIL_BYTES)
    with open(path, "rb") as f:
        f.seek(start)
        return hashlib.sha256(f.read(end - start)).hexdigest()


def input_fingerprint(path: str) -> dict[str, Any]:
    """Size and sha256 of the first and last HEAD_BYTES: cheap on 10^9-line tables, and a
    table that was rewritten, appended to or truncated since the record changes it."""
    with open_input(path) as f:  # an unreadable input: one line naming it
        size = os.fstat(f.fileno()).st_size
        head = hashlib.sha256(f.read(HEAD_BYTES)).hexdigest()
        f.seek(max(0, size - HEAD_BYTES))
        tail = hashlib.sha256(f.read(HEAD_BYTES)).hexdigest()
    return {"bytes": size, "head_sha256": head, "tail_sha256": tail}


def model_fingerprint(model_dir: str) -> str | None:
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


# The progress record OUT.partial.json (Output.checkpoint in rescorer/job/output.py writes it).
_COUNT = {"type": "integer", "minimum": 0}
_SHA256 = {"type": "string", "pattern": "^[0-9a-f]{64}$"}
RECORD_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["run", "offset", "next_line", "out_bytes", "tail_sha256", "bad_bytes", "stats"],
    "properties": {
        "run": {
            "type": "object",
            "required": ["table", "input", "model_dir", "model", "config"],
            "properties": {
                "table": {"type": "string"},
                "input": {"type": ["object", "null"]},
                # one model: its folder and hash; several (score -m A -m B): lists of them
                "model_dir": {
                    "anyOf": [
                        {"type": "string"},
                        {"type": "array", "items": {"type": "string"}, "minItems": 2},
                    ]
                },
                "model": {
                    "anyOf": [
                        {"type": ["string", "null"]},
                        {"type": "array", "items": {"type": ["string", "null"]}, "minItems": 2},
                    ]
                },
                "config": {"type": "object"},
            },
        },
        "offset": _COUNT,
        "next_line": {"type": "integer", "minimum": 1},
        "out_bytes": _COUNT,
        "tail_sha256": _SHA256,
        "bad_bytes": _COUNT,
        "stats": {
            "type": "object",
            "required": ["lines_in", "lines_out", "bad"],
            "properties": {
                "lines_in": _COUNT,
                "lines_out": _COUNT,
                "bad": _COUNT,
                "range_sha256": {"type": "string"},
                "seconds": {"type": "number", "minimum": 0},
            },
        },
    },
}


def record_problem(state: Any) -> str | None:
    problem = schema_problem(state, RECORD_SCHEMA)
    return problem.replace("the file", "the record", 1) if problem else None


def options_differ(old: Any, new: Any) -> str:
    """The options that differ between two run keys' configs, as the user would type them."""
    old, new = (d if isinstance(d, dict) else {} for d in (old, new))
    names = {"compresslevel": "--compress-level"}
    said = []
    for key in sorted(set(old) | set(new)):
        if old.get(key) != new.get(key):
            flag = names.get(key, "--" + key.replace("_", "-"))
            said.append(f"{flag} was {old.get(key)!r}, now {new.get(key)!r}")
    return "; ".join(said) or "unknown"


def not_a_line_start(table: str, offset: int, next_line: int) -> str | None:
    """Whether byte ``offset`` of the decompressed table starts line ``next_line``: read once
    up to it (a resumed run reads these bytes again to skip them)."""
    from rescorer.io.inputs import open_binary

    newlines, last, seen = 0, b"\n", 0
    with open_binary(table) as stream:
        while seen < offset:
            data = stream.read(min(1 << 22, offset - seen))
            if not data:
                return f"resumes at byte {offset}, beyond the end of {table} ({seen} bytes)"
            seen += len(data)
            newlines += data.count(b"\n")
            last = data[-1:]
    if last != b"\n":
        return f"resumes at byte {offset}, inside line {newlines + 1} of {table}"
    if newlines + 1 != next_line:
        return f"resumes at line {next_line}, but byte {offset} starts line {newlines + 1}"
    return None


def recorded_resume(record: str, partial: str, run_key: dict[str, Any], table: str) -> Resume:
    """Where the run recorded in ``record`` stopped, after every check that it may go on: the
    record holds what RECORD_SCHEMA says, is for this run (``run_key``: input, model folder,
    model, options), ``partial`` still holds what it says, and it resumes at a line start of
    ``table`` (unchecked when empty)."""
    state = read_json(record, what="the progress record of an interrupted run")
    again = RESUME_REFUSED
    problem = record_problem(state)
    if problem:
        raise RescorerError(f"{record}: not a valid progress record: {problem}; {again}")
    old = state["run"]
    for key, what in (
        ("table", "for another input table"),
        ("input", "for other input content (the table changed since)"),
        ("model_dir", "for another model directory"),
        ("model", "for another model (the model directory changed since)"),
        ("config", "with other options"),
    ):
        if old.get(key) != run_key.get(key):
            if key == "config":
                what += f" ({options_differ(old.get(key), run_key.get(key))})"
            raise RescorerError(f"{record}: was written {what}; {again}")
    out_bytes = state["out_bytes"]
    try:
        size = os.path.getsize(partial)
    except OSError:
        raise RescorerError(
            f"{partial}: missing, but {record} says {out_bytes} bytes were written; {again}"
        ) from None
    if size < out_bytes:
        raise RescorerError(
            f"{partial}: {size} bytes, shorter than the {out_bytes} its record says: "
            f"it was cut short after the record was written (by another program, an older "
            f"rescorer run without --resume, or a crash or power loss); {again}"
        )
    if tail_sha256(partial, out_bytes) != state["tail_sha256"]:
        raise RescorerError(f"{partial}: its last written bytes differ from its record; {again}")
    if table:
        problem = not_a_line_start(table, state["offset"], state["next_line"])
        if problem:
            raise RescorerError(f"{record}: {problem}; {again}")
    return Resume(
        state["offset"],
        state["next_line"],
        state["out_bytes"],
        state["bad_bytes"],
        state["stats"],
    )


def run_key(table: str, regular: bool, config: Any, model_dirs: Sequence[str]) -> dict[str, Any]:
    """What a progress record is for: the input (``regular``: a file, hashed; a pipe is not),
    the model(s), the options (a job config's fields but those of NOT_IN_RUN_KEY)."""
    return {
        "table": os.path.abspath(table) if table != "-" else "-",
        "input": input_fingerprint(table) if regular else None,
        # One model: its folder and hash; several: lists, in order.
        "model_dir": _one_or_list([os.path.abspath(folder) for folder in model_dirs]),
        "model": _one_or_list([model_fingerprint(folder) for folder in model_dirs]),
        "config": {
            k: v
            for k, v in asdict(config).items()
            if k not in NOT_IN_RUN_KEY and ADDED_LATER.get(k, _NONE) != v
        },
    }


_NONE = object()
# Options added after progress records were first written, with their defaults: a run that
# keeps the default leaves them out of its key, so a record written before them still resumes
# (score --capture auto runs the exact shapes on a CPU, as before it existed).
ADDED_LATER: dict[str, Any] = {"capture": "auto"}


def _one_or_list(values: list[Any]) -> Any:
    return values[0] if len(values) == 1 else values
