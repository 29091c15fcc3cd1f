"""What ``rescorer extend`` checks and reads before any work, beside the table the job reads:
the fill-up table's score count (or why there is none), the side inputs' content hashes that
a ``--resume`` must find unchanged, and the warning for a model that has not learned. No torch
here."""

from __future__ import annotations

import hashlib
import os
from typing import Any

from rescorer.errors import RescorerError
from rescorer.extend.config import ExtendConfig
from rescorer.io.inputs import display_name


def fill_up_score_count(table: str, regular: bool) -> int:
    """The score count of a fill-up's table, from its first good line (the new lines need it
    before the first chunk is read), or the error that names why there is none: the table is
    missing, a folder, a device or a pipe, has no good line (the first bad line's error), or
    is empty."""
    import stat

    from rescorer.io.table import read_table
    from rescorer.job.run import first_num_scores

    if regular:
        found = first_num_scores(table)
        if found is not None:
            return found
    elif table == "-" or (os.path.exists(table) and stat.S_ISFIFO(os.stat(table).st_mode)):
        raise RescorerError(
            f"{display_name(table)}: a pipe; --form fill-up reads the table's score count "
            "before it starts: give the table as a file (or use --form second-table)"
        )
    elif os.path.exists(table) and not os.path.isdir(table):
        raise RescorerError(
            f"{table}: not a regular file (a device?); --form fill-up reads a phrase table: "
            "give it as a file"
        )
    for _ in read_table(table):  # missing, a folder, no good line: its own error
        break
    raise RescorerError(
        f"{table}: no phrase-table line to read the score count from (an empty table): "
        "a fill-up needs one"
    )


def side_input_digests(config: ExtendConfig) -> tuple[tuple[str, str], ...]:
    """(flag, sha256 of the file's bytes) for each side input given (--input, --lex-f2e,
    --lex-e2f): they go in the run key, as the table's fingerprint does, so that a --resume
    after one changed under its name is refused rather than joining chunks of both."""
    found = []
    for flag, path in (
        ("--input", config.input),
        ("--lex-f2e", config.lex_f2e),
        ("--lex-e2f", config.lex_e2f),
    ):
        if path is not None and os.path.isfile(path):
            digest = hashlib.sha256()
            with open(path, "rb") as f:
                while block := f.read(1 << 20):
                    digest.update(block)
            found.append((flag, digest.hexdigest()))
    return tuple(found)


def refuse_changed_side_inputs(out: str, digests: tuple[tuple[str, str], ...]) -> None:
    """A --resume whose interrupted run read another content under a side input's name: the
    error names the file (the run key's check would say only "other options")."""
    from rescorer.io.jsonfiles import read_json_object
    from rescorer.job.output import record_path

    if out == "-" or not os.path.isfile(record_path(out)):
        return
    try:
        recorded = read_json_object(record_path(out), what="a progress record")
        old = dict(recorded["run"]["config"]["side_inputs"])
    except (RescorerError, KeyError, TypeError, ValueError):
        return  # the job's own checks say what is wrong with it
    config = recorded["run"]["config"]
    for flag, digest in digests:
        if old.get(flag) is not None and old[flag] != digest:
            path = config.get(flag[2:].replace("-", "_"))
            raise RescorerError(
                f"{flag} {path}: its content changed since the interrupted run (sha256 "
                f"{old[flag][:12]} then, {digest[:12]} now): its chunks and the new ones would "
                "not match; put the old file back, or start over with --restart"
            )


def unlearned(provenance: dict[str, Any], folder: str, generates: bool) -> str | None:
    """The warning for a model that has not clearly learned (rescorer/verdict.py), as train,
    info and score give it; the first -m's proposes the new pairs, so they are said to be
    what may be noise."""
    from rescorer.verdict import training_verdict, unlearned_warning

    if not generates:
        return unlearned_warning(provenance, folder)
    verdict = training_verdict(provenance)
    if verdict is None or verdict.learned:
        return None
    return (
        f"warning: {folder}: the model is {verdict.text}; the pairs it proposes may be noise, "
        "and its column may cost BLEU"
    )
