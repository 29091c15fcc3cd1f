"""scripts/baseline.py: a tuned Moses baseline from a raw bitext, with the real Moses tools.

The bitext (tests/data/tiny-bitext, see tests/data/README.md) is 400 training, 20 dev and 10
test paragraphs of the LibreOffice help corpus (scripts/help_corpus.py). Skipped when
../shared/tools/moses is absent.
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
from pathlib import Path

import pytest
from conftest import DATA_DIR, MOSES, ROOT

from rescorer.errors import RescorerError
from rescorer.experiments.baseline import BaselineConfig
from rescorer.experiments.processes import descendants
from rescorer.experiments.train_model import STEPS, Layout, first_to_run
from rescorer.moses.ini import read_ini

SCRIPT = ROOT / "scripts" / "baseline.py"
BITEXT = DATA_DIR / "tiny-bitext"

Built = tuple[Path, subprocess.CompletedProcess[str]]  # the work folder and the build's process
needs_moses = pytest.mark.skipif(
    not (MOSES / "bin" / "moses").exists() or not (MOSES / "mgiza" / "mgiza").exists(),
    reason=f"the real Moses toolkit with MGIZA++ is not at {MOSES} (../shared/tools/moses)",
)


def build(
    work: Path, *flags: str, corpus: Path = BITEXT, seed: str | None = "1"
) -> subprocess.CompletedProcess[str]:
    """scripts/baseline.py on ``corpus``; ``seed`` None: without --mert-seed (its default)."""
    return subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            str(corpus),
            "--work",
            str(work),
            "--moses",
            str(MOSES),
            "--max-iterations",
            "2",
            *(["--mert-seed", seed] if seed is not None else []),
            "--threads",
            "2",
            *flags,
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    """One system built from the tiny bitext (about 25 s), shared by the tests that read it."""
    work = tmp_path_factory.mktemp("baseline") / "work"
    return work, build(work)


@pytest.mark.slow
@needs_moses
def test_a_bitext_becomes_a_tuned_system_folder_and_a_rerun_skips_every_step(
    built: Built,
) -> None:
    work, proc = built
    assert proc.returncode == 0, proc.stderr
    system = work / "system"
    ini = read_ini(str(system / "moses.ini"))
    # the tuned ini names its files relatively, beside it, like ../shared/data/en-fr
    paths = [f.get("path") for f in ini.features if f.get("path")]
    assert sorted(paths) == sorted(
        ["phrase-table.gz", "reordering-table.wbe-msd-bidirectional-fe.gz", "lm.fr.binary"]
    )
    text = (system / "moses.ini").read_text(encoding="utf-8")
    assert "[search-algorithm]\n1" in text and "# BLEU" in text  # cube pruning, MERT's ini
    for name in ("dev", "test", "train"):
        assert (system / f"{name}.en").is_file() and (system / f"{name}.fr").is_file()
    # tokenised (Moses' escaping) and lowercased
    first = (system / "dev.en").read_text(encoding="utf-8").splitlines()[0]
    assert first.startswith("use this icon to insert the not superset")
    assert "placeholders . instead" in first and "&lt; ? &gt;" in first
    assert (system / "dev.fr").read_text(encoding="utf-8").startswith("cette icône permet d&apos; ")
    prepared = json.loads((work / "prepare" / "done.json").read_text())
    assert prepared["lines"]["train"] == 400 and prepared["lines"]["test"] == 10
    assert prepared["lines"]["train.clean"] <= 400
    # 400 lines are enough for lmplz's discount estimates
    assert json.loads((work / "lm" / "done.json").read_text())["discount_fallback"] is False
    tuned = json.loads((work / "tune" / "done.json").read_text())
    assert tuned["iterations"] == 2
    evaluated = json.loads(proc.stdout)
    assert 0 <= evaluated["test_multi_bleu"] <= 100
    hyp = Path(evaluated["hyp"]).read_text(encoding="utf-8").splitlines()
    assert len(hyp) == 10
    # the same command again: every step is done, nothing runs
    again = build(work)
    assert again.returncode == 0, again.stderr
    assert again.stderr.count("done before") == 6, again.stderr
    # decoding from another folder with the system folder's ini works (paths resolved there)
    decoded = subprocess.run(
        [str(MOSES / "bin" / "moses"), "-f", "moses.ini"],
        input="open the file .\n",
        capture_output=True,
        text=True,
        cwd=system,
    )
    assert decoded.returncode == 0 and decoded.stdout.strip(), decoded.stderr[-500:]


def tuned_weights(work: Path) -> list[str]:
    """The [weight] lines of the tuned system's moses.ini."""
    lines = (work / "system" / "moses.ini").read_text(encoding="utf-8").splitlines()
    start = lines.index("[weight]") + 1
    end = next((i for i in range(start, len(lines)) if lines[i].startswith("[")), len(lines))
    return [line for line in lines[start:end] if line.strip()]


@pytest.mark.slow
@needs_moses
def test_a_rebuild_with_the_default_seed_tunes_the_same_weights(
    built: Built, tmp_path: Path
) -> None:
    """Issue 35: the help baseline rebuilt by one command had other weights than the first
    build, because mert seeded from the clock. The default seed (1, as ``built`` gives it)
    makes a rebuild of the same bitext tune the same weights."""
    work, proc = built
    assert proc.returncode == 0, proc.stderr
    again = tmp_path / "again"
    rebuilt = build(again, seed=None)
    assert rebuilt.returncode == 0, rebuilt.stderr
    weights = tuned_weights(work)
    assert any(line.startswith("TranslationModel0= ") for line in weights), weights
    assert tuned_weights(again) == weights
    # the seed reaches mert itself (with --predictable-seeds, mert-moses.pl's own "-r 1000"
    # came after it and won: every --mert-seed tuned alike), and the record says it
    for folder in (work, again):
        mert = folder / "tune" / "mert-work"
        assert "Seeding random numbers with 1\n" in (mert / "run1.mert.log").read_text()
        assert json.loads((folder / "tune" / "done.json").read_text())["mert_seed"] == 1


@pytest.mark.slow
@needs_moses
def test_a_killed_step_runs_again_from_scratch(built: Built, tmp_path: Path) -> None:
    """A step folder without done.json is what a kill left: the step runs again."""
    assert built[1].returncode == 0, built[1].stderr
    work = tmp_path / "work"
    shutil.copytree(built[0], work)  # the shared system stays as it was built
    (work / "evaluate" / "done.json").unlink()
    (work / "evaluate" / "stale").write_text("left by a kill")
    again = build(work)
    assert again.returncode == 0, again.stderr
    assert "evaluate: running" in again.stderr and again.stderr.count("done before") == 5
    assert not (work / "evaluate" / "stale").exists()
    assert json.loads(again.stdout)["hyp"].startswith(str(work))  # the copy's, not the original's


def test_files_that_are_not_parallel_are_refused_before_any_step(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    shutil.copytree(BITEXT, corpus)
    with open(corpus / "dev.fr", "a", encoding="utf-8") as f:
        f.write("une de trop\n")
    proc = build(tmp_path / "work", corpus=corpus)
    if not (MOSES / "bin" / "moses").exists():
        assert proc.returncode == 1 and "Moses" in proc.stderr
        return
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1] == (
        f"baseline: error: {corpus}: dev.en has 20 lines, dev.fr has 21: expected parallel files"
    )
    assert not (tmp_path / "work" / "prepare").exists()


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    shutil.copytree(BITEXT, corpus)
    (corpus / "test.fr").unlink()
    proc = build(tmp_path / "work", corpus=corpus)
    assert proc.returncode == 1
    if (MOSES / "bin" / "moses").exists():
        assert f"{corpus / 'test.fr'}: missing" in proc.stderr


@pytest.mark.parametrize(
    ("script", "flags", "expected"),
    [
        ("baseline.py", ("--max-iterations", "0"), "'--max-iterations': 0 is not in the range "
         "1<=x<=100 (mert-moses.pl reads 0 as no limit)."),
        ("baseline.py", ("--threads", "0"), "'--threads': 0 is not in the range 1<=x<="),
        ("baseline.py", ("--dev-lines", "0"), "'--dev-lines': 0 is not in the range 1<=x<="),
        ("table1.py", ("--max-iterations", "0"), "'--max-iterations': 0 is not in the range 1<="),
        ("table1.py", ("--threads", "0"), "'--threads': 0 is not in the range 1<=x<="),
        ("table1.py", ("--jobs", "0"), "'--jobs': 0 is not in the range 1<=x<="),
        ("table1.py", ("--runs-f", "-1"), "'--runs-f': -1 is not in the range 0<=x<=100."),
        ("help_system.py", ("--max-iterations", "0"), "'--max-iterations': 0 is not in the range"),
        ("help_system.py", ("--threads", "0"), "'--threads': 0 is not in the range 1<=x<="),
    ],
)  # fmt: skip
def test_counts_no_run_could_use_are_refused_at_parse_time(
    tmp_path: Path, script: str, flags: tuple[str, str], expected: str
) -> None:
    """Issue 58.8 and 58.14: --max-iterations 0 ran MERT without a limit (mert-moses.pl reads 0
    as none), --threads 0 failed only at tuning, after the training; table1 --bitext built the
    whole baseline before refusing --jobs 0."""
    work = tmp_path / "work"
    where = {"baseline.py": [str(BITEXT)], "table1.py": ["--bitext", str(BITEXT), "--train", "1m"]}
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / script), *where.get(script, []),
         "--work", str(work), "--moses", str(MOSES), *flags],
        capture_output=True, text=True, cwd=ROOT,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert f"Invalid value for {expected}" in proc.stderr
    assert not work.exists()


def test_the_library_refuses_the_same_counts() -> None:
    """run_baseline's own check, for callers other than the scripts (table1's build_system)."""
    from rescorer.experiments.baseline import check_counts

    config = BaselineConfig(corpus=BITEXT, work=Path("unused"), moses=MOSES, max_iterations=0)
    with pytest.raises(RescorerError, match="--max-iterations 0: expected 1 or more"):
        check_counts(config)
    with pytest.raises(RescorerError, match="--threads 0: expected 1 or more"):
        check_counts(BaselineConfig(corpus=BITEXT, work=Path("u"), moses=MOSES, threads=0))


@pytest.mark.parametrize("kind", ["folder", "fifo"])
def test_a_corpus_file_that_is_a_folder_or_a_fifo_is_named_so(tmp_path: Path, kind: str) -> None:
    """Issue 58.14: both were called "missing". A FIFO is refused without being opened (the
    corpus is read more than once: a FIFO would hang or give its lines once)."""
    corpus = tmp_path / "corpus"
    shutil.copytree(BITEXT, corpus)
    (corpus / "dev.fr").unlink()
    if kind == "folder":
        (corpus / "dev.fr").mkdir()
    else:
        os.mkfifo(corpus / "dev.fr")
    proc = build(tmp_path / "work", corpus=corpus)
    assert proc.returncode == 1
    if (MOSES / "bin" / "moses").exists():
        what = "a folder, not a file" if kind == "folder" else "a FIFO (named pipe), not a file"
        assert proc.stderr.splitlines()[-1].startswith(
            f"baseline: error: {corpus / 'dev.fr'}: {what}"
        ), proc.stderr
        assert not (tmp_path / "work" / "prepare").exists()


@pytest.mark.slow
@needs_moses
def test_lmplz_runs_again_with_discount_fallback_on_a_tiny_corpus(tmp_path: Path) -> None:
    """100 lines are too few for lmplz's Kneser-Ney discounts: it aborts, and the step runs it
    again with --discount_fallback."""
    corpus = tmp_path / "corpus"
    shutil.copytree(BITEXT, corpus)
    for lang in ("en", "fr"):
        lines = (BITEXT / f"train.{lang}").read_text(encoding="utf-8").splitlines(True)
        (corpus / f"train.{lang}").write_text("".join(lines[:100]), encoding="utf-8")
    work = tmp_path / "work"
    proc = build(work, "--max-iterations", "1", corpus=corpus)
    assert proc.returncode == 0, proc.stderr
    assert json.loads((work / "lm" / "done.json").read_text())["discount_fallback"] is True
    log = (work / "lm" / "log").read_text(encoding="utf-8")
    assert "discount out of range" in log and "again with --discount_fallback" in log


@pytest.mark.slow
@needs_moses
def test_table1_starts_from_a_bitext(built: Built, tmp_path: Path, tiny_model_dir: Path) -> None:
    """table1 --bitext drives the baseline's steps in WORK/baseline; they are found done here
    (the module's system, copied: each step's own run is the first test's), so this costs the
    tunings of (a) and (b) only."""
    assert built[1].returncode == 0, built[1].stderr
    work = tmp_path / "work"
    shutil.copytree(built[0], work / "baseline")
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "table1.py"), "--bitext", str(BITEXT),
         "--model", str(tiny_model_dir), "--work", str(work), "--moses", str(MOSES),
         "--runs", "1", "--runs-c", "0", "--max-iterations", "1", "--trials", "100",
         "--threads", "2", "--score-args", "--compile no"],
        capture_output=True, text=True, cwd=ROOT,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("done before") >= 6, proc.stderr  # the baseline's six steps
    assert (work / "baseline" / "system" / "moses.ini").is_file()
    results = json.loads((work / "results.json").read_text())
    assert results["sentences"]["test"] == 10
    assert [s["system"] for s in results["systems"]][:2] == ["a", f"b-{tiny_model_dir.name}"]


def test_table1_wants_a_system_or_a_bitext_not_both(tmp_path: Path) -> None:
    table1 = [sys.executable, str(ROOT / "scripts" / "table1.py")]
    for extra in ([], [str(tmp_path), "--bitext", str(BITEXT)]):
        proc = subprocess.run(
            [*table1, *extra, "--work", str(tmp_path / "w"), "--model", str(tmp_path)],
            capture_output=True, text=True, cwd=ROOT,
        )  # fmt: skip
        assert proc.returncode == 2
        assert "give SYSTEM (a Moses system folder) or --bitext CORPUS" in proc.stderr


def test_table1_plan_from_a_bitext_says_the_baseline_comes_first(tmp_path: Path) -> None:
    """--plan with --bitext before the baseline is built: one line, nothing built or made."""
    work = tmp_path / "w"
    argv = [sys.executable, str(ROOT / "scripts" / "table1.py"), "--bitext", str(BITEXT)]
    proc = subprocess.run(
        [*argv, "--work", str(work), "--train", "1m", "--plan"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"baseline  to do: built first from {BITEXT} in {work}")
    assert not work.exists()
    # a system folder is written before the baseline's last step: not built yet either
    (work / "baseline" / "system").mkdir(parents=True)
    (work / "baseline" / "system" / "moses.ini").write_text("[weight]\n")
    proc = subprocess.run(
        [*argv, "--work", str(work), "--train", "1m", "--plan"], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("baseline  to do")
    # a work path that is a file is refused, as a run refuses it
    (tmp_path / "file").write_text("x")
    proc = subprocess.run(
        [*argv, "--work", str(tmp_path / "file"), "--train", "1m", "--plan"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 1
    assert f"table1: error: {tmp_path / 'file'}: not a folder" in proc.stderr


# ------------------------------------------------ train-model.perl, step by step (issue 59.5)
def test_the_first_step_to_run_is_the_first_unfinished_or_one_whose_outputs_are_gone(
    tmp_path: Path,
) -> None:
    layout = Layout(tmp_path, "en", "fr")

    def make(*steps: int) -> None:
        for n in steps:
            for path in layout.outputs(n):
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text("x")

    done = {str(n): 1.0 for n in range(1, 10)}
    assert first_to_run(layout, {}) == 1
    make(1)
    assert first_to_run(layout, {"1": 1.0}) == 2
    make(2)
    assert first_to_run(layout, {"1": 1.0, "2": 1.0}) == 3
    (layout.outputs(2)[1]).unlink()  # a recorded step whose output step 3 reads is gone
    assert first_to_run(layout, {"1": 1.0, "2": 1.0}) == 2
    shutil.rmtree(tmp_path / "corpus")
    assert first_to_run(layout, {"1": 1.0, "2": 1.0}) == 1
    make(3, 4, 5, 6, 7, 9)
    # all done, the corpus and alignments removed after the training: nothing runs
    assert first_to_run(layout, done) == 10
    assert first_to_run(layout, {k: v for k, v in done.items() if k < "6"}) == 6
    (layout.outputs(6)[0]).write_text("")  # empty: not complete
    assert first_to_run(layout, done) == 6
    assert (tmp_path / "model" / "phrase-table.gz") in layout.scratch(6)


def model_files(train: Path) -> dict[str, object]:
    """What train-model.perl made that is deterministic: the tables' text, the lexical
    tables' lines sorted (Perl writes them in its hash order), moses.ini without its folder."""
    model = train / "model"
    found: dict[str, object] = {}
    for name in ("phrase-table.gz", "reordering-table.wbe-msd-bidirectional-fe.gz"):
        found[name] = gzip.decompress((model / name).read_bytes())
    found["aligned"] = (model / "aligned.grow-diag-final-and").read_bytes()
    for name in ("lex.e2f", "lex.f2e"):
        found[name] = sorted((model / name).read_bytes().splitlines())
    found["moses.ini"] = (model / "moses.ini").read_text().replace(str(train.parent), "WORK")
    return found


@pytest.mark.slow
@needs_moses
def test_a_killed_training_goes_on_from_its_first_unfinished_step_to_the_same_model(
    built: Built, tmp_path: Path
) -> None:
    """Issue 59.5: the terminal showed 'train: running' alone for 41 minutes, and a re-run
    after a kill started train-model.perl again from step 1. A line per train-model.perl step
    with its time, MGIZA's progress in step 2; killed (SIGKILL, the driver and every process
    it started, as an OOM killer or a lost session would) in step 2, the re-run keeps step 1,
    removes what the killed step 2 left and runs it again with --first-step 2, and the model
    is that of the uninterrupted build."""
    assert built[1].returncode == 0, built[1].stderr
    first = built[1].stderr
    for n, name in enumerate(STEPS.values(), 1):
        assert f"baseline: train: {n}/9 {name}: done in " in first, first
    # a line at each new model MGIZA is seen at (every 2 s), the last one's always
    pattern = r"word alignment: MGIZA\+\+ iteration \d+ of 32 \(both directions; Model 4\)"
    assert re.search(pattern, first), first
    work = tmp_path / "work"
    argv = [sys.executable, str(SCRIPT), str(BITEXT), "--work", str(work), "--moses", str(MOSES),
            "--max-iterations", "1", "--threads", "2"]  # fmt: skip
    proc = subprocess.Popen(argv, cwd=ROOT, start_new_session=True, stderr=subprocess.DEVNULL)
    log = work / "train" / "log"
    deadline = time.monotonic() + 300
    while not (log.is_file() and "Hmm Iteration: 1 took" in log.read_text()):  # MGIZA well on
        assert proc.poll() is None and time.monotonic() < deadline, "step 2 never started"
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    record = json.loads((work / "train" / "steps.json").read_text())
    assert list(record["finished"]) == ["1"]
    again = build(work, "--max-iterations", "1")
    assert again.returncode == 0, again.stderr
    assert "baseline: train: steps 1-1 done before; going on from step 2" in again.stderr
    assert "baseline: train: 1/9" not in again.stderr
    said = log.read_text()
    assert said.count("--first-step 1 --last-step 1") == 1
    assert said.count("--first-step 2 --last-step 2") == 2
    assert "seems finished, reusing" not in said and "already in place, reusing" not in said
    train = json.loads((work / "train" / "done.json").read_text())
    assert train["resumed_from_step"] == 2
    assert list(train["train_model_steps"]) == [str(n) for n in range(1, 10)]
    assert model_files(work / "train") == model_files(built[0] / "train")


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, ended but not yet reaped, does not)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except OSError:
        return False


@pytest.mark.slow
@needs_moses
def test_sigterm_or_sigint_to_the_driver_ends_what_it_started_and_a_rerun_goes_on(
    tmp_path: Path,
) -> None:
    """Issue 58.11: SIGTERM killed baseline.py at once and left train-model.perl, MGIZA,
    mert-moses.pl and moses running; Ctrl-C said 'Aborted!' and exit 1. The signal goes to the
    driver alone (``kill PID``): in MGIZA's step 2 (SIGTERM) and in the tuning (SIGINT) every
    process the driver started ends, it says so in one line and exits 143 or 130."""
    work = tmp_path / "work"
    argv = [sys.executable, str(SCRIPT), str(BITEXT), "--work", str(work), "--moses", str(MOSES),
            "--max-iterations", "1", "--threads", "2"]  # fmt: skip
    for signum, status, ready in (
        (signal.SIGTERM, 143, (work / "train" / "log", "Hmm Iteration: 1 took")),
        (signal.SIGINT, 130, (work / "tune" / "log", "mert-moses.pl")),
    ):
        proc = subprocess.Popen(argv, cwd=ROOT, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 300
        while not (ready[0].is_file() and ready[1] in ready[0].read_text()):
            assert proc.poll() is None and time.monotonic() < deadline, "never got there"
            time.sleep(0.05)
        started = descendants(proc.pid)
        assert started
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == status, err
        assert err.splitlines()[-1] == (
            f"baseline: interrupted by {signal.Signals(signum).name}; the finished steps in "
            f"{work} are kept: run the same command again to go on"
        ), err
        assert not [pid for pid in started if alive(pid)], "a process outlived the driver"
    again = build(work, "--max-iterations", "1")
    assert again.returncode == 0, again.stderr
    assert "baseline: train: done before" in again.stderr
