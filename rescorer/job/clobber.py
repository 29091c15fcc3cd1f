"""Which files a run may write. :func:`refuse_clobber` is the one check every command that
writes files runs (score, filter, combine, merge, rerank, score-nbest, moses-ini) before it
touches anything, comparing paths by :func:`file_id`; :func:`score_files` lists every file a
``score`` run writes, replaces or removes beside OUT, the :func:`leftovers` of a killed run
among them. No torch here."""

from __future__ import annotations

import glob
import os
from collections.abc import Sequence

from rescorer.errors import RescorerError
from rescorer.job.shards import manifest_path


def file_id(path: str) -> tuple[int, int] | None:
    """(device, inode) of ``path`` after resolving links (``-``: standard input), or None if it
    does not exist."""
    try:
        st = os.fstat(0) if path == "-" else os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def refuse_clobber(
    inputs: Sequence[tuple[str, str | None]], outputs: Sequence[tuple[str, str | None]]
) -> None:
    """Refuse, before anything is touched, a run that would write, truncate, replace or remove
    one of its own inputs: ``inputs`` and ``outputs`` are (what, path) pairs, compared by
    device and inode after resolving links (a symlink, a hard link, ``./x`` all count), and
    outputs with each other (two outputs of one run in one file lose one of them).

    The one check every command that writes files runs (score, filter, combine, merge, rerank,
    score-nbest, moses-ini)."""
    seen: dict[tuple[int, int], tuple[str, str]] = {}
    for what, path in inputs:
        ident = file_id(path) if path is not None else None
        if ident is not None and path is not None:
            seen.setdefault(ident, (what, path))
    for what, path in outputs:
        if path is None or path == "-":  # stdout
            continue
        ident = file_id(path)
        if ident is None:
            continue
        if ident in seen:
            other, other_path = seen[ident]
            name = "standard input" if other_path == "-" else other_path
            raise RescorerError(
                f"{what} {path} is the {other} itself ({name}, the same file): this run would "
                "overwrite or remove it; write elsewhere"
            )
        seen[ident] = (what, path)


def score_files(out: str, skip_bad_lines: str | None) -> list[tuple[str, str]]:
    """Every file a ``score`` run writes, replaces or removes, as (what, path) pairs: OUT, its
    partial file, lock and record, its manifest, the leftover temporary files it deletes, and
    the --skip-bad-lines file and its lock."""
    files = []
    if out != "-":
        files = [
            ("-o", out),
            ("the partial output of -o", out + ".partial"),
            ("the lock of -o", out + ".partial.lock"),
            ("the progress record of -o", out + ".partial.json"),
            ("the shard manifest of -o", manifest_path(out)),
        ]
        files += [("a leftover temporary file of -o", p) for p in leftovers(out)]
    if skip_bad_lines is not None:
        files += [
            ("--skip-bad-lines", skip_bad_lines),
            ("the lock of --skip-bad-lines", skip_bad_lines + ".lock"),
        ]
    return files


def leftovers(out: str) -> list[str]:
    """Temporary files of a record or manifest write that a killed run left beside OUT."""
    found = []
    for path in (out + ".partial.json", manifest_path(out)):
        folder, name = os.path.split(os.path.abspath(path))
        pattern = os.path.join(glob.escape(folder), f".{glob.escape(name)}.*.tmp")
        found += glob.glob(pattern)
    return found
