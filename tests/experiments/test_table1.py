"""scripts/table1.py on a tiny real Moses system with the real decoder and tuners.

The system (tests/data/tiny-system, see its build.py) is a slice of the real en-fr system: 10 dev
and 10 test sentences, the table's pairs for them, a small ARPA LM. Tuning is one MERT (or batch
MIRA) iteration; the models are tiny ones trained here: two snapshots of one training run (after
10 and 20 updates). Skipped when ../shared/tools/moses is absent.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import numpy as np
import pytest
from conftest import (
    MOSES,
    TABLE1,
    TINY_SYSTEM,
    TINY_TRAIN_FLAGS,
    relocated_copy,
    table1_argv,
)

from rescorer.constants import TRAIN_STATE_FILE
from rescorer.experiments.bleu import bleu_from_totals, corpus_stats
from rescorer.experiments.breakdown import length_groups, table_source_words, unknown_groups
from rescorer.experiments.models import read_model, sha256_file
from rescorer.experiments.new_pairs import strip_segmentation
from rescorer.experiments.table1 import INTERIM_FILES
from rescorer.moses.ini import read_ini

TABLE = TINY_SYSTEM / "phrase-table.gz"
TM = "TranslationModel0"

needs_moses = pytest.mark.skipif(
    not (MOSES / "bin" / "moses").exists(),
    reason=f"the real Moses toolkit is not at {MOSES} (../shared/tools/moses)",
)
pytestmark = [pytest.mark.slow, needs_moses]


def train_tiny(out: Path, *flags: str) -> Path:
    subprocess.run(
        [sys.executable, "-m", "rescorer", "train", str(TABLE), "-o", str(out), *flags],
        check=True,
    )
    return out


@pytest.fixture(scope="module")
def snapshots(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path) -> list[Path]:
    """tiny_model_dir's training run after 10 updates and after 20, labelled by snapshot."""
    root = tmp_path_factory.mktemp("curve")
    flags = [f if f != "20" else "10" for f in TINY_TRAIN_FLAGS]  # --max-updates 10
    early = train_tiny(root / "tiny@10", *flags)
    late = root / "tiny@20"
    shutil.copytree(tiny_model_dir, late)
    return [early, late]


def run_table1(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, check=False)


def lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def scores_per_line(table: Path) -> int:
    with subprocess.Popen(["zcat", str(table)], stdout=subprocess.PIPE, text=True) as proc:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        proc.kill()
    return len(first.split(" ||| ")[2].split())


def test_the_whole_second_edition_on_a_tiny_real_system(
    tmp_path: Path, snapshots: list[Path]
) -> None:
    work = tmp_path / "work"
    argv = table1_argv(TINY_SYSTEM, snapshots, work, "--runs", "2", "--runs-c", "1")
    proc = run_table1(*argv, "--runs-mira", "1")
    assert proc.returncode == 0, proc.stderr
    results = json.loads((work / "results.json").read_text())
    systems = {s["system"]: s for s in results["systems"]}
    assert list(systems) == [
        "a", "b-tiny@10", "b-tiny@20", "c-tiny@20", "d-tiny@20", "a-mira", "b-mira-tiny@20",
    ]  # fmt: skip
    assert [s["runs"] for s in systems.values()] == [2, 2, 2, 1, 1, 1, 1]
    assert results["best"] == "tiny@20"  # the lower validation perplexity
    assert results["sentences"] == {"dev": 10, "test": 10, "tune": 10}
    assert "| (d) +RNN tiny@20, top-5 table |" in proc.stdout  # results.md printed

    # every model by the sha256 of its weights, with what it says of its training
    for model, path in zip(results["models"], snapshots, strict=True):
        info = read_model(path)
        assert model["label"] == path.name
        assert model["weights_sha256"] == sha256_file(path / "model.safetensors")
        assert (model["updates"], model["valid_ppl"]) == (info.updates, info.valid_ppl)
    assert results["models"][1]["systems"] == [
        "b-tiny@20", "c-tiny@20", "d-tiny@20", "b-mira-tiny@20",
    ]  # fmt: skip
    # neither tiny model has learned: said on stderr before any tuning, and in results.md
    for path in snapshots:
        warning = f"model {path}: best validation perplexity"
        assert warning in proc.stderr.split("tune-a-1")[0]
        assert warning in (work / "results.md").read_text()
    assert len(results["warnings"]) == 2

    # every tuned system starts from the shipped weights and 0.05 per new column
    shipped = read_ini(str(TINY_SYSTEM / "moses.ini")).weights()
    starts = {
        "a": work / "filter" / "a.ini",
        "b-tiny@10": work / "score-tiny@10" / "start.ini",
        "b-tiny@20": work / "score-tiny@20" / "start.ini",
        "c-tiny@20": work / "score-tiny@20-wp" / "start.ini",
        "a-mira": work / "filter" / "a.ini",
        "b-mira-tiny@20": work / "score-tiny@20" / "start.ini",
    }
    for key, ini in starts.items():
        weights = read_ini(str(ini)).weights()
        new = {"a": 0, "c-tiny@20": 2}.get(key.removesuffix("-mira"), 1)
        assert weights[TM] == shipped[TM] + (0.05,) * new
        assert {k: v for k, v in weights.items() if k != TM} == {
            k: v for k, v in shipped.items() if k != TM
        }
        log = (work / f"tune-{key}-1" / "log").read_text()
        assert f"{work / 'prepare' / 'tune.src'} {work / 'prepare' / 'tune.ref'}" in log
        assert f" {ini} " in log
    assert scores_per_line(work / "score-tiny@20-wp" / "phrase-table.gz") == 6

    seeds = set()
    for row in results["runs"]:
        key, run = row["system"], row["run"]
        tuned_from = "b-tiny@20" if key == "d-tiny@20" else key
        tuned = read_ini(str(work / f"tune-{tuned_from}-{run}" / "tuned.ini")).weights()
        assert row["weights"] == {k: list(v) for k, v in tuned.items()}
        names = {"a": [], "c-tiny@20": ["RNN", "WP"]}.get(key.removesuffix("-mira"), ["RNN"])
        assert row["new_weights"] == dict(zip(names, tuned[TM][4:], strict=True))
        named = {k: v for k, v in row["named_weights"].items() if k not in names}
        assert named == {
            (k if len(v) == 1 else f"{k}[{i}]"): x
            for k, v in tuned.items()
            for i, x in enumerate(v if k != TM else v[:4])
        }
        seeds.add(row["seed"])
        mert = work / f"tune-{tuned_from}-{run}" / "mert"
        log = (mert / "run1.mert.log").read_text()
        if "mira" in key:
            assert log.startswith("kbmira with ")
            assert f"Initialising random seed to {row['seed']}" in log
        else:
            assert f"Seeding random numbers with {row['seed']}" in log
        if key == "d-tiny@20":
            assert row["table_lines"] < results["tables"]["filtered_lines"]
        for part in ("dev", "test"):
            hyps = lines(work / f"decode-{key}-{run}" / f"{part}.hyp")
            refs = lines(TINY_SYSTEM / f"{part}.fr")
            assert len(hyps) == 10
            ours = float(bleu_from_totals(corpus_stats(hyps, refs).sum(axis=0)))
            assert row[f"{part}_bleu"] == pytest.approx(ours, abs=1e-9)
            if all(np.asarray(corpus_stats(hyps, refs).sum(axis=0))[2:6] > 0):
                # multi-bleu.perl rounds to 2 decimals and does not smooth
                assert row[f"{part}_multi_bleu"] == pytest.approx(ours, abs=0.006)
    assert seeds == {1001, 1002}
    for key, s in systems.items():  # runs that reached the same tuned.ini weights
        tuned_from = "b-tiny@20" if key == "d-tiny@20" else key
        inis = {
            str(read_ini(str(work / f"tune-{tuned_from}-{r}" / "tuned.ini")).weights())
            for r in range(1, s["runs"] + 1)
        }
        assert s["distinct_weights"] == len(inis)
    # where the gain is: the test sentences by length and unknown words, each system's gain
    test_src = lines(TINY_SYSTEM / "test.en")
    known = table_source_words(str(work / "filter" / "phrase-table.gz"))
    groups = length_groups(test_src) + unknown_groups(test_src, known)
    n_length = len(length_groups(test_src))
    for partition in (groups[:n_length], groups[n_length:]):  # each covers every sentence once
        covered = np.sort(np.concatenate([g.sentences for g in partition]))
        assert covered.tolist() == list(range(len(test_src)))
    for key, s in systems.items():
        if s["baseline"] is None:
            assert "test_by_group" not in s
            continue
        assert [(r["group"], r["sentences"]) for r in s["test_by_group"]] == [
            (g.name, len(g.sentences)) for g in groups
        ]
        refs = lines(TINY_SYSTEM / "test.fr")
        for group, row in zip(groups, s["test_by_group"], strict=True):
            for which, name in (("system", key), ("baseline", s["baseline"])):
                bleus = []  # each replica's BLEU on the group's sentences alone
                for run in range(1, systems[name]["runs"] + 1):
                    hyps = lines(work / f"decode-{name}-{run}" / "test.hyp")
                    picked = [(hyps[i], refs[i]) for i in group.sentences]
                    totals = corpus_stats(*zip(*picked, strict=True)).sum(axis=0)
                    bleus.append(float(bleu_from_totals(totals)))
                assert row[which] == pytest.approx(np.mean(bleus), abs=1e-9)
    assert "Where the test gain is" in (work / "results.md").read_text()
    for key, s in systems.items():  # which features moved: each weight's mean over the runs
        rows = [r["named_weights"] for r in results["runs"] if r["system"] == key]
        assert s["weight_means"] == pytest.approx(
            {name: sum(r[name] for r in rows) / len(rows) for name in rows[0]}
        )

    # each system against its own tuner's baseline, with both tests and the interval
    assert systems["a"].get("test_vs_baseline") is None
    assert systems["a-mira"].get("test_vs_baseline") is None
    for key, s in systems.items():
        if key in ("a", "a-mira"):
            continue
        assert s["baseline"] == ("a-mira" if "mira" in key else "a")
        sig = s["test_vs_baseline"]
        base = systems[s["baseline"]]
        assert sig["delta"] == pytest.approx(s["test_mean"] - base["test_mean"], abs=1e-6)
        assert sig["interval"][0] <= sig["interval"][1]
        assert 0 < sig["p"] <= 1 and 0 < sig["p_shared_coin"] <= 1 and sig["trials"] == 300
    assert "p (test, shared coin, ours)" in proc.stdout

    # the curve: one point per MERT (b), at its model's training time
    assert (work / "curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    points = json.loads((work / "curve.json").read_text())
    assert sorted(p["model"] for p in points) == ["tiny@10", "tiny@20"]
    # in the order of their training times (which, on a busy machine, need not be the order
    # of their update counts)
    assert [p["hours"] for p in points] == sorted(p["hours"] for p in points)
    models = {m["label"]: m for m in results["models"]}
    for point in points:
        model = models[point["model"]]
        assert point["hours"] == model["train_hours"]
        assert point["gain"] == systems[point["system"]]["test_vs_baseline"]["delta"]
    assert "![test BLEU gain against training hours](curve.png)" in proc.stdout


def test_a_killed_driver_resumed_does_not_redo_finished_steps_and_takes_a_new_snapshot(
    tmp_path: Path, snapshots: list[Path]
) -> None:
    work = tmp_path / "work"
    flags = ("--runs", "1", "--runs-c", "0", "--max-iterations", "2")  # 2: one to go on from
    argv = table1_argv(TINY_SYSTEM, snapshots[1:], work, *flags)
    proc = subprocess.Popen(
        argv, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, start_new_session=True
    )
    deadline = time.monotonic() + 120
    finished = work / "tune-a-1" / "mert" / "finished_step.txt"  # MERT's first iteration is done
    while not finished.exists():
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        assert time.monotonic() < deadline
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)  # the driver, mert-moses.pl and the decoder
    proc.wait()
    finished = ("prepare", "filter", "score-tiny@20")
    before = {name: (work / name / "done.json").read_bytes() for name in finished}
    mtimes = {name: (work / name / "done.json").stat().st_mtime_ns for name in finished}

    again = run_table1(*argv)
    assert again.returncode == 0, again.stderr
    for name in finished:
        assert f"table1: {name}: done before" in again.stderr
        assert (work / name / "done.json").read_bytes() == before[name]
        assert (work / name / "done.json").stat().st_mtime_ns == mtimes[name]
    assert "table1: tune-a-1: running" in again.stderr  # the cut-short step ran again,
    tuned = json.loads((work / "tune-a-1" / "done.json").read_text())  # from its iteration 1
    assert tuned["continued_after_iteration"] == 1 and tuned["iterations"] == 2, tuned
    log = lines(work / "tune-a-1" / "log")
    assert any("Trying to continue an interrupted optimization" in line for line in log)
    results = json.loads((work / "results.json").read_text())
    assert results["systems"][0]["runs"] == 1
    # its time: this invocation's, plus iteration 1 of the killed one, by mert-moses.pl's log
    when = {
        what: datetime.strptime(line.split(" at ")[1].replace(" UTC", ""), "%a %b %d %H:%M:%S %Y")
        for line in log
        for what in ("start", "end")
        if line.startswith(f"run 1 {what} at ")
    }
    first = (when["end"] - when["start"]).total_seconds()
    row = results["runs"][0]
    assert row["continued_after_iteration"] == 1
    assert row["tune_seconds"] == pytest.approx(tuned["seconds"] + first)
    assert results["step_seconds"]["tune-a-1"] == row["tune_seconds"]  # one time for the step
    assert "\\* A tuning run continued after a kill" in (work / "results.md").read_text()
    plan = run_table1(*argv, "--plan")  # times it whole too
    assert re.search(rf"^tune-a-1 +done \({row['tune_seconds']:.0f} s\)$", plan.stdout, re.M)

    third = run_table1(*argv)
    assert third.returncode == 0
    assert "running" not in third.stderr  # everything was done

    # a snapshot added later: its steps run, nothing else
    more = run_table1(*table1_argv(TINY_SYSTEM, snapshots, work, *flags))
    assert more.returncode == 0, more.stderr
    ran = [line.split(":")[1].strip() for line in more.stderr.splitlines() if "running" in line]
    assert ran == ["score-tiny@10", "tune-b-tiny@10-1", "decode-b-tiny@10-1"]
    results = json.loads((work / "results.json").read_text())
    assert [s["system"] for s in results["systems"]] == ["a", "b-tiny@10", "b-tiny@20"]


def test_system_e_adds_both_directions(
    tmp_path: Path, tiny_table1_work: Path, tiny_model_dir: Path, tiny_inverse_model_dir: Path
) -> None:
    inverse = tmp_path / "inverse"  # labelled "inverse" (its folder's name)
    shutil.copytree(tiny_inverse_model_dir, inverse)
    work = relocated_copy(tiny_table1_work, tmp_path / "work")  # (a) and (b) done
    argv = table1_argv(TINY_SYSTEM, [tiny_model_dir], work, "--runs", "1", "--runs-c", "0")
    proc = run_table1(*argv, "--inverse-model", str(inverse))
    assert proc.returncode == 0, proc.stderr
    ran = [line.split(":")[1].strip() for line in proc.stderr.splitlines() if "running" in line]
    key = f"e-{tiny_model_dir.name}+inverse"
    assert ran == [f"score-{tiny_model_dir.name}+inverse", f"tune-{key}-1", f"decode-{key}-1"]
    results = json.loads((work / "results.json").read_text())
    assert [s["system"] for s in results["systems"]] == ["a", f"b-{tiny_model_dir.name}", key]
    score = work / f"score-{tiny_model_dir.name}+inverse"
    assert f"-m {tiny_model_dir} -m {inverse} " in (score / "log").read_text()
    assert scores_per_line(score / "phrase-table.gz") == scores_per_line(TABLE) + 2
    shipped = read_ini(str(TINY_SYSTEM / "moses.ini")).weights()[TM]
    assert read_ini(str(score / "start.ini")).weights()[TM] == (*shipped, 0.05, 0.05)
    (row,) = [r for r in results["runs"] if r["system"] == key]
    assert list(row["new_weights"]) == ["RNN", "RNN inverse"]
    assert [m["direction"] for m in results["models"]] == ["forward", "inverse"]


def test_system_f_fills_up_the_table_and_counts_the_new_pairs_it_used(
    tmp_path: Path, tiny_table1_work: Path, tiny_model_dir: Path
) -> None:
    work, label = relocated_copy(tiny_table1_work, tmp_path / "work"), tiny_model_dir.name
    argv = table1_argv(TINY_SYSTEM, [tiny_model_dir], work, "--runs", "1", "--runs-c", "0")
    # table1_argv's extend flags: a floor of 0.5 for the new pairs' phrase probabilities
    proc = run_table1(*argv, "--runs-f", "1")
    assert proc.returncode == 0, proc.stderr
    ran = [line.split(":")[1].strip() for line in proc.stderr.splitlines() if "running" in line]
    assert ran == [f"extend-{label}", f"tune-f-{label}-1", f"decode-f-{label}-1"]
    results = json.loads((work / "results.json").read_text())
    systems = {s["system"]: s for s in results["systems"]}
    key, b = f"f-{label}", f"b-{label}"
    assert list(systems) == ["a", b, key]
    f = systems[key]
    assert (f["letter"], f["baseline"], f["second_baseline"]) == ("f", "a", b)

    # the scored table of (b), extended for dev+test's sources: one column more, 2 weights more
    extend = work / f"extend-{label}"
    log = (extend / "log").read_text()
    assert (
        f"extend {work / f'score-{label}' / 'phrase-table.gz'} -m {tiny_model_dir} --input "
        f"{work / 'prepare' / 'devtest.src'} --form fill-up -o {extend / 'phrase-table.gz'} -q "
        "-n 2 --floor 0.5"
    ) in log
    table = extend / "phrase-table.gz"
    assert scores_per_line(table) == scores_per_line(TABLE) + 2
    shipped = read_ini(str(TINY_SYSTEM / "moses.ini")).weights()[TM]
    assert read_ini(str(extend / "start.ini")).weights()[TM] == (*shipped, 0.05, 0.05)
    (row,) = [r for r in results["runs"] if r["system"] == key]
    assert list(row["new_weights"]) == ["RNN", "provenance"]
    assert (
        row["table_lines"]
        == f["table_lines"]
        == len(gzip.decompress(table.read_bytes()).splitlines())
    )

    # the generated pairs, recounted here from the table and the segmented 1-best
    generated = set()
    for line in gzip.decompress(table.read_bytes()).decode().splitlines():
        fields = line.split(" ||| ")
        if fields[2].split()[-1] == "2.718":
            generated.add((fields[0], fields[1]))
    assert len(generated) == f["new_pairs"]["generated_pairs"] > 0
    decoded = work / f"decode-{key}-1"
    segmented = lines(decoded / "test.seg")
    used: list[list[tuple[str, str]]] = []
    for source, seg in zip(lines(TINY_SYSTEM / "test.en"), segmented, strict=True):
        words, phrase, pairs = source.split(), [], []
        for token in seg.split():
            span = re.fullmatch(r"\|(\d+)-(\d+)\|", token)
            if span is None:
                phrase.append(token)
                continue
            pair = (" ".join(words[int(span[1]) : int(span[2]) + 1]), " ".join(phrase))
            pairs += [pair] if pair in generated else []
            phrase = []
        used.append(pairs)
    (counted,) = f["new_pairs"]["runs"]
    assert counted == {
        "run": 1,
        "sentences": sum(1 for u in used if u),
        "pairs": sum(len(u) for u in used),
        "distinct": len({p for u in used for p in u}),
    }
    assert counted["pairs"] > 0  # the floor makes them worth taking
    examples = f["new_pairs"]["examples"]
    for e in examples["helped"] + examples["hurt"]:
        i = e["sentence"] - 1
        assert [tuple(p) for p in e["new_pairs"]] == list(dict.fromkeys(used[i]))
        assert e["hypothesis"] == lines(decoded / "test.hyp")[i].strip()
        assert e["versus_hypothesis"] == lines(work / f"decode-{b}-1" / "test.hyp")[i].strip()
        assert (e["bleu"] > e["versus_bleu"]) == (e in examples["helped"])

    # the 1-best without the spans is what the decoder writes without the flag: (b)'s test,
    # decoded again with it (here, with ties between new pairs of equal scores, two decodes
    # of (f) need not give the same 1-best: test.hyp is test.seg's, not a second decode's)
    segmented_b = subprocess.run(
        [str(MOSES / "bin" / "moses"), "-f", str(work / f"tune-{b}-1" / "tuned.ini"),
         "-report-segmentation"],
        stdin=(TINY_SYSTEM / "test.en").open("rb"), capture_output=True, check=True, text=True,
    )  # fmt: skip
    stripped = "".join(f"{strip_segmentation(line)}\n" for line in segmented_b.stdout.splitlines())
    assert stripped == (work / f"decode-{b}-1" / "test.hyp").read_text()
    assert "".join(f"{strip_segmentation(line)}\n" for line in segmented) == (
        (decoded / "test.hyp").read_text()
    )

    # against (b) as well as (a), and the new pairs in results.md
    sig = f["test_vs_second_baseline"]
    assert sig["delta"] == pytest.approx(f["test_mean"] - systems[b]["test_mean"], abs=1e-6)
    assert f["test_vs_baseline"]["delta"] == pytest.approx(
        f["test_mean"] - systems["a"]["test_mean"], abs=1e-6
    )
    assert f"| (f) +RNN {label}, filled up with its own pairs | (b) +RNN {label} |" in proc.stdout
    assert f"| 1 | {counted['sentences']} | {counted['pairs']} | {counted['distinct']} |" in (
        proc.stdout
    )


def test_a_model_of_the_wrong_direction_is_refused(tmp_path: Path, tiny_model_dir: Path) -> None:
    forward = tmp_path / "inv@2h"
    shutil.copytree(tiny_model_dir, forward)
    argv = table1_argv(TINY_SYSTEM, [tiny_model_dir], tmp_path / "work")
    proc = run_table1(*argv, "--inverse-model", str(forward))
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1] == (
        f"table1: error: --inverse-model {forward}: a forward-direction model; expected "
        "an inverse one (rescorer train --direction inverse)"
    )
    assert not (tmp_path / "work" / "prepare").exists()  # refused before any step


def copy_system(tmp_path: Path) -> Path:
    system = tmp_path / "system"
    shutil.copytree(TINY_SYSTEM, system)
    return system


def test_a_decoder_error_names_the_step_and_its_log(tmp_path: Path, tiny_model_dir: Path) -> None:
    system = copy_system(tmp_path)
    (system / "lm.arpa").write_text("this is not an ARPA file\n")
    work = tmp_path / "work"
    proc = run_table1(*table1_argv(system, [tiny_model_dir], work, "--runs", "1"))
    assert proc.returncode == 1
    error = proc.stderr.strip().splitlines()[-1]
    assert error.startswith("table1: error: step tune-a-1: perl exited with status")
    assert error.endswith(f"see {work / 'tune-a-1' / 'log'}")
    assert "Traceback" not in proc.stderr
    assert (work / "score-model-wp" / "done.json").exists()  # the steps before it are kept
    assert not (work / "tune-a-1" / "done.json").exists()


def test_a_missing_table_names_the_step(tmp_path: Path, tiny_model_dir: Path) -> None:
    system = copy_system(tmp_path)
    (system / "reordering-table.gz").unlink()
    work = tmp_path / "work"
    proc = run_table1(*table1_argv(system, [tiny_model_dir], work, "--runs", "1"))
    assert proc.returncode == 1
    assert f"step filter: missing {system / 'reordering-table.gz'}" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_missing_output_of_a_finished_step_names_the_next_step(
    tmp_path: Path, tiny_table1_work: Path, tiny_model_dir: Path
) -> None:
    work = relocated_copy(tiny_table1_work, tmp_path / "work")
    argv = table1_argv(TINY_SYSTEM, [tiny_model_dir], work, "--runs", "1", "--runs-c", "0")
    (work / "score-model" / "start.ini").unlink()
    shutil.rmtree(work / "tune-b-model-1")
    proc = run_table1(*argv)
    assert proc.returncode == 1
    assert f"step tune-b-model-1: missing {work / 'score-model' / 'start.ini'}" in proc.stderr


def test_a_work_dir_made_with_other_settings_or_weights_is_refused(
    tmp_path: Path, tiny_table1_work: Path, snapshots: list[Path]
) -> None:
    work = relocated_copy(tiny_table1_work, tmp_path / "work")  # scored with snapshots[1]
    model = tmp_path / "later" / "model"  # labelled "model", as that one
    shutil.copytree(snapshots[1], model)
    argv = table1_argv(TINY_SYSTEM, [model], work, "--runs", "1", "--runs-c", "0")
    proc = run_table1(*argv, "--top-k", "3")
    assert proc.returncode == 1
    assert "was made with other settings (top_k)" in proc.stderr
    # the model went on training: its label now names other weights
    shutil.copyfile(snapshots[0] / "model.safetensors", model / "model.safetensors")
    proc = run_table1(*argv)
    assert proc.returncode == 1
    new, old = (sha256_file(p / "model.safetensors")[:12] for p in snapshots)
    assert (
        f"scored with model model of weights sha256 {old}; this model has {new} (still "
        "training, or another model?)"
    ) in proc.stderr
    assert "running" not in proc.stderr  # refused before any step


def test_train_budget_trains_the_model_first(tmp_path: Path) -> None:
    work = tmp_path / "work"
    argv = [
        sys.executable, str(TABLE1), str(TINY_SYSTEM), "--train", "5m", "--work", str(work),
        "--moses", str(MOSES), "--runs", "1", "--runs-c", "0", "--max-iterations", "1",
        "--trials", "100", "--score-args", "--compile no", "--dev-lines", "6",
        "--train-args", "--hidden-size 8 --embed-size 6 --maxout-units 5 --src-vocab-size 200 "
        "--tgt-vocab-size 200 --batch-size 16 --max-updates 20 --valid-every 10 -q",
    ]  # fmt: skip
    proc = run_table1(*argv)
    assert proc.returncode == 0, proc.stderr
    results = json.loads((work / "results.json").read_text())
    (model,) = results["models"]
    assert (model["label"], model["path"]) == ("train", str(work / "train" / "model"))
    assert model["updates"] == 20
    assert model["model_config"]["hidden_size"] == 8
    assert [s["system"] for s in results["systems"]] == ["a", "b-train"]
    # tuned on dev 1-6: BLEU of both dev parts, from the same statistics as the whole
    assert results["sentences"]["tune"] == 6
    for s in results["systems"]:
        assert {"dev_tuned_mean", "dev_rest_mean"} <= set(s)
    assert "Dev split: the 6 sentences tuned on" in proc.stdout
    score_log = (work / "score-train" / "log").read_text()
    assert f"-m {work / 'train' / 'model'}" in score_log


def test_jobs_tune_at_once_and_give_what_one_at_a_time_gives(
    tmp_path: Path, tiny_table1_work: Path, tiny_model_dir: Path
) -> None:
    """--jobs 2 runs two tuning chains at once; (d)'s run r prunes with (b)'s weights of run r,
    so it waits for that tuning. Every tuned weight and BLEU equals a one-at-a-time run's."""
    flags = ("--runs", "2", "--runs-c", "2")
    rows = {}
    for jobs in (1, 2):
        work = relocated_copy(tiny_table1_work, tmp_path / f"jobs{jobs}")  # run 1 of (a), (b)
        argv = table1_argv(TINY_SYSTEM, [tiny_model_dir], work, *flags, "--jobs", str(jobs))
        proc = run_table1(*argv)
        assert proc.returncode == 0, proc.stderr
        results = json.loads((work / "results.json").read_text())
        assert results["config"]["jobs"] == jobs
        rows[jobs] = {
            (r["system"], r["run"]): (r["weights"], r["dev_bleu"], r["test_bleu"])
            for r in results["runs"]
        }
        # the order of the driver's lines of the tuning chains: (step, "running" or "done")
        events = [
            (m[1], m[2])
            for m in re.finditer(r"^table1: ([^:]+): (running|done) [(i]", proc.stderr, re.M)
            if m[1].split("-")[0] in ("tune", "decode", "prune")
        ]
        running: set[str] = set()
        most = 0  # the most steps running at once
        for name, what in events:
            running = running | {name} if what == "running" else running - {name}
            most = max(most, len(running))
        assert most == jobs, events  # two chains at once with --jobs 2
        assert events.index(("tune-b-model-2", "done")) < events.index(
            ("prune-d-model-2", "running")
        )
    assert rows[1] == rows[2] and len(rows[1]) == 8  # (a)-(d), runs 1 and 2


def test_a_chain_that_fails_under_jobs_stops_the_others_and_names_its_step(
    tmp_path: Path, tiny_table1_work: Path, tiny_model_dir: Path
) -> None:
    """--jobs 2: (b)'s first tuning fails at once (its start.ini is gone) beside (a)'s second
    chain: that chain is ended if it had started (the SIGTERM test of test_table1_hostile.py
    shows two running tunings ended), no later step starts, and the error is (b)'s."""
    work = relocated_copy(tiny_table1_work, tmp_path / "work")
    (work / "score-model" / "start.ini").unlink()
    shutil.rmtree(work / "tune-b-model-1")
    argv = table1_argv(TINY_SYSTEM, [tiny_model_dir], work, "--runs", "2", "--runs-c", "0")
    proc = run_table1(*argv, "--jobs", "2")
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1] == (
        f"table1: error: step tune-b-model-1: missing {work / 'score-model' / 'start.ini'} "
        f"(see {work / 'tune-b-model-1' / 'log'})"
    )
    assert "decode-a-2: running" not in proc.stderr and "Traceback" not in proc.stderr
    left = [p for p in Path("/proc").glob("[0-9]*") if str(work) in _cmdline(p)]
    assert not left  # nothing of the work folder still runs


def test_plan_lists_the_steps_of_a_model_still_training(
    tmp_path: Path, tiny_model_dir: Path, tiny_inverse_model_dir: Path
) -> None:
    """A model folder that has not saved weights yet (a 6-hour snapshot still training) is
    planned by its label: its steps are listed and the note names it. The best model for
    (c)-(f) waits for every model's perplexity unless --best names it; a run refuses the
    missing folder."""
    later, inverse, work = tmp_path / "later@6h", tmp_path / "inv@6h", tmp_path / "work"
    later.mkdir()  # made by the training, no weights yet
    (tmp_path / "inv").mkdir()  # inv@6h: a snapshot train_snapshots.py copies from inv/ later
    models = [tiny_model_dir, later]
    argv = table1_argv(TINY_SYSTEM, models, work, "--runs", "1", "--inverse-model", str(inverse))
    proc = run_table1(*argv, "--runs-f", "1", "--runs-mira", "1", "--plan")
    assert proc.returncode == 0, proc.stderr
    names = [line.split()[0] for line in proc.stdout.split("\n\n")[0].splitlines()]
    assert "score-later@6h" in names and "tune-b-later@6h-1" in names
    assert not [n for n in names if n.startswith(("tune-c-", "tune-d-", "tune-e-", "tune-f-"))]
    assert not [n for n in names if "mira" in n]
    note = proc.stdout.strip().splitlines()[-1]
    assert note.startswith(f"note: not there yet: {later}, {inverse} ")
    assert "(c)-(f) and MIRA are planned once every model exists, or with --best" in note
    # --best names the waiting model: every system is planned with it
    proc = run_table1(*argv, "--runs-f", "1", "--best", "later@6h", "--plan")
    assert proc.returncode == 0, proc.stderr
    for step in ("tune-c-later@6h-1", "tune-f-later@6h-1", "tune-e-later@6h+inv@6h-1"):
        assert re.search(rf"^{re.escape(step)} +to do$", proc.stdout, re.M), proc.stdout
    assert not work.exists()
    # only the inverse model waits: the best forward model is known, every system is planned
    present = table1_argv(TINY_SYSTEM, [tiny_model_dir], work, "--runs", "1")
    proc = run_table1(*present, "--inverse-model", str(inverse), "--runs-f", "1", "--plan")
    assert proc.returncode == 0, proc.stderr
    label = tiny_model_dir.name
    for step in (f"tune-c-{label}-1", f"tune-f-{label}-1", f"tune-e-{label}+inv@6h-1"):
        assert re.search(rf"^{re.escape(step)} +to do$", proc.stdout, re.M), proc.stdout
    assert "planned once every model exists" not in proc.stdout
    # --train not trained yet beside an inverse model that exists: no forward model to pick the
    # best from (this was a ValueError traceback)
    proc = run_table1(
        *table1_argv(TINY_SYSTEM, [], tmp_path / "w2", "--train", "1m"),
        "--inverse-model",
        str(tiny_inverse_model_dir),
        "--plan",
    )
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert "the systems of the --train model are planned once it is trained" in proc.stdout
    # the run itself refuses the folder, before any step
    proc = run_table1(*argv)
    assert proc.returncode == 1
    assert f"--model {later}: " in proc.stderr and "Traceback" not in proc.stderr
    assert not (work / "prepare").exists()
    # a mistyped path is no model to come: a snapshot without its training folder beside it
    # or with a label that is no duration, a folder that is not there, a file: the plan
    # refuses them too
    (tmp_path / "later").mkdir()  # a training folder: only later@<a duration> is to come
    (tmp_path / "notes.txt").write_text("not a model\n")
    for typo, why in (
        (
            tmp_path / "latre@6h",
            f"no such model folder, and no training folder {tmp_path / 'latre'}",
        ),
        (tmp_path / "paper-h10", "no such model folder (a model still training"),
        (tmp_path / "later@6hh", "no such model folder, and '6hh' after the @ is not a snapshot"),
        (tmp_path / "notes.txt", "a file, not a model folder"),
    ):
        proc = run_table1(*table1_argv(TINY_SYSTEM, [tiny_model_dir, typo], work), "--plan")
        assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
        assert f"--model {typo}: {why}" in proc.stderr, proc.stderr


def _cmdline(proc: Path) -> str:
    try:
        return (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def test_plan_lists_every_step_and_how_far_it_is_and_writes_nothing(
    tmp_path: Path, tiny_table1_work: Path, tiny_model_dir: Path, snapshots: list[Path]
) -> None:
    work, label = relocated_copy(tiny_table1_work, tmp_path / "work"), tiny_model_dir.name
    # run 2 of (a) was killed after 3 MERT iterations; run 2 of (b) was killed before any
    (work / "tune-a-2" / "mert").mkdir(parents=True)
    (work / "tune-a-2" / "mert" / "finished_step.txt").write_text("3\n")
    for name in ("features.dat", "scores.dat", "weights.txt", "best100.out.gz"):
        (work / "tune-a-2" / "mert" / f"run3.{name}").write_bytes(b"")  # what --continue reads
    (work / f"tune-b-{label}-2").mkdir()
    # run 1 of (b) had finished its tuning when its record was lost: it tunes again, afresh
    (work / f"tune-b-{label}-1" / "done.json").unlink()
    assert (work / f"tune-b-{label}-1" / "mert" / "moses.ini").is_file()
    # and its scoring step was killed after a chunk: its command's record says where it was
    (work / f"score-{label}" / "done.json").unlink()
    (work / f"score-{label}" / "phrase-table.gz.partial.json").write_text('{"next_line": 1234}')
    # run 1 of (b)'s decoding finished, then its test output lost its last line: decoded again
    hyp = work / f"decode-b-{label}-1" / "test.hyp"
    hyp.write_bytes(b"".join(hyp.read_bytes().splitlines(keepends=True)[:-1]))
    before = {p: p.stat().st_mtime_ns for p in work.rglob("*")}
    argv = table1_argv(TINY_SYSTEM, [tiny_model_dir], work, "--runs", "2", "--runs-c", "0")
    proc = run_table1(*argv, "--plan")
    assert proc.returncode == 0, proc.stderr
    states = dict(line.split(maxsplit=1) for line in proc.stdout.split("\n\n")[0].splitlines())
    assert list(states) == [
        "prepare", "filter", f"score-{label}", "tune-a-1", "decode-a-1", f"tune-b-{label}-1",
        f"decode-b-{label}-1", "tune-a-2", "decode-a-2", f"tune-b-{label}-2",
        f"decode-b-{label}-2",
    ]  # fmt: skip
    record = json.loads((work / "tune-a-1" / "done.json").read_text())
    assert states["tune-a-1"] == f"done ({record['seconds']:.0f} s)"
    assert states["tune-a-2"] == "partial: 3 tuning iterations finished"
    assert states[f"tune-b-{label}-2"] == "partial: runs again from its start"
    assert states[f"tune-b-{label}-1"] == (
        "partial: its tuning had finished, its record was lost: runs again from its start"
    )
    assert states["decode-a-2"] == "to do"
    assert states[f"decode-b-{label}-1"] == (
        f"partial: {hyp}: 9 lines, expected 10 (one per test sentence): runs again from its start"
    )
    assert states["decode-a-1"].startswith("done (")
    assert states[f"score-{label}"] == "partial: goes on from table line 1,234"
    assert "steps: 11, 4 done, 5 partial, 2 to do" in proc.stdout
    assert "tunings: 4, 1 done, 3 partial, 0 to do" in proc.stdout
    # what is left at the finished steps' pace: 3 tunings at tune-a-1's, 3 decodings at
    # decode-a-1's (the damaged one counts as left), one job
    tune_s, decode_s = (
        json.loads((work / name / "done.json").read_text())["seconds"]
        for name in ("tune-a-1", "decode-a-1")
    )
    left = 3 * tune_s + 3 * decode_s
    assert (
        f"tunings and decodings left: about {left:.0f} s with --jobs 1, at the mean of the "
        f"finished ones (tunings {tune_s:,.0f} s, decodings {decode_s:,.0f} s); a rough figure"
    ) in proc.stdout
    assert "; not counted: score-" in proc.stdout  # the scoring left: named, not timed
    two = run_table1(*argv, "--plan", "--jobs", "2")
    chain = tune_s + decode_s  # never less than one tuning and its decoding, one job's chain
    assert f"about {max(left / 2, chain):.0f} s with --jobs 2" in two.stdout, two.stdout
    four = run_table1(*argv, "--plan", "--jobs", "4")  # 3 chains left: the floor decides
    assert f"about {max(left / 4, chain):.0f} s with --jobs 4" in four.stdout, four.stdout
    # a third run of (a) alone (--runs-of): its steps follow the others', nothing else added
    third = run_table1(*argv, "--plan", "--runs-of", "a=3")
    assert third.returncode == 0, third.stderr
    listed = [line.split()[0] for line in third.stdout.split("\n\n")[0].splitlines()]
    assert listed == [*states, "tune-a-3", "decode-a-3"]
    bad = run_table1(*argv, "--plan", "--runs-of", "a")
    assert bad.returncode == 2 and "'a': expected KEY=K" in bad.stderr, bad.stderr
    # another model and (f): planned, and nothing recorded, nothing run
    more = table1_argv(TINY_SYSTEM, [tiny_model_dir, snapshots[0]], work, "--runs", "1")
    proc = run_table1(*more, "--runs-c", "0", "--runs-f", "1", "--plan")
    assert proc.returncode == 0, proc.stderr
    assert re.search(rf"^score-{re.escape(snapshots[0].name)} +to do$", proc.stdout, re.M)
    assert "tune-f-" in proc.stdout and "extend-" in proc.stdout
    assert {p: p.stat().st_mtime_ns for p in work.rglob("*")} == before
    # a folder of other settings is refused as a run would refuse it
    proc = run_table1(*argv, "--plan", "--top-k", "3")
    assert proc.returncode == 1
    assert "was made with other settings (top_k)" in proc.stderr
    # a work folder not made yet: every step to do, and the folder is not made
    fresh = tmp_path / "fresh"
    proc = run_table1(*table1_argv(TINY_SYSTEM, [tiny_model_dir], fresh, "--plan"))
    assert proc.returncode == 0, proc.stderr
    # prepare, filter, the (b) and (c) tables; each of 3 runs: (a), (b) with (d)'s pruning
    # after it, (c), each decoded: 4 + 3 x 8
    assert "steps: 28, 0 done, 0 partial, 28 to do" in proc.stdout
    assert "tunings: 9, 0 done, 0 partial, 9 to do" in proc.stdout
    assert not fresh.exists()
    # an output the damage check cannot read: the step shows as one to run again, as a run
    # would treat it, and --plan does not stop
    (work / "prepare" / "test.src").rename(work / "prepare" / "test.src.away")
    proc = run_table1(*argv, "--plan")
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"^decode-a-1 +partial: .*test.src: cannot open", proc.stdout, re.M)
    (work / "prepare" / "test.src.away").rename(work / "prepare" / "test.src")
    # a --train step killed after a save goes on from it
    (fresh / "train" / "model").mkdir(parents=True)
    (fresh / "train" / "model" / TRAIN_STATE_FILE).write_bytes(b"")
    proc = run_table1(*table1_argv(TINY_SYSTEM, [], fresh, "--train", "1m", "--plan"))
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"^train +partial: goes on from its saved state$", proc.stdout, re.M)


def test_start_weights_start_every_tuning_from_another_inis_weights(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    """--start-weights: base.ini, and so the first MERT iteration of (a) and of (b), holds the
    untuned ini's weights (train-model.perl's), not the tiny system's tuned ones; results.json
    says so, and a work folder made so refuses to go on without it."""
    start = tmp_path / "untuned.ini"
    start.write_text(
        "[weight]\nUnknownWordPenalty0= 1\nWordPenalty0= -1\nPhrasePenalty0= 0.2\n"
        "TranslationModel0= 0.2 0.2 0.2 0.2\nLexicalReordering0= 0.3 0.3 0.3 0.3 0.3 0.3\n"
        "Distortion0= 0.3\nLM0= 0.5\n",
        encoding="utf-8",
    )
    work = tmp_path / "work"
    argv = table1_argv(TINY_SYSTEM, [tiny_model_dir], work, "--runs", "1", "--runs-c", "0")
    proc = run_table1(*argv, "--start-weights", str(start))
    assert proc.returncode == 0, proc.stderr[-4000:]
    untuned = read_ini(str(start)).weights()
    assert read_ini(str(work / "prepare" / "base.ini")).weights() == untuned
    assert read_ini(str(TINY_SYSTEM / "moses.ini")).weights()["LM0"] != untuned["LM0"]
    first = sorted(work.glob("tune-*-1/**/run1.moses.ini"))
    assert len(first) == 2  # (a) and (b)
    for ini in first:
        weights = read_ini(str(ini)).weights()
        assert weights["LM0"] == (0.5,) and weights["Distortion0"] == (0.3,), ini
    results = json.loads((work / "results.json").read_text(encoding="utf-8"))
    assert f"weights of {start} (--start-weights)" in results["start"]
    proc = run_table1(*argv)
    assert proc.returncode == 1
    assert "was made with other settings (start_weights)" in proc.stderr


def test_interim_evaluates_the_runs_finished_so_far_and_touches_nothing_else(
    tmp_path: Path, tiny_table1_work: Path, tiny_model_dir: Path, snapshots: list[Path]
) -> None:
    """--interim on a run of K = 2 with one run of (a) and (b) finished: each system on its
    finished run, the figures results.json had for the same replicas, its own files only; a
    system without a finished run, or tested against one without, is left out and named."""
    work, label = relocated_copy(tiny_table1_work, tmp_path / "work"), tiny_model_dir.name
    finished = json.loads((work / "results.json").read_text())
    before = {p: p.stat().st_mtime_ns for p in work.rglob("*")}
    models = [tiny_model_dir, snapshots[0]]  # the second has no scored table yet
    argv = table1_argv(TINY_SYSTEM, models, work, "--runs", "2", "--runs-c", "0", "--interim")
    proc = run_table1(*argv)
    assert proc.returncode == 0, proc.stderr
    interim = json.loads((work / "interim.json").read_text())
    assert [s["system"] for s in interim["systems"]] == ["a", f"b-{label}"]
    assert interim["interim"]["planned_runs"] == {"a": 2, f"b-{label}": 2, "b-tiny@10": 2}
    assert interim["interim"]["finished_runs"] == {"a": 1, f"b-{label}": 1, "b-tiny@10": 0}
    assert (interim["interim"]["tunings_done"], interim["interim"]["tunings_planned"]) == (2, 6)
    for ours, theirs in zip(interim["systems"], finished["systems"], strict=True):
        for key in ("runs", "dev_mean", "test_mean", "table_lines", "new_weight_means"):
            assert ours[key] == theirs[key], key
    b = interim["systems"][1]["test_vs_baseline"]
    assert b["delta"] == finished["systems"][1]["test_vs_baseline"]["delta"]
    assert b["interval"] == finished["systems"][1]["test_vs_baseline"]["interval"]
    md = (work / "interim.md").read_text()
    head = re.match(r"\*\*Interim \((\d{4}-\d\d-\d\d \d\d:\d\d UTC)\): not this run's result", md)
    assert head and head[1] == interim["interim"]["utc"], md[:200]
    assert (
        "The replicas finished so far "
        f"(a 1 of 2, b-{label} 1 of 2, b-tiny@10 0 of 2; 2 of 6 tunings)."
    ) in md.split("\n")[0]
    assert "Not shown yet (no finished run of theirs" in md and ": b-tiny@10." in md
    assert f"| (b) +RNN {label} | 1 |" in md
    assert proc.stdout.strip() == md.strip()  # printed
    after = {p: p.stat().st_mtime_ns for p in work.rglob("*") if p.name not in INTERIM_FILES}
    assert after == before  # results.md/json, records, the lock: as they were

    # (b)'s decoding lost a line: its run is not finished, (b) is not shown, and the damage
    # is named (a driver already past that step would stop on it at the end)
    hyp = work / f"decode-b-{label}-1" / "test.hyp"
    whole = hyp.read_bytes()
    hyp.write_bytes(b"".join(whole.splitlines(keepends=True)[:-1]))
    proc = run_table1(*argv)
    assert proc.returncode == 0, proc.stderr
    interim = json.loads((work / "interim.json").read_text())
    assert [s["system"] for s in interim["systems"]] == ["a"]
    damage = f"{hyp}: 9 lines, expected 10 (one per test sentence): step decode-b-{label}-1"
    assert any(w.startswith(damage) for w in interim["warnings"]), interim["warnings"]
    assert f"**Warning:** {damage}" in (work / "interim.md").read_text()
    # (b) whole again, (a)'s output damaged: (b) has its finished run, but not the system it
    # is tested against, so it is not shown either; nothing to report, said in one line, and
    # the earlier interim files are gone rather than left to be read as current
    hyp.write_bytes(whole)
    (work / "decode-a-1" / "dev.hyp").write_text("")
    proc = run_table1(*argv)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == (
        f"table1: error: {work}: no system has a finished tuning and decoding yet"
    )
    assert not any((work / name).exists() for name in INTERIM_FILES)
    proc = run_table1(*argv, "--plan")
    assert proc.returncode == 2 and "--plan and --interim: give one" in proc.stderr
    proc = run_table1(*table1_argv(TINY_SYSTEM, [tiny_model_dir], tmp_path / "none", "--interim"))
    assert proc.returncode == 1
    assert (
        proc.stderr.strip()
        == f"table1: error: {tmp_path / 'none'}: no work folder yet (nothing has run)"
    )
    assert not (tmp_path / "none").exists()
