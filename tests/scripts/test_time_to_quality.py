"""scripts/bench_time_to_quality.py on runs already finished: it reads their logs, trains
nothing, and sets --beside's earlier curves beside them in the table and the PNG."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from conftest import ROOT

SCRIPT = ROOT / "scripts" / "bench_time_to_quality.py"


def finished_run(folder: Path, points: list[tuple[float, int, float]]) -> Path:
    """A run folder whose train.log.jsonl holds these (seconds, update, perplexity)."""
    folder.mkdir(parents=True)
    with open(folder / "train.log.jsonl", "w", encoding="utf-8") as f:
        for seconds, update, ppl in points:
            f.write(json.dumps({"update": update, "time": seconds, "valid_ppl": ppl}) + "\n")
            f.write(json.dumps({"update": update, "time": seconds, "train_ppl": 2 * ppl}) + "\n")
    return folder


def bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--minutes", "2", "--batch-size", "64", *args],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip


def test_beside_sets_an_earlier_curve_beside_the_runs(tmp_path: Path) -> None:
    work = tmp_path / "work"
    finished_run(work / "batch64", [(30.0, 100, 300.0), (70.0, 200, 90.0), (118.0, 300, 40.0)])
    small = finished_run(
        tmp_path / "small", [(10.0, 50, 250.0), (20.0, 100, 120.0), (50.0, 300, 35.0)]
    )
    png, table_csv = tmp_path / "ttq.png", tmp_path / "ttq.csv"
    proc = bench(
        "--hidden-size", "1000", "--work", str(work), "--beside", f"hidden 256, batch 64={small}",
        "--png", str(png), "--csv", str(table_csv),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "$" not in proc.stderr, "a finished run was run again"
    rows = [line for line in proc.stdout.splitlines() if line.startswith("| hidden")]
    # run, minutes, updates, best, at its own third of its time, when it reached the reference
    assert rows == [
        "| hidden 1000, batch 64 | 2.0 | 300 | 40.00 | 300.00 | 2.0 min |",
        "| hidden 256, batch 64 | 0.8 | 300 | 35.00 | 250.00 | 0.8 min |",
    ], proc.stdout
    assert png.read_bytes()[:4] == b"\x89PNG"
    # The CSV holds the runs of this command only, not the earlier curve.
    assert table_csv.read_text().splitlines()[1:] == [
        '"hidden 1000, batch 64",64,30.0,100,300.0000',
        '"hidden 1000, batch 64",64,70.0,200,90.0000',
        '"hidden 1000, batch 64",64,118.0,300,40.0000',
    ]


def test_beside_refuses_what_is_not_a_finished_run(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    for text in (str(tmp_path / "empty"), f"label={tmp_path / 'empty'}", f"={tmp_path}"):
        proc = bench("--work", str(tmp_path / "work"), "--beside", text)
        assert proc.returncode == 2, proc.stderr
        assert "--beside: expected LABEL=FOLDER" in proc.stderr, proc.stderr
        assert not (tmp_path / "work").exists()
