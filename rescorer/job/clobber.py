"""Which files a run may write. :func:`refuse_clobber` is the one check every command that
writes files runs (score, extend, filter, combine, merge, rerank, score-nbest, moses-ini)
before it touches anything: every input and side file it reads (the table, --input, the lex
files, an ini, the model folder's files: :func:`job_inputs`, :func:`model_files`) distinct from
every file it writes, and those from each other. :func:`score_files` lists every file a
``score`` or ``extend`` run writes, replaces or removes beside OUT, the :func:`leftovers` of a
killed run among them. No torch here."""

from __future__ import annotations

import glob
import os
import stat
from collections.abc import Sequence
from typing import Any

from rescorer.errors import RescorerError
from rescorer.io.outputs import writes_in_place
from rescorer.job.shards import manifest_path

Named = tuple[str, str | None]  # (what the command line calls it, its path or None)


def file_id(path: str) -> tuple[int, int] | None:
    """(device, inode) of ``path`` after resolving links (``-``: standard input), or None if it
    does not exist."""
    try:
        st = os.fstat(0) if path == "-" else os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _keys(path: str) -> list[object]:
    """What makes two names one file: its (device, inode) once it exists, and its path with
    every link resolved (``./x``, ``d/../x`` and a link to x are x), which catches two names of a
    file that does not exist yet."""
    if path == "-":
        return [file_id(path)]
    return [file_id(path), os.path.realpath(path)]


def _a_device(path: str) -> bool:
    """A character device (``/dev/null``): writing it loses no file, whatever else names it."""
    try:
        return stat.S_ISCHR(os.stat(path).st_mode)
    except OSError:
        return False


def refuse_clobber(inputs: Sequence[Named], outputs: Sequence[Named]) -> None:
    """Refuse, before anything is touched, a run that would write, truncate, replace or remove
    one of its own inputs: ``inputs`` and ``outputs`` are (what, path) pairs, compared by
    device and inode after resolving links (a symlink, a hard link, ``./x`` all count) and, for
    an output that does not exist yet, by its resolved path; and outputs with each other (two
    outputs of one run in one file lose one of them). Stdout (``-``) and character devices
    (``/dev/null``) are never compared: writing them loses nothing.

    The one check every command that writes files runs (score, extend, filter, combine, merge,
    rerank, score-nbest, moses-ini)."""
    seen: dict[object, tuple[str, str]] = {}
    for what, path in inputs:
        if path is not None:
            for key in _keys(path):
                if key is not None:
                    seen.setdefault(key, (what, path))
    for what, path in outputs:
        if path is None or path == "-" or _a_device(path):  # stdout, /dev/null
            continue
        keys = [key for key in _keys(path) if key is not None]
        for key in keys:
            if key in seen:
                other, other_path = seen[key]
                name = "standard input" if other_path == "-" else other_path
                raise RescorerError(
                    f"{what} {path} is the {other} itself ({name}, the same file): this run "
                    "would overwrite or remove it; write elsewhere"
                )
        for key in keys:
            seen[key] = (what, path)


def model_files(model_dirs: Sequence[str]) -> list[Named]:
    """Every file in the model folders a run reads (config, vocabularies, weights, provenance,
    training state and log), as inputs no output may name."""
    found: list[Named] = []
    for folder in model_dirs:
        try:
            names = sorted(os.listdir(folder))
        except OSError:
            continue  # loading it says what is wrong
        found += [(f"file of the model {folder}", os.path.join(folder, n)) for n in names]
    return found


def job_inputs(table: str, config: Any, model_dirs: Sequence[str] = ()) -> list[Named]:
    """What a ``score`` or ``extend`` run reads: the table, the side inputs its ``config``
    names (extend's --input, --lex-f2e, --lex-e2f) and the model folders' files."""
    found: list[Named] = [("input table", table)]
    for field, flag in (("input", "--input"), ("lex_f2e", "--lex-f2e"), ("lex_e2f", "--lex-e2f")):
        found.append((flag, getattr(config, field, None)))
    return found + model_files(model_dirs)


def score_files(out: str, skip_bad_lines: str | None) -> list[tuple[str, str]]:
    """Every file a ``score`` or ``extend`` run writes, replaces or removes, as (what, path)
    pairs: OUT, its partial file, lock and record, its manifest, the leftover temporary files
    it deletes, and the --skip-bad-lines file and its lock. OUT that is stdout, a device or a
    FIFO is written as it is, with nothing beside it (:func:`rescorer.job.output.streams`)."""
    files = []
    if out != "-":
        files = [("-o", out)]
    if out != "-" and not writes_in_place(out):
        files += [
            ("the partial output of -o", out + ".partial"),
            ("the lock of -o", out + ".partial.lock"),
            ("the progress record of -o", out + ".partial.json"),
            ("the shard manifest of -o", manifest_path(out)),
        ]
        files += [("a leftover temporary file of -o", p) for p in leftovers(out)]
    if skip_bad_lines is not None:
        files.append(("--skip-bad-lines", skip_bad_lines))
        if not writes_in_place(skip_bad_lines):
            files.append(("the lock of --skip-bad-lines", skip_lock_path(skip_bad_lines)))
    return files


def skip_lock_path(skip_bad_lines: str) -> str:
    """The lock of a --skip-bad-lines file: beside the file its name resolves to, so that two
    runs naming one file two ways (a link, ``./x``) take the same lock."""
    return os.path.realpath(skip_bad_lines) + ".lock"


def leftovers(out: str) -> list[str]:
    """Temporary files of a record or manifest write that a killed run left beside OUT."""
    found = []
    for path in (out + ".partial.json", manifest_path(out)):
        folder, name = os.path.split(os.path.abspath(path))
        pattern = os.path.join(glob.escape(folder), f".{glob.escape(name)}.*.tmp")
        found += glob.glob(pattern)
    return found
