"""rescorer/experiments/tuning_log.py: which killed tuning run mert-moses.pl can continue."""

from __future__ import annotations

from pathlib import Path

import pytest

from rescorer.experiments.tuning_log import finished_iterations

RUN_FILES = ("features.dat", "scores.dat", "weights.txt", "best100.out.gz")


def mert_folder(tmp_path: Path, finished: str | None, runs: int) -> Path:
    """The files mert-moses.pl leaves in its working folder: ``runs`` finished iterations'
    files and ``finished_step.txt`` (None: not written yet)."""
    mert = tmp_path / "mert"
    mert.mkdir()
    for run in range(1, runs + 1):
        for name in RUN_FILES:
            (mert / f"run{run}.{name}").write_bytes(b"x")
    if finished is not None:
        (mert / "finished_step.txt").write_text(finished)
    return mert


@pytest.mark.parametrize(
    ("finished", "runs", "expected"),
    [
        (None, 0, 0),  # killed in its first iteration
        ("1\n", 1, 1),  # killed after iteration 1: --continue from it
        ("2\n", 2, 2),
        # after its last iteration (--maximum-iterations 1) mert-moses.pl writes the next run's
        # number before it writes moses.ini: --continue would die on run2.features.dat
        ("2\n", 1, 0),
        ("0\n", 0, 0),
    ],
)
def test_only_a_step_whose_files_are_there_is_continued(
    tmp_path: Path, finished: str | None, runs: int, expected: int
) -> None:
    assert finished_iterations(mert_folder(tmp_path, finished, runs)) == expected


def test_a_run_whose_tuned_ini_was_written_starts_afresh(tmp_path: Path) -> None:
    mert = mert_folder(tmp_path, "2\n", 2)
    (mert / "moses.ini").write_text("[weight]\n")
    assert finished_iterations(mert) == 0
