"""Shard manifests: the owner of the ``OUT.manifest.json`` format (built as a shard run starts,
completed as it ends, read back by a re-run and by ``rescorer merge``, :mod:`rescorer.job.merge`).

A ``rescorer score --shard K/N`` run that ends well writes, beside its output, a manifest: which
shard of which input it is (the input's fingerprint, the shard's byte range in the decompressed
input and a hash chained over that range's chunks), the model's hash, every option that changes
the output's bytes, line counts, and the output's size and sha256.

No torch here: merge reads manifests on a login node.
"""

from __future__ import annotations

import hashlib
import os
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rescorer.errors import RescorerError
from rescorer.io.chunks import ShardRange
from rescorer.io.jsonfiles import read_json_object, write_json

if TYPE_CHECKING:
    from rescorer.job.stats import JobStats

FORMAT = "rescorer-shard-manifest-1"
SUFFIX = ".manifest.json"
BLOCK = 1 << 22
MAX_SHARDS = 100_000

_COUNT = {"type": "integer", "minimum": 0}
_SHA256 = {"type": "string", "pattern": "^[0-9a-f]{64}$"}


def _object(required: dict[str, Any], **optional: Any) -> dict[str, Any]:
    return {
        "type": "object",
        "required": list(required),
        "properties": {**required, **optional},
    }


# What merge needs of a manifest, checked before any of it is used: a hand-edited field with a
# wrong type or out of range is one error naming its path ($.shard.k), not a traceback.
MANIFEST_SCHEMA: dict[str, Any] = _object(
    {
        "format": {"const": FORMAT},
        "shard": _object(
            {
                "k": {"type": "integer", "minimum": 1, "maximum": MAX_SHARDS},
                "n": {"type": "integer", "minimum": 1, "maximum": MAX_SHARDS},
            }
        ),
        "input": _object({"bytes": _COUNT, "head_sha256": _SHA256, "tail_sha256": _SHA256}),
        "range": _object(
            {
                "start": _COUNT,
                "end": _COUNT,
                "first_line": {"type": "integer", "minimum": 1},
                "input_bytes": _COUNT,
                "sha256_chain": {"type": "string"},
            }
        ),
        # one model: its hash; several (score -m A -m B): the list of them, in column order
        "model": _object(
            {
                "sha256": {
                    "anyOf": [
                        {"type": ["string", "null"]},
                        {"type": "array", "items": {"type": ["string", "null"]}, "minItems": 2},
                    ]
                }
            }
        ),
        "options": _object(
            {"gzip": {"type": "boolean"}, "skip_bad_lines": {"type": "boolean"}},
            word_penalty={"type": "boolean"},
            column={"enum": ["prob", "logp"]},
        ),
        "lines": _object({"in": _COUNT, "out": _COUNT, "bad": _COUNT}),
        "output": _object({"file": {"type": "string"}, "bytes": _COUNT, "sha256": _SHA256}),
    },
    device={"type": "string"},
    command={"enum": ["score", "extend"]},  # absent: score
)


def validate_manifest(path: str, data: Any) -> None:
    """Refuse a manifest that does not fit MANIFEST_SCHEMA or whose numbers disagree with each
    other, naming the file and the field."""
    import jsonschema

    error = jsonschema.exceptions.best_match(
        jsonschema.Draft202012Validator(MANIFEST_SCHEMA).iter_errors(data)
    )
    if error is not None:
        message = error.message if len(error.message) <= 200 else error.message[:200] + "..."
        raise RescorerError(f"{path}: {error.json_path}: {message} (a shard manifest)")
    rng, lines, shard = data["range"], data["lines"], data["shard"]
    if data.get("command", "score") == "score":
        for key in ("word_penalty", "column"):
            if key not in data["options"]:
                raise RescorerError(
                    f"{path}: $.options: {key!r} is a required property (a shard manifest)"
                )
    if shard["k"] > shard["n"]:
        raise RescorerError(f"{path}: $.shard: k {shard['k']} is over n {shard['n']}")
    if not rng["start"] <= rng["end"] <= rng["input_bytes"]:
        raise RescorerError(
            f"{path}: $.range: start {rng['start']}, end {rng['end']} and input_bytes "
            f"{rng['input_bytes']} are not in order"
        )
    score = data.get("command", "score") == "score"  # extend writes lines of its own too
    if score and lines["in"] != lines["out"] + lines["bad"]:
        raise RescorerError(
            f"{path}: $.lines: in {lines['in']} is not out {lines['out']} + bad {lines['bad']}"
        )


def manifest_path(out: str) -> str:
    return out + SUFFIX


def chain_sha256(previous: str, chunk_sha256: str) -> str:
    """The range hash after one more chunk: sha256 of (previous hex + the chunk's sha256 hex).

    Chained per chunk so a resumed shard goes on from the value in its progress record."""
    return hashlib.sha256((previous + chunk_sha256).encode("ascii")).hexdigest()


def file_sha256(path: str) -> tuple[int, str]:
    """(size, sha256) of a file, read in 4 MiB blocks."""
    digest, size = hashlib.sha256(), 0
    with open(path, "rb") as f:
        while block := f.read(BLOCK):
            digest.update(block)
            size += len(block)
    return size, digest.hexdigest()


def write_manifest(out: str, fields: dict[str, Any], *, data_path: str | None = None) -> None:
    """Write OUT.manifest.json for the finished output OUT, hashing its bytes now (from
    ``data_path`` when they are still there, about to be renamed to OUT)."""
    size, sha = file_sha256(data_path or out)
    data = {"format": FORMAT, **fields, "output": {"file": os.path.basename(out)}}
    data["output"].update(bytes=size, sha256=sha)
    write_json(manifest_path(out), data, fsync=True)


def shard_manifest(
    options: dict[str, Any],
    shard: tuple[int, int],
    shard_range: ShardRange,
    run_key: dict[str, Any],
) -> dict[str, Any]:
    """A shard run's manifest as it starts: which shard of which input, the model, and
    ``options``, every option that changes the output's bytes (:func:`complete_manifest` adds
    what the run found)."""
    return {
        "shard": {"k": shard[0], "n": shard[1]},
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


def complete_manifest(manifest: dict[str, Any], stats: JobStats, device: Any) -> dict[str, Any]:
    """The shard's manifest with what the finished run found."""
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


@dataclass
class Part:
    """One shard's output file and its manifest."""

    path: str
    manifest: dict[str, Any]

    @property
    def k(self) -> int:
        return int(self.manifest["shard"]["k"])

    @property
    def n(self) -> int:
        return int(self.manifest["shard"]["n"])

    @property
    def name(self) -> str:
        return f"shard {self.k}/{self.n} ({self.path})"


def read_part(path: str) -> Part:
    """A part and its manifest, or an error naming the part."""
    if not os.path.isfile(path):
        raise RescorerError(f"{path}: no such part file")
    mpath = manifest_path(path)
    if not os.path.isfile(mpath):
        raise RescorerError(
            f"{path}: has no manifest {os.path.basename(mpath)}: not a finished "
            "'rescorer score --shard' output (re-run its task)"
        )
    manifest = read_json_object(mpath, what="a shard manifest")
    if manifest.get("format") != FORMAT:
        raise RescorerError(f"{mpath}: format {manifest.get('format')!r}, expected {FORMAT!r}")
    validate_manifest(mpath, manifest)
    return Part(path, manifest)


def finished_shard(out: str, record: str, manifest: dict[str, Any], stats: JobStats) -> bool:
    """Whether OUT (``out``, with no progress record at ``record``) is this very shard,
    finished, as its manifest says: same input, model, options and range, and OUT's bytes
    unchanged. Then ``stats`` is filled from it."""
    if os.path.exists(record) or not os.path.exists(manifest_path(out)):
        return False
    try:
        found = read_part(out).manifest
    except RescorerError:
        return False
    for key in ("shard", "input", "model", "options"):
        if found.get(key) != manifest[key]:
            return False
    if {k: found["range"].get(k) for k in manifest["range"]} != manifest["range"]:
        return False
    if file_sha256(out) != (found["output"]["bytes"], found["output"]["sha256"]):
        return False
    lines = found["lines"]
    stats.lines_in, stats.lines_out, stats.bad = lines["in"], lines["out"], lines.get("bad", 0)
    stats.next_offset = manifest["range"]["end"]
    stats.already_done = True
    return True
