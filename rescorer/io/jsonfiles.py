"""JSON files (configs, vocabularies, manifests, records): the one owner of their reading and
writing. A read is bounded (MAX_JSON_BYTES) and fails with one line naming the file; a write
is atomic (:func:`rescorer.io.outputs.atomic_path`). Checking a file's content against a JSON
Schema is :mod:`rescorer.io.schema`'s.
"""

from __future__ import annotations

import json
import os
import stat
from typing import Any

from rescorer.errors import RescorerError
from rescorer.io.outputs import atomic_path, open_writable

MAX_JSON_BYTES = 64 << 20  # the largest JSON file read (configs, vocabularies, manifests)


def write_json(
    path: str | os.PathLike[str],
    data: Any,
    *,
    indent: int | None = 2,
    ensure_ascii: bool = False,
    fsync: bool = False,
) -> None:
    """``data`` as JSON (and a final newline when indented), atomically."""
    text = json.dumps(data, ensure_ascii=ensure_ascii, indent=indent)
    if indent is not None:
        text += "\n"
    with atomic_path(path, fsync=fsync) as tmp, open_writable(tmp, shown=os.fspath(path)) as out:
        out.write(text.encode("utf-8"))


def read_json(path: str | os.PathLike[str], *, what: str = "file") -> Any:
    """JSON from ``path``; a missing or unreadable file, one that is not a regular file (a FIFO
    would hang the read, a device never end) or one over MAX_JSON_BYTES is a RescorerError
    naming it."""
    try:
        # O_NONBLOCK: opening a FIFO with no writer returns at once, and is then refused
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        with open(fd, "rb") as f:
            mode = os.fstat(fd).st_mode
            if stat.S_ISDIR(mode):
                raise IsADirectoryError
            if not stat.S_ISREG(mode):
                raise RescorerError(
                    f"{os.fspath(path)}: not a regular file (a FIFO, a device?), expected a "
                    f"regular file of at most {MAX_JSON_BYTES >> 20} MiB ({what})"
                )
            os.set_blocking(fd, True)
            data = f.read(MAX_JSON_BYTES + 1)
            if len(data) > MAX_JSON_BYTES:
                raise RescorerError(
                    f"{os.fspath(path)}: over {MAX_JSON_BYTES >> 20} MiB, the largest JSON file "
                    f"rescorer reads ({what})"
                )
            return json.loads(data)
    except FileNotFoundError as exc:
        raise RescorerError(f"{os.fspath(path)}: missing ({what})") from exc
    except IsADirectoryError:
        raise RescorerError(f"{os.fspath(path)}: is a folder, expected a file ({what})") from None
    except PermissionError as exc:
        raise RescorerError(f"{os.fspath(path)}: cannot open: {exc.strerror} ({what})") from None
    except RecursionError:
        raise RescorerError(f"{os.fspath(path)}: JSON nested too deeply") from None
    except (OSError, ValueError) as exc:  # ValueError: bad JSON or not UTF-8
        raise RescorerError(f"{os.fspath(path)}: cannot read JSON: {exc}") from exc


def read_json_object(path: str | os.PathLike[str], *, what: str = "file") -> dict[str, Any]:
    """Like :func:`read_json`, and the file must hold a JSON object."""
    data = read_json(path, what=what)
    if not isinstance(data, dict):
        raise RescorerError(
            f"{os.fspath(path)}: holds a JSON {type(data).__name__}, expected an object ({what})"
        )
    return data
