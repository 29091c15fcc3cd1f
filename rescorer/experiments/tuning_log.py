"""What a Table 1 tuning's folder and log say of its time: the MERT iterations a killed run
goes on from, and the whole time of a run continued after a kill (mert-moses.pl's own "run N
start at DATE" and "run N end at DATE" lines, `date` run in the C locale and UTC)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from rescorer.errors import RescorerError


def finished_iterations(mert: Path) -> int:
    """The MERT iterations a killed tuning run in ``mert`` goes on from (``--continue``), or 0
    when it starts afresh: none finished; the run had finished (``moses.ini``) and its step's
    record was lost; or the last finished step's files that ``mert-moses.pl --continue`` needs
    are not there. mert-moses.pl writes ``finished_step.txt`` once more after its last
    iteration with the next run's number (its loop counted past ``--maximum-iterations``), so a
    run killed there names a step with no files, and ``--continue`` dies ("Can't start from
    step N, because runN.features.dat was not found!")."""
    finished = mert / "finished_step.txt"
    if (mert / "moses.ini").exists() or not finished.is_file():
        return 0
    step = int(finished.read_text().strip() or 0)
    needed = [f"run{step}.features.dat", f"run{step}.scores.dat", f"run{step}.weights.txt"]
    if step < 1 or not all((mert / name).is_file() for name in needed):
        return 0
    if not list(mert.glob(f"run{step}.best*.out.gz")):
        return 0
    return step


def tuning_seconds(folder: Path, record: dict[str, Any]) -> tuple[float, str | None]:
    """A finished tuning step's time, whole: its done.json's seconds (its last invocation's),
    plus, for a run continued after a kill, the finished iterations it went on from
    (:func:`earlier_iteration_seconds` on the step's log). Returns the seconds and, when the
    log cannot say, why (the seconds are then the last invocation's: a lower bound)."""
    seconds = float(record["seconds"])
    earlier = record.get("continued_after_iteration")
    if not earlier:
        return seconds, None
    try:
        return seconds + earlier_iteration_seconds(folder / "log", earlier), None
    except RescorerError as exc:
        return seconds, str(exc)


_ITERATION_LINE = re.compile(r"^run (\d+) (start|end) at (.+?)\s*$")
_LOCALE_CATEGORIES = (
    "LC_CTYPE", "LC_NUMERIC", "LC_COLLATE", "LC_MONETARY", "LC_MESSAGES", "LC_PAPER",
    "LC_NAME", "LC_ADDRESS", "LC_TELEPHONE", "LC_MEASUREMENT", "LC_IDENTIFICATION",
)  # fmt: skip


def date_env(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` with `date` printing in the C locale and UTC, for mert-moses.pl's "run N
    start at `date`" lines that :func:`earlier_iteration_seconds` reads; every other locale
    category as it was (an LC_ALL is spread over the categories it set, LC_TIME apart)."""
    env = dict(environ)
    every = env.pop("LC_ALL", None)
    if every:
        env.update({name: every for name in _LOCALE_CATEGORIES})
    env["LC_TIME"], env["TZ"] = "C", "UTC"
    return env


def earlier_iteration_seconds(log: Path, iterations: int) -> float:
    """The seconds that MERT iterations 1..``iterations`` took in a tuning step's ``log``, by
    mert-moses.pl's own "run N start at DATE" and "run N end at DATE" lines (the step's log is
    appended across invocations, and ``tune`` runs it with `date` in the C locale and UTC):
    what a continued run's done.json, which times its last invocation only, leaves out. An
    iteration run more than once (a run started afresh, or one redone after a kill between
    its end and its record) counts by its last run; one a kill cut short is not counted.
    RescorerError names the log, and the line or the iteration, when a finished iteration's
    lines are missing or unreadable."""
    starts: dict[int, datetime] = {}
    spans: dict[int, float] = {}
    try:
        # a log of decoder output: a byte a kill cut in two must not stop the reading
        with open(log, encoding="utf-8", errors="replace") as lines:
            for number, line in enumerate(lines, 1):
                found = _ITERATION_LINE.match(line)
                if found is None:
                    continue
                n, what = int(found[1]), found[2]
                when = _log_time(found[3])
                if when is None:
                    raise RescorerError(
                        f"{log}:{number}: {line.rstrip()!r}: expected a date like 'Fri Nov 27 "
                        "09:05:38 UTC 2026' after 'at' (`date` in the C locale and UTC)"
                    )
                if what == "start":
                    starts[n] = when
                    spans.pop(n, None)  # run again: its last run counts
                elif n in starts:
                    span = (when - starts.pop(n)).total_seconds()
                    if span < 0:
                        raise RescorerError(
                            f"{log}:{number}: iteration {n} ends before it starts "
                            f"({span:.0f} s): expected its dates in one time zone"
                        )
                    spans[n] = span
    except OSError as exc:
        raise RescorerError(f"{log}: cannot read the tuning's log: {exc.strerror}") from exc
    missing = [n for n in range(1, iterations + 1) if n not in spans]
    if missing:
        n = missing[0]
        lacks = f"'run {n} end at' line after its last start" if n in starts else (
            f"'run {n} start at' and 'run {n} end at' lines"
        )  # fmt: skip
        raise RescorerError(
            f"{log}: no {lacks} (expected a start and an end for each of the {iterations} "
            "iterations an earlier invocation finished)"
        )
    return sum(spans[n] for n in range(1, iterations + 1))


def _log_time(text: str) -> datetime | None:
    """`date`'s output in the C locale ("Fri Nov 27 09:05:38 UTC 2026"), its zone name left
    out (``tune`` sets UTC; :func:`earlier_iteration_seconds` takes differences only)."""
    parts = text.split()
    if len(parts) != 6:
        return None
    try:
        return datetime.strptime(" ".join(parts[:4] + parts[5:]), "%a %b %d %H:%M:%S %Y")
    except ValueError:
        return None
