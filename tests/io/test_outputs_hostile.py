"""Hostile outputs, round four (issue 58 items 1, 2, 10 and 13): standard output that fills or
whose reader leaves, and ``-o`` naming a device node or a FIFO, for every command that writes.

Before: ``-o -`` onto a disk that filled, or into a pipe closed early, exited 0 with the output
cut short (a plain unbuffered stdout, PYTHONUNBUFFERED=1 as here, drops the rest of a short
write), or ended in a traceback (the last flush: filter, combine, check, score on a small
table); ``-o /dev/null`` renamed a regular file over the device (as root: the machine's
/dev/null); ``merge -o -`` wrote a file named ``-``. Real commands in subprocesses, on the tiny
real Moses system and a tiny trained model (conftest). No test writes anything in /dev but
/dev/null and /dev/full, whose bytes go nowhere; a device node of our own is made in tmp_path.
"""

from __future__ import annotations

import os
import re
import resource
import shutil
import stat
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import DATA_DIR, DEV13_NBEST, REAL_INI, TINY_SYSTEM

from rescorer.io.outputs import writes_in_place

TABLE = TINY_SYSTEM / "phrase-table.gz"  # 1,414 lines: every output below is over 64 KiB
TINY_INI = TINY_SYSTEM / "moses.ini"
NBEST = DATA_DIR / "nbest"
ERROR_LINE = re.compile(r"^rescorer( [a-z0-9-]+)*: error: ")
CPU = ["--device", "cpu", "--precision", "fp32"]
pytestmark = pytest.mark.slow  # real processes


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path) -> Path:
    """The model, a one-sentence --input, a scored table and its two shards."""
    folder = tmp_path_factory.mktemp("outputs")
    shutil.copytree(tiny_model_dir, folder / "model")
    (folder / "in.txt").write_text("the house\n")
    shards = {"scored.gz": [], "p1.gz": ["--shard", "1/2"], "p2.gz": ["--shard", "2/2"]}
    for name, shard in shards.items():
        out = str(folder / name)
        args = ["score", str(TABLE), "-m", str(folder / "model"), "-o", out, *CPU, "-q"]
        done = rescorer([*args, "--chunk-bytes", "16K", *shard])
        assert done.returncode == 0, done.stderr
    return folder


def command(name: str, w: Path, out: str) -> list[str]:
    """The arguments of command ``name`` writing ``out`` (stdout: ``-``)."""
    model = str(w / "model")
    return {
        "score": ["score", str(TABLE), "-m", model, "-o", out, *CPU, "-q"],
        "extend": ["extend", str(TABLE), "-m", model, "--input", str(w / "in.txt"), "-o", out,
                   "--device", "cpu", "-q"],
        "filter": ["filter", str(TABLE), "--min-score", "2:0.0", "-o", out, "-q"],
        "combine": ["combine", str(TABLE), "--weights", str(TINY_INI), "--no-lm", "-o", out, "-q"],
        "score-nbest": ["score-nbest", str(NBEST / "tiny.test6.nbest-seg"), "-m", model,
                        "--input", str(NBEST / "tiny.test6.en"), "--phrase-table", str(TABLE),
                        "-o", out, *CPU],
        "rerank": ["rerank", str(DEV13_NBEST), "--weights", str(REAL_INI), "-o", out],
        "moses-ini": ["moses-ini", str(TINY_INI), "--phrase-table", str(w / "scored.gz"),
                      "--run-dir", str(TINY_SYSTEM), "-o", out],
        "merge": ["merge", str(w / "p1.gz"), str(w / "p2.gz"), "-o", out, "-q"],
        "sample": ["sample", model, "the house", "-o", out, "--device", "cpu"],
        "check": ["check", str(TABLE)],  # stdout only
        "info": ["info", model],  # stdout only
    }[name]  # fmt: skip


WRITERS = ["score", "extend", "filter", "combine", "score-nbest", "rerank", "moses-ini", "merge",
           "sample"]  # fmt: skip
BIG = ["score", "extend", "filter", "combine"]  # more than a pipe holds (64 KiB) on stdout


def rescorer(
    args: list[str],
    stdout: int | None = subprocess.DEVNULL,
    unbuffered: bool = True,
    preexec: Callable[[], None] | None = None,
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    if unbuffered:
        env["PYTHONUNBUFFERED"] = "1"
    return subprocess.run(
        [sys.executable, "-m", "rescorer", *args], stdout=stdout, stderr=subprocess.PIPE,
        text=True, env=env, timeout=300, preexec_fn=preexec,
    )  # fmt: skip


def one_error(done: subprocess.CompletedProcess[str], says: str) -> None:
    """Exit 1, one error line that says ``says``, no traceback, no ignored exception."""
    where = f"rc {done.returncode}\nstderr: {done.stderr[-3000:]}"
    assert done.returncode == 1, where
    assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr, where
    errors = [line for line in done.stderr.splitlines() if ERROR_LINE.match(line)]
    assert len(errors) == 1 and says in errors[0], where


# --- item 1 and item 10: standard output ----------------------------------------------------


@pytest.mark.parametrize("name", [*WRITERS, "check", "info"])
def test_stdout_on_a_full_disk_is_one_error(work: Path, name: str) -> None:
    """/dev/full as stdout: every write fails. Before: tracebacks (filter, combine, check, the
    last flush of score), or exit 120 after the output was said written."""
    with open("/dev/full", "wb") as full:
        done = rescorer(command(name, work, "-"), stdout=full.fileno(), unbuffered=False)
    one_error(done, "<stdout>: cannot write: no space left on device")


@pytest.mark.parametrize("name", BIG)
def test_stdout_cut_short_by_a_disk_that_fills_is_one_error(work: Path, name: str) -> None:
    """The issue's case: stdout redirected to a file on a disk that fills after 16 KiB (here a
    file size limit, which fails a write as a full disk does), PYTHONUNBUFFERED=1. Before:
    exit 0 with 16 KiB written, the rest of a short write dropped without a word."""
    limit = 16 << 10

    def small_disk() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    out = work / f"{name}.stdout"
    with open(out, "wb") as f:
        done = rescorer(command(name, work, "-"), stdout=f.fileno(), preexec=small_disk)
    one_error(done, "<stdout>: cannot write: file too large (16,384 bytes of it written)")
    out.unlink()


@pytest.mark.parametrize("name", BIG)
def test_a_pipe_closed_early_is_not_exit_0(work: Path, name: str) -> None:
    """``| head -c 100``: the reader takes 100 bytes and leaves. Before (PYTHONUNBUFFERED=1):
    exit 0, the output said written whole. Now the rule of every command: exit 1 and one line,
    'the reader of the output closed it'."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "rescorer", *command(name, work, "-")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    assert proc.stdout is not None and proc.stderr is not None
    assert len(proc.stdout.read(100)) == 100
    proc.stdout.close()
    err = proc.stderr.read().decode()
    proc.wait(timeout=300)
    one_error(subprocess.CompletedProcess([], proc.returncode, "", err), "closed it")


# --- item 2: a device node or a FIFO as -o ---------------------------------------------------


def null_device(folder: Path) -> Path:
    """A character device of our own, a twin of /dev/null (1, 3), in ``folder``."""
    node = folder / "null"
    try:
        os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(1, 3))
        with open(node, "wb") as f:
            f.write(b"x")
    except OSError as exc:  # not root, or a folder mounted nodev
        pytest.skip(f"cannot make a device node here: {exc}")
    return node


@pytest.mark.parametrize("name", WRITERS)
def test_a_device_as_output_is_written_never_replaced(
    work: Path, tmp_path: Path, name: str
) -> None:
    """Before: every atomic writer renamed a regular file over the device (the partial file,
    lock and record of score and extend beside it)."""
    node = null_device(tmp_path)
    done = rescorer(command(name, work, str(node)))
    assert done.returncode == 0, done.stderr[-3000:]
    assert stat.S_ISCHR(node.lstat().st_mode), "the device was replaced"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["null"]  # nothing beside it


@pytest.mark.parametrize("name", WRITERS)
@pytest.mark.parametrize("dangling", [False, True], ids=["file", "dangling"])
def test_a_link_as_output_is_written_through(
    work: Path, tmp_path: Path, name: str, dangling: bool
) -> None:
    """``-o LINK`` writes the file the link names, as a shell's > does, and the link stays (it
    used to be replaced by a regular file beside it, the output on the link's disk, the file
    it named untouched); a dangling link's file is created. Nothing is left beside either."""
    here, there = tmp_path / "here", tmp_path / "there"
    here.mkdir()
    there.mkdir()
    target = there / ("out.gz" if name in BIG or name == "merge" else "out.txt")
    if not dangling:
        target.write_bytes(b"the old bytes\n")
    link = here / target.name
    link.symlink_to(target)
    done = rescorer(command(name, work, str(link)))
    assert done.returncode == 0, done.stderr[-3000:]
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.is_file() and target.stat().st_size > 0
    assert target.read_bytes() != b"the old bytes\n"
    assert sorted(p.name for p in here.iterdir()) == [link.name]
    assert sorted(p.name for p in there.iterdir()) == [target.name]


@pytest.mark.parametrize("name", WRITERS)
def test_dev_full_as_output_is_one_error_and_stays(work: Path, name: str) -> None:
    if not writes_in_place("/dev/full"):  # never let a regression replace the machine's device
        pytest.fail("this rescorer would rename a file over /dev/full")
    before = sorted(os.listdir("/dev"))
    done = rescorer(command(name, work, "/dev/full"))
    one_error(done, "/dev/full: cannot write: no space left on device")
    assert stat.S_ISCHR(os.lstat("/dev/full").st_mode)
    assert sorted(os.listdir("/dev")) == before  # no partial file, lock or temporary file


def test_score_to_dev_null_leaves_it_a_device(work: Path, tmp_path: Path) -> None:
    """The issue's done-when, as root: ``rescorer score t.gz -m M -o /dev/null`` (with its
    bad lines to /dev/null too) leaves /dev/null a character device and nothing beside it."""
    if not writes_in_place("/dev/null"):  # never let a regression replace the machine's device
        pytest.fail("this rescorer would rename a file over /dev/null")
    table = tmp_path / "pt.txt"
    table.write_bytes(subprocess.check_output(["zcat", TABLE]) + b"not a phrase-table line\n")
    before = sorted(os.listdir("/dev"))
    args = ["score", str(table), "-m", str(work / "model"), "-o", "/dev/null", *CPU]
    done = rescorer([*args, "--skip-bad-lines", "/dev/null"])
    assert done.returncode == 0, done.stderr[-3000:]
    assert "1,414 of 1,415 lines written to /dev/null" in done.stderr
    assert stat.S_ISCHR(os.lstat("/dev/null").st_mode)
    assert sorted(os.listdir("/dev")) == before
    resumed = rescorer([*args, "--resume"])
    one_error(resumed, "/dev/null: --resume needs a regular output file")
    # a file for the table, /dev/null for its bad lines (before: a traceback, EINVAL)
    out = tmp_path / "out.txt"
    args[args.index("/dev/null")] = str(out)
    done = rescorer([*args, "--skip-bad-lines", "/dev/null", "--checkpoint-every", "0"])
    assert done.returncode == 0, done.stderr[-3000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt", "pt.txt"]
    assert sorted(os.listdir("/dev")) == before


@pytest.mark.parametrize("name", ["score", "combine"])
def test_a_fifo_as_output_is_written_in_order(work: Path, tmp_path: Path, name: str) -> None:
    """``mkfifo p; rescorer CMD ... -o p & gzip < p``: the reader gets the bytes a file gets."""
    want = rescorer(command(name, work, "-"), stdout=subprocess.PIPE, unbuffered=False).stdout
    fifo = tmp_path / "p"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    done = rescorer(command(name, work, str(fifo)))
    reader.join(timeout=30)  # a run that never opens the FIFO leaves the reader waiting
    assert done.returncode == 0, done.stderr[-3000:]
    assert got == [want.encode("utf-8")]
    assert stat.S_ISFIFO(fifo.lstat().st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p"]


# --- item 13: merge -o - and its summary -----------------------------------------------------


def test_merge_to_stdout_writes_stdout(work: Path, tmp_path: Path) -> None:
    """Before: a file named ``-`` in the current folder."""
    done = subprocess.run(
        [sys.executable, "-m", "rescorer", *command("merge", work, "-")],
        cwd=tmp_path, capture_output=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    assert done.stdout == (work / "p1.gz").read_bytes() + (work / "p2.gz").read_bytes()
    assert list(tmp_path.iterdir()) == []


def test_merge_says_what_extend_parts_hold(work: Path, tmp_path: Path) -> None:
    """Before: 'N of M lines' for the parts of extend, whose lines out are the new pairs (and,
    fill-up, the table's lines), more than the lines in: '13,932 of 3,000 lines'."""
    args = ["extend", str(TABLE), "-m", str(work / "model"), "--input", str(work / "in.txt"),
            "--device", "cpu", "-q", "--chunk-bytes", "16K"]  # fmt: skip
    parts = [str(tmp_path / f"e{k}.gz") for k in (1, 2)]
    for k, part in enumerate(parts, 1):
        done = rescorer([*args, "-o", part, "--shard", f"{k}/2"])
        assert done.returncode == 0, done.stderr[-3000:]
    done = rescorer(["merge", *parts, "-o", str(tmp_path / "e.gz")])
    assert done.returncode == 0, done.stderr[-3000:]
    said = re.search(r"([\d,]+) lines written by extend from ([\d,]+) input lines", done.stderr)
    assert said is not None, done.stderr
    assert said.group(2) == "1,414" and int(said.group(1).replace(",", "")) > 1414


def test_a_new_name_in_dev_is_refused(work: Path) -> None:
    """rescorer creates no file in /dev (as root it could: a regular file among the devices)."""
    from rescorer.errors import RescorerError

    name = "/dev/rescorer-test-no-such-device"
    with pytest.raises(RescorerError):  # else the run below would make it: not run at all
        writes_in_place(name)
    before = sorted(os.listdir("/dev"))
    for which in ("filter", "score"):
        done = rescorer(command(which, work, name))
        one_error(done, f"{name}: cannot write to /dev: no such file, and none made")
    assert sorted(os.listdir("/dev")) == before
