"""scripts/table1.py on a tiny real Moses system with the real decoder and tuner.

The system (tests/data/tiny-system, see its build.py) is a slice of the real en-fr system: 10 dev
and 10 test sentences, the table's pairs for them, a small ARPA LM. Tuning is one MERT iteration;
the model is a tiny one trained here. Skipped when ../shared/tools/moses is absent.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import MOSES, ROOT, TINY_SYSTEM

from rescorer.errors import RescorerError
from rescorer.experiments.bleu import bleu_from_totals, corpus_stats
from rescorer.experiments.config import Table1Config, check_config
from rescorer.experiments.models import read_model, sha256_file
from rescorer.moses.ini import read_ini

SCRIPT = ROOT / "scripts" / "table1.py"

needs_moses = pytest.mark.skipif(
    not (MOSES / "bin" / "moses").exists(),
    reason=f"the real Moses toolkit is not at {MOSES} (../shared/tools/moses)",
)
pytestmark = [pytest.mark.slow, needs_moses]


def table1_argv(system: Path, model: Path, work: Path, runs: int = 2) -> list[str]:
    return [
        sys.executable, str(SCRIPT), str(system), "--model", str(model), "--work", str(work),
        "--moses", str(MOSES), "--runs", str(runs), "--max-iterations", "1", "--trials", "300",
        "--threads", "2", "--score-args", "--compile no",
    ]  # fmt: skip


def run_table1(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, check=False)


def lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def test_the_whole_driver_on_a_tiny_real_system(tmp_path: Path, tiny_model_dir: Path) -> None:
    work = tmp_path / "work"
    proc = run_table1(*table1_argv(TINY_SYSTEM, tiny_model_dir, work))
    assert proc.returncode == 0, proc.stderr
    results = json.loads((work / "results.json").read_text())
    assert [s["system"] for s in results["systems"]] == ["a", "b", "c", "d"]
    assert all(s["runs"] == 2 for s in results["systems"])
    assert results["sentences"] == {"dev": 10, "test": 10, "tune": 10}
    assert "| (d) +RNN, top-K table |" in proc.stdout  # results.md printed

    # the tiny model has not learned (validation perplexity above its unigram's): said on
    # stderr before the tuning, and in results.md and results.json; the model is its weights
    info = read_model(tiny_model_dir)
    warning = f"best validation perplexity {info.valid_ppl:.2f} is not clearly below"
    assert warning in proc.stderr.split("tune-a-1")[0]
    assert warning in (work / "results.md").read_text()
    assert len(results["warnings"]) == 1 and warning in results["warnings"][0]
    assert results["model"]["weights_sha256"] == sha256_file(tiny_model_dir / "model.safetensors")

    # the tables: filtered to dev+test, scored with 1 and 2 more columns, pruned for (d)
    assert results["tables"]["full_lines"] == 1414
    assert 0 < results["tables"]["filtered_lines"] <= 1414
    assert read_ini(str(work / "score-rnn" / "b.ini")).weights()["TranslationModel0"][4] == 0.05
    c_weights = read_ini(str(work / "score-rnn-wp" / "c.ini")).weights()["TranslationModel0"]
    assert c_weights[4:] == (0.05, 0.05)
    for run in results["runs"]:
        if run["system"] == "d":
            assert run["table_lines"] < results["tables"]["filtered_lines"]
    # every path in the inis the decoder read is absolute and exists
    for ini_path in (work / "filter" / "a.ini", work / "prune-d-1" / "d.ini"):
        for feature in read_ini(str(ini_path)).features:
            path = feature.get("path")
            assert path is None or (os.path.isabs(path) and os.path.exists(path)), path

    seeds = set()
    for row in results["runs"]:
        system, run = row["system"], row["run"]
        tuned_from = "b" if system == "d" else system
        tuned = read_ini(str(work / f"tune-{tuned_from}-{run}" / "tuned.ini")).weights()
        assert row["weights"] == {k: list(v) for k, v in tuned.items()}
        if system in "bcd":  # the RNN (and WP) weights are the tuned ones
            assert row["rnn_weight"] == tuned["TranslationModel0"][4]
        if system == "c":
            assert row["wp_weight"] == tuned["TranslationModel0"][5]
        seeds.add(row["seed"])
        log = (work / f"tune-{tuned_from}-{run}" / "mert" / "run1.mert.log").read_text()
        assert f"Seeding random numbers with {row['seed']}" in log
        for part in ("dev", "test"):
            hyps = lines(work / f"decode-{system}-{run}" / f"{part}.hyp")
            refs = lines(TINY_SYSTEM / f"{part}.fr")
            assert len(hyps) == 10
            ours = float(bleu_from_totals(corpus_stats(hyps, refs).sum(axis=0)))
            assert row[f"{part}_bleu"] == pytest.approx(ours, abs=1e-9)
            if all(np.asarray(corpus_stats(hyps, refs).sum(axis=0))[2:6] > 0):
                # multi-bleu.perl rounds to 2 decimals and does not smooth
                assert row[f"{part}_multi_bleu"] == pytest.approx(ours, abs=0.006)
    assert seeds == {1001, 1002}
    for s in results["systems"][1:]:
        assert 0 < s["test_vs_a"]["p"] <= 1
        assert s["test_vs_a"]["trials"] == 300
    assert set(results["step_seconds"]) >= {"prepare", "filter", "tune-a-2", "decode-d-2"}


def test_a_killed_driver_resumed_does_not_redo_finished_steps(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    work = tmp_path / "work"
    proc = subprocess.Popen(
        table1_argv(TINY_SYSTEM, tiny_model_dir, work, runs=1),
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 120
    while not (work / "tune-a-1" / "log").exists():
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        assert time.monotonic() < deadline
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)  # the driver, mert-moses.pl and the decoder
    proc.wait()
    finished = ("prepare", "filter", "score-rnn", "score-rnn-wp")
    before = {name: (work / name / "done.json").read_bytes() for name in finished}
    mtimes = {name: (work / name / "done.json").stat().st_mtime_ns for name in finished}

    again = run_table1(*table1_argv(TINY_SYSTEM, tiny_model_dir, work, runs=1))
    assert again.returncode == 0, again.stderr
    for name in finished:
        assert f"table1: {name}: done before" in again.stderr
        assert (work / name / "done.json").read_bytes() == before[name]
        assert (work / name / "done.json").stat().st_mtime_ns == mtimes[name]
    assert "table1: tune-a-1: running" in again.stderr  # the cut-short step ran again
    assert json.loads((work / "results.json").read_text())["systems"][0]["runs"] == 1

    third = run_table1(*table1_argv(TINY_SYSTEM, tiny_model_dir, work, runs=1))
    assert third.returncode == 0
    assert "running" not in third.stderr  # everything was done


def copy_system(tmp_path: Path) -> Path:
    system = tmp_path / "system"
    shutil.copytree(TINY_SYSTEM, system)
    return system


def test_a_decoder_error_names_the_step_and_its_log(tmp_path: Path, tiny_model_dir: Path) -> None:
    system = copy_system(tmp_path)
    (system / "lm.arpa").write_text("this is not an ARPA file\n")
    work = tmp_path / "work"
    proc = run_table1(*table1_argv(system, tiny_model_dir, work, runs=1))
    assert proc.returncode == 1
    error = proc.stderr.strip().splitlines()[-1]
    assert error.startswith("table1: error: step tune-a-1: perl exited with status")
    assert error.endswith(f"see {work / 'tune-a-1' / 'log'}")
    assert "Traceback" not in proc.stderr
    assert (work / "score-rnn" / "done.json").exists()  # the steps before it are kept
    assert not (work / "tune-a-1" / "done.json").exists()


def test_a_missing_table_names_the_step(tmp_path: Path, tiny_model_dir: Path) -> None:
    system = copy_system(tmp_path)
    (system / "reordering-table.gz").unlink()
    work = tmp_path / "work"
    proc = run_table1(*table1_argv(system, tiny_model_dir, work, runs=1))
    assert proc.returncode == 1
    assert f"step filter: missing {system / 'reordering-table.gz'}" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_missing_output_of_a_finished_step_names_the_next_step(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    work = tmp_path / "work"
    assert run_table1(*table1_argv(TINY_SYSTEM, tiny_model_dir, work, runs=1)).returncode == 0
    (work / "score-rnn" / "b.ini").unlink()
    shutil.rmtree(work / "tune-b-1")
    proc = run_table1(*table1_argv(TINY_SYSTEM, tiny_model_dir, work, runs=1))
    assert proc.returncode == 1
    assert f"step tune-b-1: missing {work / 'score-rnn' / 'b.ini'}" in proc.stderr


def test_a_work_dir_made_with_other_settings_is_refused(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    work = tmp_path / "work"
    argv = table1_argv(TINY_SYSTEM, tiny_model_dir, work, runs=1)
    assert run_table1(*argv).returncode == 0
    other = [*argv[:-2], "--top-k", "3", *argv[-2:]]
    proc = run_table1(*other)
    assert proc.returncode == 1
    assert "was made with other settings (top_k)" in proc.stderr


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"model": None}, "give a model directory (--model) or --train BUDGET"),
        ({"runs": 0}, "--runs 0: expected at least 1"),
        ({"src": "de"}, "no dev.de"),
        ({"tuner": "pro"}, "--tuner pro: expected one of mert, mira"),
    ],
)
def test_config_errors(tmp_path: Path, tiny_model_dir: Path, change: dict, message: str) -> None:
    base = {"system": TINY_SYSTEM, "work": tmp_path, "moses": MOSES, "model": tiny_model_dir}
    with pytest.raises(RescorerError, match=message.replace("(", r"\(").replace(")", r"\)")):
        check_config(Table1Config(**{**base, **change}))  # type: ignore[arg-type]


def test_train_budget_trains_the_model_first(tmp_path: Path) -> None:
    work = tmp_path / "work"
    argv = [
        sys.executable, str(SCRIPT), str(TINY_SYSTEM), "--train", "20s", "--work", str(work),
        "--moses", str(MOSES), "--runs", "1", "--max-iterations", "1", "--trials", "100",
        "--score-args", "--compile no", "--dev-lines", "6",
        "--train-args", "--hidden-size 8 --embed-size 6 --maxout-units 5 --src-vocab-size 200 "
        "--tgt-vocab-size 200 --batch-size 16 --max-updates 20 --valid-every 10 -q",
    ]  # fmt: skip
    proc = run_table1(*argv)
    assert proc.returncode == 0, proc.stderr
    results = json.loads((work / "results.json").read_text())
    assert results["model"]["model"] == str(work / "train" / "model")
    assert results["model"]["updates"] == 20
    assert results["model"]["model_config"]["hidden_size"] == 8
    # tuned on dev 1-6: BLEU of both dev parts, from the same statistics as the whole
    assert results["sentences"]["tune"] == 6
    for s in results["systems"]:
        assert {"dev_tuned_mean", "dev_rest_mean"} <= set(s)
    assert "Dev split: the 6 sentences tuned on" in proc.stdout
    score_log = (work / "score-rnn" / "log").read_text()
    assert f"-m {work / 'train' / 'model'}" in score_log
