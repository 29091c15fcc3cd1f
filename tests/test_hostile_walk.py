"""Every command against hostile inputs (issue 28): a full disk, a gzip file truncated at several
points, an endless line, unreadable files, forged shard manifests. Each must end in one line
``rescorer CMD: error: ...`` naming the file, exit 1 and nothing under the final name: never a
traceback, a hang (the guards: faults.run_unless_hung, which tells a hang from a slow run) or
exit 0 with lines lost.

Real commands in subprocesses, on the real slice and a tiny trained model (conftest). The disk
fills for real (tests/faults.py: a tmpfs, or a file size limit where none can be mounted).
"""

from __future__ import annotations

import ctypes
import gzip
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from conftest import SLICE, TINY_TRAIN_FLAGS
from faults import SmallDisk, run, run_unless_hung, small_disk

TEXT = gzip.decompress(SLICE.read_bytes())  # 2,090 lines, some 238 kB
CHUNK = "16384"  # a dozen chunks: truncation and full disks meet the run after its first one
ERROR_LINE = re.compile(r"rescorer( [a-z0-9-]+)*: error: ")  # rescorer CMD: every message
# --compile no: the endless-line table is over score's 4 MiB compile threshold, and what is
# tested is the refusal, not 33 s of compiling the kernels (on a 2-core Zen 3) before it
FAST = ["--device", "cpu", "--precision", "fp32", "--compile", "no", "--chunk-bytes", CHUNK, "-q"]


def expect_refusal(
    done: subprocess.CompletedProcess[str],
    *names: str,
    says: str = "",
    absent: tuple[Path, ...] = (),
) -> str:
    """One line ``rescorer CMD: error: ...`` naming each of ``names``, exit 1, no traceback, and
    none of ``absent`` (final names) on disk. The line, for further checks."""
    where = f"stdout: {done.stdout[-2000:]}\nstderr: {done.stderr[-4000:]}"
    assert done.returncode == 1, where
    assert "Traceback" not in done.stderr and "Aborted!" not in done.stderr, where
    errors = [line for line in done.stderr.splitlines() if ERROR_LINE.match(line)]
    assert len(errors) == 1, where
    for name in names:
        assert name in errors[0], where
    assert says in errors[0], where
    for path in absent:
        assert not path.exists(), f"{path} exists after a refusal\n{where}"
    return errors[0]


@pytest.fixture(scope="module")
def walk(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path) -> Path:
    """A folder with the slice (plain and gzip), the model and the single run's outputs."""
    folder = tmp_path_factory.mktemp("walk")
    (folder / "pt.txt").write_bytes(TEXT)
    shutil.copy(SLICE, folder / "pt.gz")
    shutil.copytree(tiny_model_dir, folder / "model")
    for name in ("whole.gz", "whole.txt"):
        done = run(["score", str(folder / "pt.gz"), "-m", str(folder / "model"), "-o",
                    str(folder / name), *FAST])  # fmt: skip
        assert done.returncode == 0, done.stderr
    return folder


# ------------------------------------------------------------------------------- full disk
@pytest.mark.parametrize(("name", "skip"), [("out.txt", False), ("out.gz", True)])
def test_score_on_a_full_disk_then_resume_gives_the_uninterrupted_bytes(
    walk: Path, tmp_path: Path, name: str, skip: bool
) -> None:
    room = (24 << 10) if name.endswith(".gz") else (96 << 10)  # the output: 70 or 250 kB
    with small_disk(tmp_path, room) as disk:
        out = disk.folder / name
        args = ["score", str(walk / "pt.gz"), "-m", str(walk / "model"), "-o", str(out), *FAST]
        args += ["--checkpoint-every", "0"]  # a record per chunk: the run stops after one
        if skip:
            args += ["--skip-bad-lines", str(disk.folder / "bad.txt")]
        line = expect_refusal(run(args, disk), str(out), says="--resume", absent=(out,))
        assert "cannot write" in line
        disk.grow(16 << 20)  # space is freed
        done = run([*args, "--resume"], disk)
        assert done.returncode == 0, done.stderr
        whole = walk / ("whole.gz" if name.endswith(".gz") else "whole.txt")
        assert out.read_bytes() == whole.read_bytes()


def test_filter_on_a_full_disk_names_its_output(walk: Path, tmp_path: Path) -> None:
    with small_disk(tmp_path, 16 << 10) as disk:  # the outputs: some 240 and 46 kB
        for name in ("f.txt", "f.gz"):
            out = disk.folder / name
            done = run(["filter", str(walk / "pt.gz"), "--min-score", "2:0", "-o", str(out)], disk)
            expect_refusal(done, str(out), says="cannot write", absent=(out,))


@pytest.mark.parametrize("room", [8 << 10, 64 << 10])
def test_train_on_a_full_disk_leaves_no_model_that_looks_complete(
    walk: Path, tmp_path: Path, room: int
) -> None:
    """Whatever the disk holds when it fills (config, vocabularies, weights, training state),
    the next command either loads a complete model (the weights of a validation, whole) or
    refuses the folder in one line."""
    with small_disk(tmp_path, room) as disk:
        model = disk.folder / "model"
        table = str(walk / "pt.gz")
        done = run(["train", table, "-o", str(model), *TINY_TRAIN_FLAGS], disk)
        expect_refusal(done, str(disk.folder), says="cannot write")
        disk.grow(16 << 20)
        after = run(["score", table, "-m", str(model), "-o", str(tmp_path / "s.gz"), *FAST])
        if after.returncode != 0:
            expect_refusal(after, str(model), absent=(tmp_path / "s.gz",))


# -------------------------------------------------------------------------- truncated gzip
def truncations() -> list[int]:
    """Cut points of the compressed slice: in the first chunk, and well after it."""
    size = len(SLICE.read_bytes())
    return [size // 20, size // 3, size * 2 // 3, size - 9]


def gzip_commands(walk: Path, table: str, out: Path) -> dict[str, list[str]]:
    model = str(walk / "model")
    return {
        "score": ["score", table, "-m", model, "-o", str(out), *FAST],
        "score-workers": ["score", table, "-m", model, "-o", str(out), *FAST, "--workers", "1"],
        "score-check-first": ["score", table, "-m", model, "-o", str(out), *FAST, "--check-first"],
        "check": ["check", table],
        "filter": ["filter", table, "--min-score", "2:0", "-o", str(out)],
        "train": ["train", table, "-o", str(out.parent / "model-out"), *TINY_TRAIN_FLAGS],
        "vocab": ["vocab", table, "-o", str(out.parent / "vocab-out")],
    }


def test_a_truncated_gzip_is_one_message_for_every_command(walk: Path, tmp_path: Path) -> None:
    """score at every cut point (it printed only "Aborted!" past the first chunk), from a file
    and from stdin; every other reader at one cut past the first chunk."""
    data = SLICE.read_bytes()
    out = tmp_path / "out.gz"
    model = str(walk / "model")
    for i, cut in enumerate(truncations()):
        cut_gz = tmp_path / f"cut{i}.gz"
        cut_gz.write_bytes(data[:cut])
        done = run(["score", str(cut_gz), "-m", model, "-o", str(out), *FAST])
        expect_refusal(done, str(cut_gz), says="corrupt or truncated gzip data", absent=(out,))
    cut_gz = tmp_path / "cut2.gz"
    for command, args in gzip_commands(walk, str(cut_gz), out).items():
        if command == "score":  # done above
            continue
        done = run(args)
        expect_refusal(done, str(cut_gz), says="corrupt or truncated gzip data", absent=(out,))
    with open(cut_gz, "rb") as stdin:
        done = run(["score", "-", "-m", model, "-o", str(out), *FAST], stdin=stdin)
    expect_refusal(done, "<stdin>", says="corrupt or truncated gzip data", absent=(out,))


# --------------------------------------------------------------------------- endless lines
def endless_inputs(folder: Path) -> Iterator[tuple[str, Path]]:
    zeros = folder / "zeros"
    with open(zeros, "wb") as f:
        f.truncate(64 << 20)  # a 64 MiB prefix of /dev/zero, sparse
    yield "zeros", zeros
    long = folder / "long-target.txt"
    lines = TEXT.split(b"\n")
    long.write_bytes(b"\n".join(lines[:100]) + b"\nthe ||| " + b"la " * ((10 << 20) // 3)
                     + b"||| 0.5 0.5 0.5 0.5\n" + b"\n".join(lines[100:]))  # fmt: skip
    yield "long", long


@pytest.mark.slow
def test_an_endless_line_is_refused_quickly_by_every_reader(walk: Path, tmp_path: Path) -> None:
    out = tmp_path / "out.gz"
    for kind, table in endless_inputs(tmp_path):
        line_no = "1" if kind == "zeros" else "101"
        for args in (
            ["score", str(table), "-m", str(walk / "model"), "-o", str(out), *FAST],
            ["check", str(table)],
            ["filter", str(table), "--min-score", "2:0", "-o", str(out)],
        ):
            done = run_unless_hung(args)
            if args[0] == "check" and kind == "long":  # check counts bad lines, it does not stop
                assert done.returncode == 1 and f"{table}:{line_no}" in done.stdout + done.stderr
                continue
            expect_refusal(done, f"{table}:{line_no}", absent=(out,))
    # with --skip-bad-lines the 10 MB line is skipped, every other line scored
    long = tmp_path / "long-target.txt"
    bad = tmp_path / "bad.txt"
    args = ["score", str(long), "-m", str(walk / "model"), "-o", str(out), *FAST]
    done = run_unless_hung([*args, "--skip-bad-lines", str(bad)])
    assert done.returncode == 0, done.stderr
    assert gzip.decompress(out.read_bytes()).count(b"\n") == TEXT.count(b"\n")
    assert bad.read_bytes().count(b"\n") == 1


def test_a_vocabulary_pointing_at_dev_zero_is_refused(walk: Path, tmp_path: Path) -> None:
    model = tmp_path / "model"
    shutil.copytree(walk / "model", model)
    (model / "vocab.src.json").unlink()
    (model / "vocab.src.json").symlink_to("/dev/zero")
    out = tmp_path / "out.gz"
    done = run_unless_hung(["score", str(walk / "pt.gz"), "-m", str(model), "-o", str(out), *FAST])
    expect_refusal(done, "vocab.src.json", says="64 MiB", absent=(out,))


# ---------------------------------------------------------------------------- unreadable files
def without_root_override() -> Callable[[], None] | None:
    """Root reads every file: its commands run without CAP_DAC_OVERRIDE and
    CAP_DAC_READ_SEARCH (dropped from the bounding set, so the exec'd interpreter lacks them)."""
    if os.geteuid() != 0:
        return None

    def drop() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        for cap in (1, 2):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH
            if libc.prctl(24, cap, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
                raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")

    return drop


def test_an_unreadable_input_is_one_line_for_every_command(walk: Path, tmp_path: Path) -> None:
    secret = tmp_path / "secret.gz"
    shutil.copy(SLICE, secret)
    part = tmp_path / "part.gz"
    shutil.copy(walk / "whole.gz", part)
    (tmp_path / "part.gz.manifest.json").write_text("{}")
    out = tmp_path / "out.gz"
    commands = [
        ["score", str(secret), "-m", str(walk / "model"), "-o", str(out), *FAST],
        ["check", str(secret)],
        ["filter", str(secret), "--min-score", "2:0", "-o", str(out)],
        ["train", str(secret), "-o", str(tmp_path / "m"), *TINY_TRAIN_FLAGS],
        ["vocab", str(secret), "-o", str(tmp_path / "v")],
        ["merge", str(out), str(part)],
    ]
    os.chmod(secret, 0)
    os.chmod(tmp_path / "part.gz.manifest.json", 0)
    try:
        for args in commands:
            done = run(args, preexec_fn=without_root_override(), timeout=120)
            name = str(secret) if args[0] != "merge" else "part.gz.manifest.json"
            expect_refusal(done, name, absent=(out,))
    finally:
        os.chmod(secret, stat.S_IRUSR | stat.S_IWUSR)
        os.chmod(tmp_path / "part.gz.manifest.json", stat.S_IRUSR | stat.S_IWUSR)


# --------------------------------------------------------------------------- forged manifests
@pytest.fixture(scope="module")
def parts(walk: Path) -> Path:
    folder = walk / "parts"
    folder.mkdir()
    for k in (1, 2, 3):
        done = run(["score", str(walk / "pt.gz"), "-m", str(walk / "model"), "-o",
                    str(folder / f"p{k}.gz"), *FAST, "--shard", f"{k}/3"])  # fmt: skip
        assert done.returncode == 0, done.stderr
    return folder


def forgeries() -> dict[str, Callable[[dict, Path], None]]:  # type: ignore[type-arg]
    """Ways to edit part 2's manifest (and bytes), each of which merge must refuse."""

    def drop(*keys: str) -> Callable[[dict, Path], None]:  # type: ignore[type-arg]
        def edit(m: dict, folder: Path) -> None:  # type: ignore[type-arg]
            target = m
            for key in keys[:-1]:
                target = target[key]
            del target[keys[-1]]

        return edit

    def set_(value: object, *keys: str) -> Callable[[dict, Path], None]:  # type: ignore[type-arg]
        def edit(m: dict, folder: Path) -> None:  # type: ignore[type-arg]
            target = m
            for key in keys[:-1]:
                target = target[key]
            target[keys[-1]] = value

        return edit

    def swapped(m: dict, folder: Path) -> None:  # type: ignore[type-arg]
        """Part 2's bytes replaced by part 3's, its manifest's size and hash forged to match."""
        data = (folder / "p3.gz").read_bytes()
        (folder / "p2.gz").write_bytes(data)
        import hashlib

        m["output"]["bytes"] = len(data)
        m["output"]["sha256"] = hashlib.sha256(data).hexdigest()

    return {
        "no lines.out": drop("lines", "out"),
        "no options": drop("options"),
        "options a list": set_([], "options"),
        "k = 2.7": set_(2.7, "shard", "k"),
        "n = 10^12": set_(10**12, "shard", "n"),
        "k a string": set_("2", "shard", "k"),
        "negative range": set_(-5, "range", "start"),
        "swapped bytes": swapped,
    }


@pytest.mark.parametrize("forgery", list(forgeries()))
def test_merge_refuses_a_forged_manifest(parts: Path, tmp_path: Path, forgery: str) -> None:
    folder = tmp_path / "parts"
    shutil.copytree(parts, folder)
    manifest = folder / "p2.gz.manifest.json"
    data = json.loads(manifest.read_text())
    forgeries()[forgery](data, folder)
    manifest.write_text(json.dumps(data))
    out = tmp_path / "merged.gz"
    done = run(["merge", str(out), *(str(folder / f"p{k}.gz") for k in (1, 2, 3))])
    expect_refusal(done, "p2.gz", absent=(out,))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["merged.txt", "merged.gz"])
def test_merge_output_compression_follows_its_name(
    walk: Path, parts: Path, tmp_path: Path, name: str
) -> None:
    """gzip parts into OUT.txt: refused (a plain output from plain parts, and the other way)."""
    out = tmp_path / name
    folder = parts
    if name.endswith(".gz"):  # plain parts into a .gz name
        folder = tmp_path / "plain"
        folder.mkdir()
        for k in (1, 2, 3):
            done = run(["score", str(walk / "pt.gz"), "-m", str(walk / "model"), "-o",
                        str(folder / f"p{k}.gz.txt"), *FAST, "--shard", f"{k}/3"])  # fmt: skip
            assert done.returncode == 0, done.stderr
        given = [str(folder / f"p{k}.gz.txt") for k in (1, 2, 3)]
    else:
        given = [str(folder / f"p{k}.gz") for k in (1, 2, 3)]
    done = run(["merge", str(out), *given])
    expect_refusal(done, str(out), says="compress", absent=(out,))


# ---------------------------------------------------------------------------- issue 29's cases
SMALL = b"".join(TEXT.splitlines(keepends=True)[:40])  # some 4 kB: one chunk
Json = dict[str, Any]
NBEST_LINE = "{id} ||| a b ||| LM0= -3 WordPenalty0= -2 ||| {total}\n"
INI = "[feature]\nKENLM name=LM0 factor=0 path=lm.arpa order=3\n[weight]\nLM0= 0.5\n"


@dataclass
class Hostile:
    """A command that must be refused: its one line names ``names`` and says ``says``; each
    of ``kept`` holds its bytes after the refusal; none of ``absent`` exists."""

    args: list[str]
    names: tuple[str, ...]
    says: str
    kept: tuple[Path, ...] = ()
    absent: tuple[Path, ...] = ()


def score_args(walk: Path, table: Path, out: Path, model: Path | None = None) -> list[str]:
    return ["score", str(table), "-m", str(model or walk / "model"), "-o", str(out), *FAST]


def own_partial(walk: Path, folder: Path) -> Hostile:
    """``cp small.txt pt.partial; score pt.partial -o pt`` removed its input, exit 0."""
    table = folder / "pt.partial"
    table.write_bytes(SMALL)
    out = folder / "pt"
    return Hostile(score_args(walk, table, out), (str(table),), "is the input table itself",
                   (table,), (out,))  # fmt: skip


def partial_linked_to_input(walk: Path, folder: Path) -> Hostile:
    """``ln -s in1.txt o1.txt.partial; score in1.txt -o o1.txt`` left in1.txt at 0 bytes."""
    table = folder / "in1.txt"
    table.write_bytes(SMALL)
    out = folder / "o1.txt"
    (folder / "o1.txt.partial").symlink_to(table)
    return Hostile(score_args(walk, table, out), (str(table),), "is the input table itself",
                   (table,), (out,))  # fmt: skip


def overflowing_weights(walk: Path, folder: Path) -> Hostile:
    """Finite weights (the walk's model times 1e30) overflow fp32: a `nan` column, exit 0."""
    from safetensors.torch import load_file, save_file

    model = folder / "huge"
    shutil.copytree(walk / "model", model)
    weights = model / "model.safetensors"
    save_file({k: v * 1e30 for k, v in load_file(weights).items()}, weights)
    table = folder / "pt.txt"
    table.write_bytes(SMALL)
    out = folder / "out.txt"
    return Hostile(score_args(walk, table, out, model), (str(model), f"{table}:1"),
                   "the model scores", (table,), (out,))  # fmt: skip


def interrupted_run(walk: Path, folder: Path) -> tuple[list[str], Path]:
    """A run stopped by a full disk (a file size limit: no timing) after its first chunk,
    OUT.partial and its progress record kept for --resume."""
    table = folder / "pt.txt"
    table.write_bytes(TEXT[:60000])
    out = folder / "out.txt"
    args = [*score_args(walk, table, out), "--checkpoint-every", "0"]  # a record per chunk
    disk = SmallDisk(folder, 24 << 10, tmpfs=False)
    expect_refusal(run(args, disk), str(out), says="--resume", absent=(out,))
    assert Path(f"{out}.partial.json").exists()
    return [*args, "--resume"], out


def edit_record(out: Path, change: Callable[[Json], Json]) -> None:
    record = Path(f"{out}.partial.json")
    record.write_text(json.dumps(change(json.loads(record.read_text()))))


def resume_inside_a_line(walk: Path, folder: Path) -> Hostile:
    """A record whose offset falls inside a line silently dropped that line's first bytes."""
    args, out = interrupted_run(walk, folder)
    edit_record(out, lambda s: {**s, "offset": s["offset"] - 5})
    return Hostile(args, (str(out),), "inside line", (Path(f"{out}.partial"),), (out,))


def resume_record_of_the_wrong_type(walk: Path, folder: Path) -> Hostile:
    """A hand-edited record (offset a string) gave a traceback."""
    args, out = interrupted_run(walk, folder)
    edit_record(out, lambda s: {**s, "offset": str(s["offset"])})
    return Hostile(args, (str(out),), "offset: expected integer, found a string",
                   (Path(f"{out}.partial"),), (out,))  # fmt: skip


def pairs_of_unequal_length(walk: Path, folder: Path) -> Hostile:
    """SRC with one more line than TGT trained on 2 pairs, exit 0."""
    src, tgt = folder / "src.txt", folder / "tgt.txt"
    src.write_text("a b\nc d\ne f\n")
    tgt.write_text("x y\nz w\n")
    model = folder / "model"
    args = ["train", "--pairs", str(src), str(tgt), "-o", str(model), *TINY_TRAIN_FLAGS]
    says = "more lines than the other --pairs file"
    return Hostile(args, (f"{src}:3",), says, (src, tgt), (model,))


def rerank_case(folder: Path, text: str, says: str) -> Hostile:
    nbest, out = folder / "in.nbest", folder / "out.txt"
    nbest.write_text(text)
    args = ["rerank", str(nbest), "-o", str(out), "--weight", "LM0=1", "--weight", "WordPenalty0=1"]
    return Hostile(args, (str(nbest),), says, (nbest,), (out,))


def rerank_far_sentence_id(walk: Path, folder: Path) -> Hostile:
    """A sentence id of 3*10^8 wrote 300 MB of blank lines."""
    text = NBEST_LINE.format(id=0, total=-5) + NBEST_LINE.format(id=3 * 10**8, total=-5)
    return rerank_case(folder, text, ":2: sentence id 300000000 after sentence 0")


def rerank_nan_total(walk: Path, folder: Path) -> Hostile:
    return rerank_case(folder, NBEST_LINE.format(id=0, total="nan"), ":1: total score 'nan'")


def hostile_model(
    walk: Path, folder: Path, file: str, edit: Callable[[Json], None], says: str
) -> Hostile:
    model = folder / "model"
    shutil.copytree(walk / "model", model)
    data = json.loads((model / file).read_text())
    edit(data)
    (model / file).write_text(json.dumps(data))
    table, out = folder / "pt.txt", folder / "out.txt"
    table.write_bytes(SMALL)
    return Hostile(score_args(walk, table, out, model), (str(model), file), says, (table,), (out,))


def model_hidden_size_huge(walk: Path, folder: Path) -> Hostile:
    """hidden_size 10**12: it tried to allocate the model it described."""
    huge = {"hidden_size": 10**12}
    return hostile_model(walk, folder, "config.json", lambda d: d["model"].update(huge),
                         "above the largest")  # fmt: skip


def vocabulary_of_ints(walk: Path, folder: Path) -> Hostile:
    return hostile_model(walk, folder, "vocab.src.json", lambda d: d.update(words=[1, 2]),
                         "expected string, found an integer")  # fmt: skip


def moses_ini_onto_itself(walk: Path, folder: Path) -> Hostile:
    """moses-ini -o INI replaced its own input."""
    ini, table = folder / "moses.ini", folder / "pt.txt"
    ini.write_text(INI)
    table.write_bytes(SMALL)
    args = ["moses-ini", str(ini), "--phrase-table", str(table), "-o", str(ini)]
    return Hostile(args, (str(ini),), "itself", (ini, table))


def filter_onto_its_input(walk: Path, folder: Path) -> Hostile:
    """filter -o FILE --input FILE replaced the sentences it filtered for."""
    table, sentences = folder / "pt.txt", folder / "dev.en"
    table.write_bytes(SMALL)
    sentences.write_text("the house\n")
    args = ["filter", str(table), "--input", str(sentences), "-o", str(sentences)]
    return Hostile(args, (str(sentences),), "itself", (table, sentences))


ISSUE_29_CASES: dict[str, Callable[[Path, Path], Hostile]] = {
    "score-own-partial": own_partial,
    "score-partial-linked-to-input": partial_linked_to_input,
    "score-overflowing-weights": overflowing_weights,
    "resume-inside-a-line": resume_inside_a_line,
    "resume-record-of-the-wrong-type": resume_record_of_the_wrong_type,
    "train-pairs-unequal": pairs_of_unequal_length,
    "rerank-far-sentence-id": rerank_far_sentence_id,
    "rerank-nan-total": rerank_nan_total,
    "model-hidden-size-huge": model_hidden_size_huge,
    "model-vocabulary-of-ints": vocabulary_of_ints,
    "moses-ini-onto-itself": moses_ini_onto_itself,
    "filter-onto-its-input": filter_onto_its_input,
}


@pytest.mark.parametrize("name", list(ISSUE_29_CASES))
def test_issue_29_cases(walk: Path, tmp_path: Path, name: str) -> None:
    """Each ran to exit 0 with an input destroyed, data lost or a nan written, or gave a
    traceback (issue 29): now one line, exit 1, every input whole and no output."""
    folder = tmp_path / name
    folder.mkdir()
    case = ISSUE_29_CASES[name](walk, folder)
    before = {path: path.read_bytes() for path in case.kept}
    done = run(case.args, timeout=60)
    expect_refusal(done, *case.names, says=case.says, absent=case.absent)
    assert {path: path.read_bytes() for path in case.kept} == before


def held_by(path: Path, pid: int) -> bool:
    """Whether process ``pid`` holds a flock on ``path`` (/proc/locks: read, never taken)."""
    try:
        inode = path.stat().st_ino
    except FileNotFoundError:
        return False
    for line in Path("/proc/locks").read_text().splitlines():
        fields = line.split()
        if (
            "FLOCK" in fields
            and str(pid) in fields
            and any(f.endswith(f":{inode}") for f in fields)
        ):
            return True
    return False


@pytest.mark.skipif(not Path("/proc/locks").exists(), reason="reads the kernel's lock table")
def test_issue_29_a_shared_skip_bad_lines_file(walk: Path, tmp_path: Path) -> None:
    """Two runs, two outputs, one --skip-bad-lines FILE (issue 28 item 5): both exited 0 and
    one run's bad lines were lost. The first run reads a pipe the test holds open, so it holds
    FILE's lock for as long as the test wants, whatever the machine's speed; the second is
    refused, and once the pipe closes the first finishes with its own bad line in FILE."""
    bad = tmp_path / "bad.txt"
    first_out, second_out = tmp_path / "one.txt", tmp_path / "two.txt"
    table = tmp_path / "pt.txt"
    table.write_bytes(b"the second run's bad line\n" + SMALL)
    args = ["--skip-bad-lines", str(bad)]
    first = subprocess.Popen(
        [sys.executable, "-m", "rescorer", *score_args(walk, Path("-"), first_out), *args],
        stdin=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    assert first.stdin is not None
    try:
        first.stdin.write(b"the first run's bad line\n" + TEXT[:40000])  # more than a chunk
        first.stdin.flush()
        for _ in range(600):  # the lock is taken once a chunk is read: at most a minute
            if held_by(Path(f"{bad}.lock"), first.pid) or first.poll() is not None:
                break
            time.sleep(0.1)
        assert held_by(Path(f"{bad}.lock"), first.pid), "the first run never took the lock"
        done = run([*score_args(walk, table, second_out), *args], timeout=60)
        expect_refusal(done, str(bad), says="another rescorer score", absent=(second_out,))
        _, err = first.communicate(timeout=120)  # closes the pipe: the first run ends
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    assert first.returncode == 0, err.decode()
    assert bad.read_bytes() == b"the first run's bad line\n"
    assert first_out.exists() and not Path(f"{bad}.lock").exists()


def test_the_walk_runs_this_interpreter() -> None:
    """The subprocesses import this checkout's rescorer (PYTHONPATH or an editable install)."""
    done = subprocess.run(
        [sys.executable, "-c", "import rescorer, sys; print(rescorer.__file__)"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert Path(done.stdout.strip()).resolve().is_relative_to(Path(__file__).parents[1].resolve())
