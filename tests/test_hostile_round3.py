"""Hostile input, round three (issue 38): what a 1,009-case harness found. Each case ran to
exit 0 with a wrong result, said something untrue, or failed late; each must now end in a
correct result or one clear line (file, line, what was expected), exit 1 (2 for usage), and
nothing under the final name. Real commands in subprocesses (tests/faults.py), on the real
slice, the tiny real Moses system and a tiny trained model (conftest).

The Table 1 driver's cases (items 8-11) are in tests/experiments/test_table1_hostile.py, the
model folders' (item 13) in tests/test_hostile_models.py.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import (
    DATA_DIR,
    MOSES,
    SAMPLE_TABLE,
    SLICE,
    TINY_SYSTEM,
    TINY_TRAIN_FLAGS,
    default_sigint,
)
from faults import few_threads, run, run_unless_hung, small_disk
from test_hostile_walk import expect_refusal

NBEST = DATA_DIR / "nbest"
SEG = NBEST / "tiny.test6.nbest-seg"  # Moses' n-best list with -include-segmentation-in-n-best
INPUT = NBEST / "tiny.test6.en"  # the sentences it decoded
TABLE = TINY_SYSTEM / "phrase-table.gz"  # the table it was decoded with
pytestmark = pytest.mark.slow  # real processes
needs_moses = pytest.mark.skipif(
    not (MOSES / "bin" / "moses").exists(),
    reason=f"the real Moses toolkit is not at {MOSES} (../shared/tools/moses)",
)


def expect_usage_error(done: subprocess.CompletedProcess[str], *says: str, absent: Path) -> None:
    """Exit 2 (a usage error, click's), what it says, no traceback and no output."""
    where = f"stdout: {done.stdout[-2000:]}\nstderr: {done.stderr[-4000:]}"
    assert done.returncode == 2, where
    assert "Traceback" not in done.stderr, where
    for text in says:
        assert text in done.stderr, where
    assert not absent.exists(), where


def score_nbest_args(
    models: list[Path], out: Path, nbest: Path = SEG, src: Path = INPUT
) -> list[str]:
    return ["score-nbest", str(nbest), *(a for m in models for a in ("-m", str(m))),
            "--input", str(src), "--phrase-table", str(TABLE), "-o", str(out),
            "--device", "cpu", "--precision", "fp32"]  # fmt: skip


def overflowing(model: Path, folder: Path) -> Path:
    """``model`` with every weight times 1e30: finite weights whose scores overflow fp32."""
    from safetensors.torch import load_file, save_file

    huge = folder / "huge"
    shutil.copytree(model, huge)
    weights = huge / "model.safetensors"
    save_file({k: v * 1e30 for k, v in load_file(weights).items()}, weights)
    return huge


# ------------------------------------------------------------ 1. score-nbest and a nan score
@pytest.mark.parametrize("slot", [0, 1])
def test_score_nbest_refuses_a_model_whose_scores_overflow_in_any_slot(
    tiny_model_dir: Path, tmp_path: Path, slot: int
) -> None:
    """``-m FWD -m HUGE`` wrote ``RNN1= nan`` on every hypothesis, exit 0; ``score`` refuses
    the same model (tests/test_hostile_walk.py, score-overflowing-weights)."""
    huge = overflowing(tiny_model_dir, tmp_path)
    models = [tiny_model_dir, tiny_model_dir]
    models[slot] = huge
    out = tmp_path / "out.nbest"
    line = expect_refusal(run(score_nbest_args(models, out)), str(huge), absent=(out,))
    assert re.search(rf"{SEG}:[0-9]+ as nan", line) and "not a finite log probability" in line


# ------------------------------------------------------- 2. moses-ini and a repeated weight line
def system_with_two_tm_lines(tmp_path: Path) -> tuple[Path, int, int]:
    """The tiny system whose ini has a second ``TranslationModel0=`` line (other values)."""
    system = tmp_path / "system"
    shutil.copytree(TINY_SYSTEM, system)
    ini = system / "moses.ini"
    lines = ini.read_text(encoding="utf-8").splitlines(keepends=True)
    first = next(i for i, line in enumerate(lines) if line.startswith("TranslationModel0="))
    lines.insert(first + 1, "TranslationModel0= 0.5 0.5 0.5 0.5\n")
    ini.write_text("".join(lines), encoding="utf-8")
    return system, first + 1, first + 2  # their 1-based line numbers


@pytest.fixture(scope="module")
def scored(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny system's table scored by the tiny model: one column more."""
    out = tmp_path_factory.mktemp("scored") / "pt.rnn.gz"
    done = run(["score", str(TABLE), "-m", str(tiny_model_dir), "-o", str(out), "-q"])
    assert done.returncode == 0, done.stderr
    return out


def test_moses_ini_refuses_two_weight_lines_of_the_feature_naming_both(
    scored: Path, tmp_path: Path
) -> None:
    """It set num-features=5 and extended the first line only, exit 0, where Moses uses the
    last (next test)."""
    system, first, second = system_with_two_tm_lines(tmp_path)
    out = tmp_path / "new.ini"
    ini = system / "moses.ini"
    done = run(["moses-ini", str(ini), "--phrase-table", str(scored), "-o", str(out)])
    line = expect_refusal(done, f"{ini}:{first} and {ini}:{second}", absent=(out,))
    assert "'TranslationModel0=' weight lines" in line and "Moses uses the last" in line


@pytest.mark.slow
@needs_moses
def test_moses_uses_the_last_of_two_weight_lines(tmp_path: Path) -> None:
    """The rule the refusal states, from the real decoder: the last line's weights."""
    system, _, _ = system_with_two_tm_lines(tmp_path)
    done = subprocess.run(
        [str(MOSES / "bin" / "moses"), "-f", "moses.ini", "-show-weights"],
        cwd=system, capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    shown = [line for line in done.stdout.splitlines() if line.startswith("TranslationModel0=")]
    assert shown == ["TranslationModel0= 0.500000 0.500000 0.500000 0.500000"], done.stdout


# ------------------------------------------------------------- 3. moses-ini --new-weight nan
@pytest.mark.parametrize("weight", ["nan", "inf", "-inf", "NaN"])
def test_moses_ini_new_weight_that_is_not_finite_is_a_usage_error(
    scored: Path, tmp_path: Path, weight: str
) -> None:
    """``--new-weight nan`` wrote ``nan`` into the ini, exit 0."""
    out = tmp_path / "new.ini"
    args = ["moses-ini", str(TINY_SYSTEM / "moses.ini"), "--phrase-table", str(scored)]
    done = run([*args, "--new-weight", weight, "-o", str(out)])
    expect_usage_error(
        done, "--new-weight", "is not in the range -1000000.0<=x<=1000000.0", absent=out
    )


# ------------------------------------------------------ 4. score-nbest --name with an underscore
@pytest.mark.parametrize("name", ["RNN_0", "rnn_fwd", "0RNN", "RNN-0"])
def test_score_nbest_refuses_a_label_mert_would_take_for_a_sparse_feature(
    tiny_model_dir: Path, tmp_path: Path, name: str
) -> None:
    """``--name RNN_0`` was accepted, and mert read the feature as a sparse one (next test);
    moses-ini refuses such feature names already."""
    out = tmp_path / "out.nbest"
    done = run([*score_nbest_args([tiny_model_dir], out), "--name", name])
    expect_usage_error(done, "--name", "[A-Za-z][0-9A-Za-z]*", absent=out)


@pytest.mark.slow
@needs_moses
def test_mert_extractor_takes_a_label_with_an_underscore_for_a_sparse_feature(
    tmp_path: Path,
) -> None:
    """Why: the real extractor lists RNN0 among the dense features, RNN_0 as a sparse one."""
    nbest = tmp_path / "n.nbest"
    first = SEG.read_text(encoding="utf-8").splitlines()[0].split("|||")
    first[2] = f"{first[2].rstrip()} RNN_0= -1.5 RNN0= -2.5 "
    nbest.write_text("|||".join(first) + "\n", encoding="utf-8")
    ref = tmp_path / "ref"
    ref.write_text((TINY_SYSTEM / "test.fr").read_text(encoding="utf-8").splitlines()[0] + "\n")
    feats = tmp_path / "f.dat"
    subprocess.run(
        [str(MOSES / "bin" / "extractor"), "--reference", str(ref), "--nbest", str(nbest),
         "--ffile", str(feats), "--scfile", str(tmp_path / "s.dat")],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    header, row = feats.read_text(encoding="utf-8").splitlines()[:2]
    assert header.split()[-1] == "RNN0_0" and "RNN_0" not in header, header
    assert row.split()[-2:] == ["-2.5", "RNN_0=-1.5"], row


# ------------------------------------------------------ 5. filter --ini-out to an unwritable place
def filter_ini_args(out: Path, ini_out: Path, table: Path = TABLE) -> list[str]:
    system = TINY_SYSTEM
    return ["filter", str(table), "--input", str(system / "test.en"), "--moses-ini",
            str(system / "moses.ini"), "--ini-out", str(ini_out), "-o", str(out)]  # fmt: skip


@pytest.mark.parametrize("where", ["proc", "missing-folder", "read-only-mount"])
def test_filter_ini_out_that_cannot_be_written_is_refused_before_any_input_is_read(
    tmp_path: Path, where: str
) -> None:
    """It failed only after the whole pass and left the filtered table under -o. Now the
    error comes first: here the table's first line is malformed, and the refusal still names
    the ini (the table was never read); neither output exists."""
    bad = tmp_path / "bad.pt"
    bad.write_text("not a phrase-table line\n", encoding="utf-8")
    out = tmp_path / "filtered.gz"
    with unwritable(tmp_path, where) as ini_out:
        done = run(filter_ini_args(out, ini_out, bad))
        expect_refusal(done, str(ini_out), says="cannot write", absent=(out, ini_out))
        done = run(filter_ini_args(out, ini_out))  # a good table: the same, nothing written
        expect_refusal(done, str(ini_out), says="cannot write", absent=(out, ini_out))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.pt"]  # no temporary file


@contextlib.contextmanager
def unwritable(tmp_path: Path, where: str) -> Iterator[Path]:
    """A name where no file can be written: under /proc, in a missing folder, on a read-only
    tmpfs (mounted here; skipped where this process cannot mount one)."""
    if where == "proc":
        yield Path("/proc/x")
    elif where == "missing-folder":
        yield tmp_path / "no-such-folder" / "new.ini"
    else:
        folder = Path(tempfile.mkdtemp(prefix="ro-"))
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(folder)],
                              capture_output=True, check=False)  # fmt: skip
        if done.returncode != 0:
            folder.rmdir()
            pytest.skip("cannot mount a read-only tmpfs here (root on Linux only)")
        try:
            yield folder / "new.ini"
        finally:
            subprocess.run(["umount", "-l", str(folder)], check=False)
            folder.rmdir()


def test_filter_ini_out_on_a_full_disk_leaves_neither_output(tmp_path: Path) -> None:
    """The ini's disk is full (a real tmpfs: a file size limit would stop the table first)."""
    with small_disk(tmp_path, 4096) as disk:
        if not disk.tmpfs:
            pytest.skip("needs a tmpfs of its own (root on Linux)")
        (disk.folder / "filler").write_bytes(b"x" * 4096)  # the whole disk
        out, ini_out = tmp_path / "filtered.gz", disk.folder / "new.ini"
        done = run(filter_ini_args(out, ini_out))
        expect_refusal(done, str(ini_out), says="cannot write", absent=(out, ini_out))
        assert sorted(p.name for p in disk.folder.iterdir()) == ["filler"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["small-disk"]


# ------------------------------------------ 6. score --skip-bad-lines FILE on a full disk
def table_with_bad_lines(folder: Path) -> tuple[Path, bytes]:
    """The real slice with a 100-byte malformed line after every 10th line; its bad lines."""
    lines = gzip.decompress(SLICE.read_bytes()).splitlines(keepends=True)
    text, bad = b"", b""
    for i, line in enumerate(lines, start=1):
        text += line
        if i % 10 == 0:
            wrong = f"malformed line {i:05d} ".encode().ljust(99, b"x") + b"\n"
            text, bad = text + wrong, bad + wrong
    table = folder / "pt.txt"
    table.write_bytes(text)
    return table, bad


@pytest.mark.parametrize("records", ["none-yet", "every-chunk"])
def test_score_skip_bad_lines_on_a_full_disk_says_what_is_true_and_keeps_what_resumes(
    tiny_model_dir: Path, tmp_path: Path, records: str
) -> None:
    """FILE's disk fills (a real tmpfs; OUT elsewhere). Before, the run always said OUT.partial
    was kept for --resume: with no progress record yet there was none to resume from, and
    FILE was left holding a cut-off fragment. Now, without a record: nothing is kept and the
    line says to run the command again; with one: OUT.partial, its record and FILE are kept,
    and --resume ends with the uninterrupted run's bytes."""
    table, bad_lines = table_with_bad_lines(tmp_path)
    whole, whole_bad = tmp_path / "whole.txt", tmp_path / "whole.bad"
    fast = ["--device", "cpu", "--precision", "fp32", "--chunk-bytes", "16384", "-q"]
    base = ["score", str(table), "-m", str(tiny_model_dir), *fast]
    done = run([*base, "-o", str(whole), "--skip-bad-lines", str(whole_bad)])
    assert done.returncode == 0, done.stderr
    assert whole_bad.read_bytes() == bad_lines  # 20 kB: more than the disk below holds
    every = "3600" if records == "none-yet" else "0"
    with small_disk(tmp_path, 16 << 10) as disk:  # FILE's lock, then 12 kB of bad lines
        if not disk.tmpfs:
            pytest.skip("needs a tmpfs of its own (root on Linux): OUT must not fill up")
        out, bad = tmp_path / "out.txt", disk.folder / "bad.txt"
        args = [*base, "-o", str(out), "--skip-bad-lines", str(bad), "--checkpoint-every", every]
        line = expect_refusal(run(args, disk), str(bad), says="cannot write", absent=(out,))
        partial = [Path(f"{out}.partial"), Path(f"{out}.partial.json")]
        if records == "none-yet":
            assert "--resume" not in line and "run the same command again" in line, line
            assert not any(p.exists() for p in [*partial, bad]), line
        else:
            assert "run the same command with --resume" in line, line
            assert all(p.exists() for p in [*partial, bad]), line
            args.append("--resume")
        disk.grow(16 << 20)
        done = run(args, disk)
        assert done.returncode == 0, done.stderr
        assert out.read_bytes() == whole.read_bytes()
        assert bad.read_bytes() == bad_lines


# ------------------------------------------------------------ 7. train -q, interrupted
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_train_quiet_interrupted_says_where_the_state_is_in_one_line(
    tmp_path: Path, signum: int
) -> None:
    """``train -q`` printed nothing when interrupted (its exit status and state were right)."""
    out = tmp_path / "model"
    flags = list(TINY_TRAIN_FLAGS)  # with -q
    flags[flags.index("--max-updates") + 1] = "100000"  # far away
    args = ["train", str(SAMPLE_TABLE), "-o", str(out), *flags, "--log-every", "1"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "rescorer", *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"}, preexec_fn=default_sigint,
    )  # fmt: skip
    try:
        log = out / "train.log.jsonl"  # its first record: the first update is done
        for _ in range(1200):  # at most 2 minutes
            if log.exists() or proc.poll() is not None:
                break
            time.sleep(0.1)
        assert proc.poll() is None, proc.communicate()
        proc.send_signal(signum)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + signum, stderr
    assert stdout == "" and len(stderr.splitlines()) == 1, stderr
    assert f"the state is saved in {out}: continue with --resume" in stderr, stderr
    assert (out / "train-state.pt").is_file()


# ------------------------------------------------------------ 12. score-nbest's limits
def nbest_case(folder: Path, case: str) -> tuple[Path, Path, str]:
    """An n-best list (and its input) over score's limits: a 300-word target or source
    phrase, or a line of 1.2 MB (a feature of 300,000 values); what the refusal says."""
    nbest, src = folder / "in.nbest", folder / "in.en"
    src.write_text("please\n", encoding="utf-8")  # a source word of the table
    features, words, segments = "LM0= -1", " ".join(["le"] * 300), "0=0-299"
    says = "a target phrase of 300 words (0-299), expected at most 256"
    if case == "source":
        src.write_text(" ".join(["please"] * 300) + "\n", encoding="utf-8")
        words, segments = "le", "0-299=0"
        says = "a source phrase of 300 words (0-299), expected at most 256"
    elif case == "line":
        features, words, segments = "LM0=" + " -1" * 400_000, "le", "0=0"
        says = "a line of 1,2"
    nbest.write_text(f"0 ||| {words} ||| {features} ||| -1 ||| {segments}\n", encoding="utf-8")
    return nbest, src, says


@pytest.mark.parametrize("case", ["target", "source", "line"])
def test_score_nbest_applies_scores_limits(tiny_model_dir: Path, tmp_path: Path, case: str) -> None:
    """score-nbest had no limit: a 1M-word phrase was a MemoryError traceback, 20k words took
    35 s and 362 MB. score's limits now apply: 256 tokens a phrase, 1 MiB a line."""
    nbest, src, says = nbest_case(tmp_path, case)
    out = tmp_path / "out.nbest"
    done = run(score_nbest_args([tiny_model_dir], out, nbest=nbest, src=src))
    expect_refusal(done, f"{nbest}:1: ", says=says, absent=(out,))


# ------------------------------------------------- 14. merge and a part of empty gzip members
def test_merge_refuses_a_part_of_more_gzip_members_than_score_writes(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    """A part made of a real part and 20,000 empty gzip members, its manifest's size and
    sha256 forged to match: merge decompressed every member (13.7 MB took 4.5 minutes, each
    member copying the rest of its block) and wrote them all, exit 0. score writes one member
    per chunk: at most min(input lines, range / --chunk-bytes + 2) for a shard."""
    table = tmp_path / "pt.txt"
    table.write_bytes(b"".join(gzip.decompress(SLICE.read_bytes()).splitlines(True)[:300]))
    parts = [tmp_path / f"p{k}.gz" for k in (1, 2)]
    for k, part in enumerate(parts, start=1):
        done = run(["score", str(table), "-m", str(tiny_model_dir), "-o", str(part), "-q",
                    "--device", "cpu", "--chunk-bytes", "4096", "--shard", f"{k}/2"])  # fmt: skip
        assert done.returncode == 0, done.stderr
    merged = tmp_path / "merged.gz"
    done = run(["merge", str(merged), *map(str, parts)])  # the real parts merge
    assert done.returncode == 0, done.stderr
    merged.unlink()
    data = parts[1].read_bytes() + gzip.compress(b"", mtime=0) * 20_000
    parts[1].write_bytes(data)
    manifest = Path(f"{parts[1]}.manifest.json")
    record = json.loads(manifest.read_text())
    record["output"].update(bytes=len(data), sha256=hashlib.sha256(data).hexdigest())
    manifest.write_text(json.dumps(record))
    done = run(["merge", str(merged), *map(str, parts)])
    expect_refusal(done, str(parts[1]), says="gzip members", absent=(merged,))


# ----------------------------------------------- issue 58, item 10: an ini that is not a file
def ini_readers(ini: Path, out: Path) -> dict[str, list[str]]:
    """Every command that reads a moses.ini, reading ``ini``."""
    nbest = SEG
    return {
        "moses-ini": ["moses-ini", str(ini), "--phrase-table", str(TABLE), "-o", str(out)],
        "filter": ["filter", str(TABLE), "--weights", str(ini), "--no-lm", "--min-score",
                   "2:0", "-o", str(out)],
        "filter --moses-ini": ["filter", str(TABLE), "--input", str(INPUT), "--moses-ini",
                               str(ini), "--ini-out", str(out.with_suffix(".ini")), "-o", str(out)],
        "combine": ["combine", str(TABLE), "--weights", str(ini), "--no-lm", "-o", str(out)],
        "rerank": ["rerank", str(nbest), "--weights", str(ini), "-o", str(out)],
        "rerank --decoded-with": ["rerank", str(nbest), "--weights", str(TINY_SYSTEM / "moses.ini"),
                                  "--decoded-with", str(ini), "-o", str(out)],
    }  # fmt: skip


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "folder"])
def test_every_ini_reader_refuses_an_ini_that_is_not_a_regular_file(
    tmp_path: Path, kind: str
) -> None:
    """Each reader hung on a FIFO ini with no writer (open waits for one; a moses.ini is a
    small config read as a file, its relative paths taken from its folder): one line naming it
    now, at once (faults.run_unless_hung would catch a hang however slow the machine)."""
    ini = tmp_path / "moses.ini"
    if kind == "fifo":
        os.mkfifo(ini)
    elif kind == "dev-zero":
        ini.symlink_to("/dev/zero")
    else:
        ini.mkdir()
    out = tmp_path / "out.gz"
    for name, args in ini_readers(ini, out).items():
        done = run_unless_hung(args, preexec_fn=few_threads())  # bounded memory: /dev/zero
        line = expect_refusal(done, str(ini), absent=(out, out.with_suffix(".ini")))
        says = "is a folder" if kind == "folder" else "not a regular file (a FIFO, a device?)"
        assert says in line, (name, line)
