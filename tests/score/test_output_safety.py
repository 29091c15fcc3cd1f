"""``rescorer score`` never destroys what it reads, holds its locks alone, writes only finite
scores and trusts no progress record it has not checked (issue 29 items 1-4, issue 27 item 6,
issue 28 item 5). Each test here failed on the code before these fixes."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import threading
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from conftest import SLICE

from rescorer.cli import cli
from rescorer.errors import RescorerError
from rescorer.io.table import read_table
from rescorer.job import output
from rescorer.model.checkpoint import save_model_dir
from rescorer.model.encdec import EncoderDecoder, ModelConfig, init_weights_
from rescorer.score.config import ScoreConfig
from rescorer.score.pipeline import score_table
from rescorer.vocab import build_vocabs

TEXT = gzip.decompress(SLICE.read_bytes())
SMALL = b"".join(TEXT.splitlines(keepends=True)[:40])
PAIRS = [(e.src, e.tgt) for e in read_table(str(SLICE))]


def make_model(folder: Path, scale: float = 0.2, seed: int = 0) -> Path:
    torch.manual_seed(seed)
    src_vocab, tgt_vocab = build_vocabs(PAIRS, 300, 300)
    model = EncoderDecoder(ModelConfig(300, 300, hidden_size=16, embed_size=8, maxout_units=8))
    init_weights_(model)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(scale * torch.randn_like(p))
    save_model_dir(folder, model, src_vocab, tgt_vocab, {"made_by": "test_output_safety.py"})
    return folder


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_model(tmp_path_factory.mktemp("model"))


def config(**opts: object) -> ScoreConfig:
    defaults: dict[str, object] = {
        "device": "cpu", "precision": "fp32", "chunk_bytes": 4096, "checkpoint_every": 0,
    }  # fmt: skip
    defaults.update(opts)
    return ScoreConfig(**defaults)  # type: ignore[arg-type]


# --- item 1: an input named or linked like a file the run writes or removes -----------------


@pytest.mark.parametrize(
    ("input_name", "out_name", "skip"),
    [
        ("pt.partial", "pt", None),  # the first case: "scored 0 pairs", input removed
        ("pt.partial.lock", "pt", None),
        ("pt.partial.json", "pt", None),
        ("pt.manifest.json", "pt", None),
        ("bad.txt.lock", "out.txt", "bad.txt"),
        (".pt.partial.json.x1.tmp", "pt", None),  # a "leftover" the lock would delete
    ],
)
def test_an_input_named_like_a_side_file_is_refused_and_kept(
    tmp_path: Path, model_dir: Path, input_name: str, out_name: str, skip: str | None
) -> None:
    table = tmp_path / input_name
    table.write_bytes(SMALL)
    bad = str(tmp_path / skip) if skip else None
    with pytest.raises(RescorerError, match="is the input table itself"):
        score_table(
            str(table), str(model_dir), str(tmp_path / out_name), config(skip_bad_lines=bad)
        )
    assert table.read_bytes() == SMALL
    assert sorted(p.name for p in tmp_path.iterdir()) == [input_name]


@pytest.mark.parametrize("side", [".partial", ".partial.lock", ".partial.json"])
def test_a_side_file_linked_to_the_input_is_refused(
    tmp_path: Path, model_dir: Path, side: str
) -> None:
    """``ln -s in1.txt o1.txt.partial; score in1.txt -o o1.txt`` left in1.txt at 0 bytes."""
    table = tmp_path / "in1.txt"
    table.write_bytes(SMALL)
    (tmp_path / f"o1.txt{side}").symlink_to(table)
    result = CliRunner().invoke(
        cli, ["score", str(table), "-m", str(model_dir), "-o", str(tmp_path / "o1.txt"),
              "--device", "cpu"],
    )  # fmt: skip
    assert result.exit_code == 1, result.output
    assert "is the input table itself" in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert table.read_bytes() == SMALL
    assert not (tmp_path / "o1.txt").exists()


def test_stdin_redirected_from_a_side_file_is_refused(tmp_path: Path, model_dir: Path) -> None:
    """``score - -o pt < pt.partial`` truncated its own standard input."""
    table = tmp_path / "pt.partial"
    table.write_bytes(SMALL)
    with open(table, "rb") as stdin:
        saved = os.dup(0)
        os.dup2(stdin.fileno(), 0)
        try:
            with pytest.raises(RescorerError, match=r"is the input table itself \(standard input"):
                score_table("-", str(model_dir), str(tmp_path / "pt"), config())
        finally:
            os.dup2(saved, 0)
            os.close(saved)
    assert table.read_bytes() == SMALL


# --- item 2: one writer at a time, whatever the interleaving --------------------------------


def test_a_lock_taken_on_a_removed_file_is_not_held_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run A holds OUT.partial.lock; run B opens it, then is delayed before its flock; A is
    interrupted (it removes the lock file and releases it); run C takes a new lock file; B's
    flock then succeeds on A's removed file. Before the fix B and C both held "the" lock and
    both wrote OUT.partial; now B goes round again and is refused, naming C."""
    import fcntl

    out = str(tmp_path / "out.txt")
    real_flock = fcntl.flock
    b_opened, b_go = threading.Event(), threading.Event()

    def flock(fd: int, op: int) -> None:
        if threading.current_thread().name == "B" and not b_go.is_set():
            b_opened.set()
            assert b_go.wait(10)
        real_flock(fd, op)

    monkeypatch.setattr(fcntl, "flock", flock)
    a, b, c = (output.Output(out, {}, None) for _ in range(3))
    a.lock()
    b_result: list[object] = []

    def run_b() -> None:
        try:
            b.lock()
            b_result.append("locked")
        except RescorerError as exc:
            b_result.append(exc)

    thread = threading.Thread(target=run_b, name="B")
    thread.start()
    assert b_opened.wait(10)
    a.close(ok=False, keep_partial=True)  # interrupted: keeps OUT.partial, drops the lock
    c.lock()
    b_go.set()
    thread.join(10)
    holders = [name for name, o in (("B", b), ("C", c)) if o.lock_fd >= 0]
    assert holders == ["C"], b_result
    assert isinstance(b_result[0], RescorerError)
    assert f"pid {os.getpid()}" in str(b_result[0])
    c.unlock()


def test_two_runs_sharing_a_skip_bad_lines_file_are_refused(
    tmp_path: Path, model_dir: Path
) -> None:
    """Issue 28 item 5: two runs, two outputs, one --skip-bad-lines FILE: both exited 0 and one
    run's bad lines were lost. The second run is now refused while the first holds FILE."""
    table = tmp_path / "pt.txt"
    table.write_bytes(SMALL + b"a bad line\n")
    bad = str(tmp_path / "bad.txt")
    first = output.Output(str(tmp_path / "one.txt"), {}, bad)
    first.lock()
    try:
        with pytest.raises(RescorerError, match=r"bad\.txt: another rescorer score \(pid \d+\)"):
            score_table(str(table), str(model_dir), str(tmp_path / "two.txt"),
                        config(skip_bad_lines=bad))  # fmt: skip
        assert not (tmp_path / "two.txt").exists()
    finally:
        first.unlock()
    score_table(str(table), str(model_dir), str(tmp_path / "two.txt"), config(skip_bad_lines=bad))
    assert Path(bad).read_bytes() == b"a bad line\n"
    assert not Path(bad + ".lock").exists()


def test_the_refusal_names_the_command_that_holds_the_lock(tmp_path: Path, model_dir: Path) -> None:
    """An ``extend`` run writing OUT refuses a ``score`` to the same OUT naming extend (it said
    "another rescorer score"); a lock file of an older rescorer, the pid alone, names ours."""
    table = tmp_path / "pt.txt"
    table.write_bytes(SMALL)
    out = tmp_path / "out.txt"
    holder = output.Output(str(out), {}, None, command="extend")
    holder.lock()
    try:
        assert Path(f"{out}.partial.lock").read_text() == f"{os.getpid()} extend\n"
        with pytest.raises(RescorerError, match=rf"another rescorer extend \(pid {os.getpid()}\)"):
            score_table(str(table), str(model_dir), str(out), config())
        os.ftruncate(holder.lock_fd, 0)
        os.pwrite(holder.lock_fd, f"{os.getpid()}\n".encode(), 0)
        with pytest.raises(RescorerError, match=rf"another rescorer score \(pid {os.getpid()}\)"):
            score_table(str(table), str(model_dir), str(out), config())
    finally:
        holder.unlock()
    assert not out.exists()


# --- item 3: no nan or inf is ever written --------------------------------------------------


def test_weights_that_overflow_stop_the_run_naming_model_and_line(tmp_path: Path) -> None:
    """Finite weights of 1e30 overflow fp32 inside the model: the run wrote a `nan` column and
    exited 0. It now stops at the first such line, naming the model, with nothing written."""
    folder = tmp_path / "huge"
    make_model(folder, scale=1e30, seed=1)
    table = tmp_path / "pt.txt"
    table.write_bytes(SMALL)
    out = tmp_path / "out.txt"
    message = rf"{folder}: the model scores .*pt\.txt:1 as (nan|-?inf) in fp32"
    with pytest.raises(RescorerError, match=message):
        score_table(str(table), str(folder), str(out), config())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["huge", "pt.txt"]


# --- item 4 and issue 27 item 6: the progress record ----------------------------------------


def interrupted(
    tmp_path: Path, model_dir: Path, monkeypatch: pytest.MonkeyPatch, **opts: object
) -> tuple[Path, Path]:
    """A run stopped as Ctrl-C would after its second progress record."""
    table, out = tmp_path / "pt.txt", tmp_path / "out.txt"
    table.write_bytes(TEXT[:40000])
    real = output.Output.checkpoint
    calls = [0]

    def checkpoint(self: output.Output, *args: object) -> None:
        real(self, *args)  # type: ignore[arg-type]
        calls[0] += 1
        if calls[0] == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(output.Output, "checkpoint", checkpoint)
    with pytest.raises(KeyboardInterrupt):
        score_table(str(table), str(model_dir), str(out), config(**opts))
    monkeypatch.setattr(output.Output, "checkpoint", real)
    return table, out


def edit_record(out: Path, change: object) -> None:
    record = Path(f"{out}.partial.json")
    state = json.loads(record.read_text())
    if callable(change):
        state = change(state)
    record.write_text(json.dumps(state))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda s: {**s, "offset": s["offset"] - 5}, r"resumes at byte \d+, inside line \d+"),
        (lambda s: {**s, "next_line": s["next_line"] + 1}, r"but byte \d+ starts line \d+"),
        (
            lambda s: {**s, "offset": str(s["offset"])},
            r"valid progress record: offset: expected integer, found a string",
        ),
        (lambda s: {k: v for k, v in s.items() if k != "out_bytes"}, "'out_bytes' is a required"),
        (lambda s: {**s, "stats": []}, "stats: expected object, found an array"),
        (lambda s: {**s, "out_bytes": -3}, "out_bytes: -3 is below the smallest allowed, 0"),
        (lambda s: [s], "record: the record: expected object, found an array"),
        (lambda s: {**s, "run": None}, "run: expected object, found null"),
        (lambda s: {**s, "tail_sha256": 7}, "tail_sha256: expected string, found an integer"),
        (lambda s: {**s, "offset": 10**30}, r"beyond the end of"),
    ],
    ids=["mid-line", "line", "str", "missing", "stats", "negative", "list", "run", "sha", "huge"],
)
def test_a_damaged_record_is_refused_and_the_partial_output_kept(
    tmp_path: Path, model_dir: Path, monkeypatch: pytest.MonkeyPatch, change: object, message: str
) -> None:
    """An offset inside a line dropped that line's first bytes; damaged fields gave tracebacks
    (KeyError, TypeError, ValueError)."""
    table, out = interrupted(tmp_path, model_dir, monkeypatch)
    partial = Path(f"{out}.partial").read_bytes()
    edit_record(out, change)
    with pytest.raises(RescorerError, match=message):
        score_table(str(table), str(model_dir), str(out), config(resume=True))
    assert Path(f"{out}.partial").read_bytes() == partial
    assert not out.exists()


def test_other_options_are_named_with_old_and_new_values(
    tmp_path: Path, model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    table, out = interrupted(tmp_path, model_dir, monkeypatch)
    with pytest.raises(RescorerError) as caught:
        score_table(str(table), str(model_dir), str(out),
                    config(resume=True, column="logp", chunk_bytes=8192))  # fmt: skip
    said = str(caught.value)
    assert "was written with other options" in said
    assert "--chunk-bytes was 4096, now 8192" in said
    assert "--column was 'prob', now 'logp'" in said


def test_resume_with_nothing_to_resume_says_so(
    tmp_path: Path, model_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    table, out = tmp_path / "pt.txt", tmp_path / "out.txt"
    table.write_bytes(SMALL)
    score_table(str(table), str(model_dir), str(out), config(resume=True))
    assert "--resume: no" in capsys.readouterr().err
    score_table(str(table), str(model_dir), str(out), config(resume=True))
    assert f"the complete {out} will be replaced" in capsys.readouterr().err


def test_resume_keeps_a_complete_shard_of_another_model_unless_forced(
    tmp_path: Path, model_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--resume`` with another model silently replaced a complete, manifested output."""
    table, out = tmp_path / "pt.txt", tmp_path / "out.txt"
    table.write_bytes(TEXT[:40000])
    score_table(str(table), str(model_dir), str(out), config(shard=(1, 2)))
    before = out.read_bytes()
    other = make_model(tmp_path / "other", seed=5)
    with pytest.raises(RescorerError, match=r"names another model .* add --force"):
        score_table(str(table), str(other), str(out), config(shard=(1, 2), resume=True))
    assert out.read_bytes() == before
    score_table(str(table), str(other), str(out), config(shard=(1, 2), resume=True, force=True))
    assert out.read_bytes() != before


def test_score_cli_force_option(tmp_path: Path, model_dir: Path) -> None:
    table = tmp_path / "pt.txt"
    table.write_bytes(SMALL)
    shutil.copy(table, tmp_path / "copy.txt")
    result = CliRunner().invoke(
        cli, ["score", str(table), "-m", str(model_dir), "-o", str(tmp_path / "o.txt"),
              "--device", "cpu", "--resume", "--force", "-q"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "nothing to resume" in result.output


# --- issue 27 item 6: say what is happening -------------------------------------------------


def test_an_empty_input_warns(tmp_path: Path, model_dir: Path) -> None:
    table = tmp_path / "empty.txt"
    table.write_bytes(b"")
    out = tmp_path / "o.txt"
    result = CliRunner().invoke(
        cli, ["score", str(table), "-m", str(model_dir), "-o", str(out), "--device", "cpu"]
    )
    assert result.exit_code == 0, result.output
    assert f"warning: {table}: empty input; {out} has no lines" in result.output
    assert out.read_bytes() == b""


def test_stdin_at_a_terminal_says_it_is_read(tmp_path: Path, model_dir: Path) -> None:
    import pty
    import subprocess
    import sys

    master, slave = pty.openpty()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "rescorer", "score", "-", "-m", str(model_dir),
         "-o", str(tmp_path / "o.txt"), "--device", "cpu", "-q"],
        stdin=slave, stderr=subprocess.PIPE, env=env,
    )  # fmt: skip
    os.close(slave)
    for _ in range(600):  # until it has started reading: one Ctrl-D then ends the input
        os.write(master, b"\x04")
        try:
            proc.wait(timeout=0.2)
            break
        except subprocess.TimeoutExpired:
            continue
    _, err = proc.communicate(timeout=10)
    os.close(master)
    assert proc.returncode == 0, err
    assert "reading the phrase table from standard input" in err.decode()


def test_stdin_at_a_terminal_ends_at_the_first_ctrl_d(tmp_path: Path, model_dir: Path) -> None:
    """One line typed, one Ctrl-D: the run ends. Before, the first Ctrl-D only ended a buffered
    read of 1 MiB, which then read again: a user had to press Ctrl-D twice or more."""
    import pty
    import subprocess
    import sys

    with gzip.open(SLICE, "rb") as f:
        line = f.readline()  # a real line, newline included
    master, slave = pty.openpty()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out = tmp_path / "o.txt"
    proc = subprocess.Popen(
        [sys.executable, "-m", "rescorer", "score", "-", "-m", str(model_dir),
         "-o", str(out), "--device", "cpu", "-q"],
        stdin=slave, stderr=subprocess.PIPE, env=env,
    )  # fmt: skip
    os.close(slave)
    # A terminal in canonical mode keeps both until they are read: the line, then one end of file.
    os.write(master, line + b"\x04")
    try:
        _, err = proc.communicate(timeout=120)  # a hang, not a speed limit
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        pytest.fail("score - at a terminal still reads after one Ctrl-D")
    finally:
        os.close(master)
    assert proc.returncode == 0, err
    written = out.read_bytes().splitlines(keepends=True)
    assert len(written) == 1 and written[0].startswith(line.split(b" ||| ")[0] + b" ||| ")
