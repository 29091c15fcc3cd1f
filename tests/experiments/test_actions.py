"""The score and extend steps of table1 keep their folders: a killed run's command goes on with
``--resume`` from the progress record it left (rescorer.job.output's), and a step that runs
again without one starts its command over."""

from __future__ import annotations

from pathlib import Path

from rescorer.experiments.actions import _resumed
from rescorer.job.output import partial_path, record_path


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
