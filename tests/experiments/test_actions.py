"""The score and extend steps of table1 keep their folders: a killed run's command goes on with
``--resume`` from the progress record it left (rescorer.job.output's), a step that runs again
without one starts its command over, and one whose record the command refuses starts over
with ``--restart`` (real `rescorer score` runs on the bundled sample table)."""

from __future__ import annotations

import gzip
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from rescorer.errors import RescorerError
from rescorer.experiments.actions import (
    _resumed,
    _run_resuming,
    date_env,
    earlier_iteration_seconds,
)
from rescorer.experiments.steps import Step, StepError, WorkDir
from rescorer.experiments.tools import rescorer_argv
from rescorer.io.inputs import open_text
from rescorer.job.output import RESUME_REFUSED, partial_path, record_path


def test_a_record_left_by_a_killed_run_is_resumed(tmp_path: Path) -> None:
    out = tmp_path / "phrase-table.gz"
    Path(partial_path(str(out))).write_bytes(b"the first chunks")
    Path(record_path(str(out))).write_text("{}")
    assert _resumed(out) == ["--resume"]
    assert Path(partial_path(str(out))).read_bytes() == b"the first chunks"  # left to resume


def test_without_a_record_the_command_starts_over(tmp_path: Path) -> None:
    out = tmp_path / "phrase-table.gz"
    assert _resumed(out) == []
    # a complete OUT, written by a run killed before its step's done.json: made again
    out.write_bytes(b"complete")
    assert _resumed(out) == []
    assert not out.exists()


def test_the_record_is_named_as_the_job_names_it(tmp_path: Path) -> None:
    assert record_path(str(tmp_path / "t.gz")) == str(tmp_path / "t.gz.partial.json")
    assert partial_path(str(tmp_path / "t.gz")) == str(tmp_path / "t.gz.partial")


def test_a_record_the_command_refuses_is_started_over(
    tmp_path: Path, sample_table: Path, tiny_model_dir: Path
) -> None:
    """A killed run's record that `rescorer score --resume` refuses (here: damaged; on a
    machine where --device auto picks other chunks: other options) would fail the step on
    every rerun, and a table1 user cannot add --restart: the step does, and says so."""
    out = tmp_path / "scored.gz"
    Path(partial_path(str(out))).write_bytes(b"half a chunk")
    Path(record_path(str(out))).write_text("{}")  # no valid record
    said: list[str] = []
    work = WorkDir(tmp_path / "work", echo=said.append)
    step = Step("score-tiny", tmp_path)
    argv = rescorer_argv("score", sample_table, "-m", tiny_model_dir, "-o", out, "-q")
    _run_resuming(work, step, argv, out)
    log = step.log.read_text(encoding="utf-8")
    assert "--resume" in log and RESUME_REFUSED in log
    assert "starting over with --restart" in log
    assert said == [
        "table1: warning: step score-tiny: the progress record of scored.gz cannot be resumed "
        "(see the log); started over"
    ]
    with open_text(str(out)) as got, open_text(str(sample_table)) as given:
        assert sum(1 for _ in got) == sum(1 for _ in given) == 200
    assert not Path(partial_path(str(out))).exists()
    assert not Path(record_path(str(out))).exists()


def test_a_command_that_fails_for_another_reason_is_not_started_over(
    tmp_path: Path, sample_table: Path, tiny_model_dir: Path
) -> None:
    out = tmp_path / "scored.gz"
    Path(record_path(str(out))).write_text("{}")
    step = Step("score-tiny", tmp_path)
    argv = rescorer_argv("score", tmp_path / "missing.gz", "-m", tiny_model_dir, "-o", out)
    with pytest.raises(StepError, match="exited with status"):
        _run_resuming(WorkDir(tmp_path / "work", echo=print), step, argv, out)
    assert "--restart" not in step.log.read_text(encoding="utf-8")


# `rescorer score` that stops as Ctrl-C would once it has written its first progress record:
# a run killed in the middle of a table, made by the real command.
INTERRUPTED = """
import sys
from rescorer.job import output
real = output.Output.checkpoint
def checkpoint(self, *args):
    real(self, *args)
    raise KeyboardInterrupt
output.Output.checkpoint = checkpoint
from rescorer.cli import main
sys.argv[0] = "rescorer"
main()
"""


def test_a_killed_run_goes_on_to_the_bytes_of_an_uninterrupted_one(
    tmp_path: Path, sample_table: Path, tiny_model_dir: Path
) -> None:
    """The step's command resumes the killed run (no --restart): the table it finishes is the
    one a run never killed writes."""
    flags = ["-m", str(tiny_model_dir), "-q", "--chunk-bytes", "8192", "--checkpoint-every", "0"]
    whole = tmp_path / "whole.gz"
    subprocess.run(rescorer_argv("score", sample_table, *flags, "-o", whole), check=True)
    out = tmp_path / "step" / "scored.gz"
    out.parent.mkdir()
    killed = subprocess.run(
        [sys.executable, "-c", INTERRUPTED, "score", str(sample_table), *flags, "-o", str(out)],
        capture_output=True,
        text=True,
    )
    assert killed.returncode == 130, killed.stderr
    record = json.loads(Path(record_path(str(out))).read_text(encoding="utf-8"))
    assert 1 < record["next_line"] <= 200 and not out.exists()  # stopped inside the table
    said: list[str] = []
    step = Step("score-tiny", out.parent)
    argv = rescorer_argv("score", sample_table, *flags, "-o", out)
    _run_resuming(WorkDir(tmp_path / "work", echo=said.append), step, argv, out)
    log = step.log.read_text(encoding="utf-8")
    assert "--resume" in log and "--restart" not in log and said == []
    assert gzip.decompress(out.read_bytes()) == gzip.decompress(whole.read_bytes())


def test_a_continued_tunings_earlier_iterations_are_timed_by_its_log(tmp_path: Path) -> None:
    """mert-moses.pl's "run N start/end at DATE" lines, as a tuning killed in its iteration 3
    and continued after iteration 2 leaves them in its appended log: iterations 1-2 are
    counted, the cut-short start of 3 is not, and the later run of 3 does not count as an
    earlier one."""
    log = tmp_path / "log"
    log.write_bytes(
        b"Executing: moses ...\n"
        b"run 1 start at Fri Nov 27 08:37:28 UTC 2026\n"
        b"Line 1: Translation took 0.076 seconds total\n"
        b"run 1 end at Fri Nov 27 08:40:12 UTC 2026\n"
        b"run 2 start at Fri Nov 27 08:40:12 UTC 2026\n"
        b"run 2 end at Fri Nov 27 08:43:44 UTC 2026\n"
        b"run 3 start at Fri Nov 27 08:43:44 UTC 2026\n"
        b"BEST TRANSLATION: l\xc3"  # a character the kill cut in two, then the next invocation
        b"Executing: mert-moses.pl ... --continue\n"
        b"run 3 start at Fri Nov 27 09:20:58 UTC 2026\n"
        b"run 3 end at Fri Nov 27 09:25:20 UTC 2026\n"
    )
    assert earlier_iteration_seconds(log, 2) == 164 + 212
    assert earlier_iteration_seconds(log, 3) == 164 + 212 + 262  # the later start of 3
    with pytest.raises(RescorerError, match=r"log: no 'run 4 start at' and 'run 4 end at' lines"):
        earlier_iteration_seconds(log, 4)
    # a run started afresh after its record was lost (the log appended, not cleared), then
    # killed in iteration 2: iteration 1 counts by its last run, and 2 has no end
    with log.open("ab") as more:
        more.write(b"run 1 start at Fri Nov 27 10:00:00 UTC 2026\n")
        more.write(b"run 1 end at Fri Nov 27 10:01:40 UTC 2026\n")
        more.write(b"run 2 start at Fri Nov 27 10:01:40 UTC 2026\n")
    assert earlier_iteration_seconds(log, 1) == 100
    with pytest.raises(RescorerError, match=r"log: no 'run 2 end at' line after its last start"):
        earlier_iteration_seconds(log, 2)
    bad = tmp_path / "bad"
    bad.write_text("run 1 start at Fri Nov 27 10:00:00 UTC 2026\nrun 1 end at yesterday\n")
    with pytest.raises(RescorerError, match=r"bad:2: 'run 1 end at yesterday': expected a date"):
        earlier_iteration_seconds(bad, 1)
    # a log of before `date` was set to UTC, across the end of summer time: named, not summed
    bad.write_text(
        "run 1 start at Sun Oct 25 02:59:00 CEST 2026\nrun 1 end at Sun Oct 25 02:01:00 CET 2026\n"
    )
    with pytest.raises(RescorerError, match=r"bad:2: iteration 1 ends before it starts \(-3480"):
        earlier_iteration_seconds(bad, 1)
    with pytest.raises(RescorerError, match="cannot read the tuning's log"):
        earlier_iteration_seconds(tmp_path / "none", 1)


def test_mert_moses_dates_its_iterations_in_the_c_locale_and_utc() -> None:
    """date_env sets LC_TIME and TZ only; an LC_ALL (which would override LC_TIME) is spread
    over the other categories, so nothing else about the tuner's locale changes."""
    assert date_env({"PATH": "/bin", "LANG": "de_DE.UTF-8", "TZ": "Europe/Berlin"}) == {
        "PATH": "/bin", "LANG": "de_DE.UTF-8", "TZ": "UTC", "LC_TIME": "C",
    }  # fmt: skip
    env = date_env({"LC_ALL": "de_DE.UTF-8", "LC_TIME": "de_DE.UTF-8"})
    assert "LC_ALL" not in env and env["LC_TIME"] == "C" and env["TZ"] == "UTC"
    assert env["LC_NUMERIC"] == env["LC_CTYPE"] == env["LC_COLLATE"] == "de_DE.UTF-8"
    out = subprocess.run(["date"], env=date_env({"LC_ALL": "C.UTF-8"}), capture_output=True)
    assert re.fullmatch(rb"\w{3} \w{3} [ \d]\d \d\d:\d\d:\d\d UTC \d{4}\n", out.stdout), out.stdout
