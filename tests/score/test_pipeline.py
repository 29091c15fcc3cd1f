"""``rescorer score``: the feature column Moses reads, nothing else changed, resumable, sharded."""

from __future__ import annotations

import gzip
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from conftest import SLICE, default_sigint

from rescorer.cli import cli
from rescorer.errors import InputError, RescorerError
from rescorer.io.table import read_table
from rescorer.model.checkpoint import save_model_dir
from rescorer.model.encdec import EncoderDecoder, ModelConfig, init_weights_
from rescorer.score.config import ScoreConfig
from rescorer.score.pipeline import score_table
from rescorer.score.scorer import score_pairs_straightforward
from rescorer.vocab import build_vocabs

# One OpenMP thread in the subprocesses: two threads stall badly when other jobs share the CPU.
ONE_THREAD = {**os.environ, "OMP_NUM_THREADS": "1"}
LINES = gzip.decompress(SLICE.read_bytes()).decode().splitlines()
PAIRS = [(e.src, e.tgt) for e in read_table(str(SLICE))]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random model over shortlists of the slice (some words stay out: UNK is used)."""
    torch.manual_seed(0)
    src_vocab, tgt_vocab = build_vocabs(PAIRS, 400, 400)
    model = EncoderDecoder(ModelConfig(400, 400, hidden_size=24, embed_size=8, maxout_units=12))
    init_weights_(model)
    with torch.no_grad():  # spread the scores out: N(0, 0.01) weights give near-uniform outputs
        for p in model.parameters():
            p.add_(0.2 * torch.randn_like(p))
    folder = tmp_path_factory.mktemp("model")
    save_model_dir(folder, model, src_vocab, tgt_vocab, {"made_by": "tests/test_pipeline.py"})
    return folder


def run_score(tmp: Path, model_dir: Path, out_name: str = "out.gz", **opts: object) -> Path:
    out = tmp / out_name
    defaults: dict[str, object] = {"device": "cpu", "precision": "fp32", "chunk_bytes": 16384}
    defaults.update(opts)
    score_table(str(SLICE), str(model_dir), str(out), ScoreConfig(**defaults))  # type: ignore[arg-type]
    return out


def read_lines(path: Path) -> list[str]:
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    return data.decode().splitlines()


def reference_logp(model_dir: Path) -> np.ndarray:
    from rescorer.model.checkpoint import load_model_dir

    loaded = load_model_dir(model_dir)
    return score_pairs_straightforward(loaded.model, loaded.src_vocab, loaded.tgt_vocab, PAIRS)


def test_every_field_kept_and_prob_column_appended(tmp_path: Path, model_dir: Path) -> None:
    prob = read_lines(run_score(tmp_path, model_dir))
    logp = read_lines(run_score(tmp_path, model_dir, "logp.gz", column="logp"))
    assert len(prob) == len(logp) == len(LINES)
    expected = reference_logp(model_dir)
    for i, (orig, p_line, l_line) in enumerate(zip(LINES, prob, logp, strict=True)):
        o = orig.split(" ||| ")
        p, q = p_line.split(" ||| "), l_line.split(" ||| ")
        assert p[:2] == o[:2] and p[3:] == o[3:] and q[3:] == o[3:]  # every other field as it was
        p_scores, q_scores = p[2].split(" "), q[2].split(" ")
        assert p_scores[:-1] == o[2].split(" ") and len(p_scores) == 5  # column count + 1
        value, raw = float(p_scores[-1]), float(q_scores[-1])
        assert 0.0 < value <= 1.0
        assert abs(math.log(value) - max(raw, -100.0)) < 1e-4  # ln(prob column) == logp column
        assert abs(raw - expected[i]) < 1e-5  # and it is the model's log p(y|x)


def test_word_penalty_column_counts_out_of_shortlist_words(tmp_path: Path, model_dir: Path) -> None:
    from rescorer.vocab import Vocab

    tgt_vocab = Vocab.load(str(model_dir / "vocab.tgt.json"))
    lines = read_lines(run_score(tmp_path, model_dir, word_penalty=True))
    unk_seen = 0
    for orig, line in zip(LINES, lines, strict=True):
        scores = line.split(" ||| ")[2].split(" ")
        assert len(scores) == 6  # column count + 2
        n = tgt_vocab.unk_count(orig.split(" ||| ")[1].split(" "))
        assert abs(math.log(float(scores[-1])) - n) < 1e-5  # exp(n)
        unk_seen += n > 0
    assert unk_seen > 100  # the fixture's shortlist leaves words out


def test_score_equals_minus_training_loss(model_dir: Path) -> None:
    from rescorer.batching import pad_batch
    from rescorer.model.checkpoint import load_model_dir

    loaded = load_model_dir(model_dir)
    pairs = PAIRS[:64]
    src_ids, src_lens = pad_batch([loaded.src_vocab.encode_eos(s.split()) for s, _ in pairs])
    tgt_ids, tgt_lens = pad_batch([loaded.tgt_vocab.encode_eos(t.split()) for _, t in pairs])
    with torch.no_grad():
        loss = -loaded.model(src_ids, src_lens, tgt_ids, tgt_lens).sum()  # the training loss
    scores = score_pairs_straightforward(loaded.model, loaded.src_vocab, loaded.tgt_vocab, pairs)
    assert abs(float(loss) + scores.sum()) < 1e-3


def test_fast_path_equals_straightforward_fp32_and_bf16(tmp_path: Path, model_dir: Path) -> None:
    expected = reference_logp(model_dir)
    for precision, tol in (("fp32", 1e-5), ("bf16", 1e-2)):
        out = run_score(tmp_path, model_dir, f"{precision}.gz", column="logp", precision=precision)
        got = np.array([float(line.split(" ||| ")[2].split(" ")[-1]) for line in read_lines(out)])
        # The logp column carries 8 significant digits: compare at that resolution.
        assert np.max(np.abs(got - expected) / np.maximum(1.0, np.abs(expected) * 1e-3)) < tol


def test_encoder_reuse_changes_no_score(model_dir: Path) -> None:
    from rescorer.model.checkpoint import load_model_dir
    from rescorer.score.pairs import encode_pairs
    from rescorer.score.scorer import Scorer

    loaded = load_model_dir(model_dir)
    scorer = Scorer(loaded.model, "fp32", batch_tokens=512)
    shared = encode_pairs(loaded.src_vocab, loaded.tgt_vocab, PAIRS)
    assert len(shared.src_off) - 1 < len(PAIRS) - 80  # the slice has sources with many targets
    # The same pairs with every source repeated per pair (no reuse possible).
    separate = encode_pairs(loaded.src_vocab, loaded.tgt_vocab, [(f"{s}", t) for s, t in PAIRS])
    separate.src_ids = np.concatenate(
        [shared.src_ids[shared.src_off[j] : shared.src_off[j + 1]] for j in shared.pair_src]
    )
    lengths = np.diff(shared.src_off)[shared.pair_src]
    separate.src_off = np.concatenate([[0], np.cumsum(lengths)])
    separate.pair_src = np.arange(len(PAIRS))
    np.testing.assert_allclose(scorer.score(shared), scorer.score(separate), atol=1e-5)


def test_batch_size_and_workers_keep_order_and_lines(tmp_path: Path, model_dir: Path) -> None:
    one = run_score(tmp_path, model_dir, "a.gz", column="logp", batch_tokens=64)
    two = run_score(tmp_path, model_dir, "b.gz", column="logp", batch_tokens=4096, workers=2)
    a, b = read_lines(one), read_lines(two)
    assert len(a) == len(b) == len(LINES)
    for x, y in zip(a, b, strict=True):
        assert (
            x.rsplit(" ", 1)[0] == y.rsplit(" ", 1)[0]
            or x.split(" ||| ")[:2] == y.split(" ||| ")[:2]
        )
        vx = float(x.split(" ||| ")[2].split(" ")[-1])
        vy = float(y.split(" ||| ")[2].split(" ")[-1])
        assert abs(vx - vy) < 1e-4 * max(1.0, abs(vx))


def test_workers_the_system_refuses_are_one_error_line(
    tmp_path: Path, model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 65, item 4: --workers 500 in a task limit ended in a BlockingIOError traceback
    (the command line now refuses such counts; a tighter limit still says what to do)."""
    from rescorer.job import pool

    def refused(*args: object, **kwargs: object) -> None:
        raise BlockingIOError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(pool._Worker, "start", refused)  # the spawn, at the first task
    with pytest.raises(RescorerError, match=r"could not start 2 worker processes \(Resource "):
        run_score(tmp_path, model_dir, "o.gz", workers=2)
    assert not (tmp_path / "o.gz").exists()


def test_workers_give_identical_bytes(tmp_path: Path, model_dir: Path) -> None:
    """Issue 57: the gzip bytes themselves are the same at 0, 1 and 2 workers (a member per
    chunk, each compressed by zlib with no timestamp in whichever process formats it), with
    many chunks (the parsed chunk travels as its bytes and offsets) and a skipped bad line."""
    text = gzip.decompress(SLICE.read_bytes()).splitlines(keepends=True)
    table = tmp_path / "bad.txt"
    table.write_bytes(b"".join([*text[:300], b"x ||| y ||| 1 2\n", *text[300:]]))
    runs = []
    for n in (0, 1, 2):
        out, bad = tmp_path / f"w{n}.gz", str(tmp_path / f"bad{n}.txt")
        config = ScoreConfig(device="cpu", precision="fp32", chunk_bytes=8192, workers=n,
                             skip_bad_lines=bad)  # fmt: skip
        score_table(str(table), str(model_dir), str(out), config)
        runs.append(out.read_bytes())
    assert runs[0] == runs[1] == runs[2] and len(gzip.decompress(runs[0]).splitlines()) == 2090
    assert (tmp_path / "bad2.txt").read_bytes() == b"x ||| y ||| 1 2\n"


def test_shards_concatenate_to_the_single_run(tmp_path: Path, model_dir: Path) -> None:
    whole = run_score(tmp_path, model_dir, "whole.txt")
    parts = [
        run_score(tmp_path, model_dir, f"part{k}.txt", shard=(k, 3)).read_bytes() for k in (1, 2, 3)
    ]
    assert all(parts) and b"".join(parts) == whole.read_bytes()


def test_a_shard_started_with_resume_scores_only_its_range(tmp_path: Path, model_dir: Path) -> None:
    """--shard K/N --resume with no progress record (a fresh start, as an sbatch line runs it;
    a task killed before its first checkpoint; a re-run after success) scores exactly the
    shard's lines (it used to start from line 1 of the whole table)."""
    plain = run_score(tmp_path, model_dir, "plain.txt", shard=(2, 3)).read_bytes()
    fresh = run_score(tmp_path, model_dir, "fresh.txt", shard=(2, 3), resume=True)
    assert fresh.read_bytes() == plain
    again = run_score(tmp_path, model_dir, "fresh.txt", shard=(2, 3), resume=True)  # after success
    assert again.read_bytes() == plain
    assert 0 < plain.count(b"\n") < len(LINES)


@pytest.mark.slow
def test_plain_stdin_to_stdout(model_dir: Path, tmp_path: Path) -> None:
    whole = run_score(tmp_path, model_dir, "whole.txt")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "rescorer",
            "score",
            "-",
            "-m",
            str(model_dir),
            "-o",
            "-",
            "--device",
            "cpu",
            "--precision",
            "fp32",
            "--chunk-bytes",
            "16384",
            "-q",
        ],
        input=gzip.decompress(SLICE.read_bytes()),
        capture_output=True,
        check=True,
        env=ONE_THREAD,
    )
    assert proc.stdout == whole.read_bytes()


def test_malformed_line_stops_with_file_and_line_and_no_output(
    tmp_path: Path, model_dir: Path
) -> None:
    bad = tmp_path / "bad.gz"
    lines = list(LINES)
    lines[1500] = " ||| ".join([*lines[1500].split(" ||| ")[:2], "0.5 zero 1 1"])
    bad.write_bytes(gzip.compress(("\n".join(lines) + "\n").encode()))
    out = tmp_path / "out.gz"
    cfg = ScoreConfig(device="cpu", chunk_bytes=16384)
    with pytest.raises(InputError) as err:
        score_table(str(bad), str(model_dir), str(out), cfg)
    assert str(err.value).startswith(f"{bad}:1501: score 2 is 'zero'")
    assert sorted(os.listdir(tmp_path)) == ["bad.gz"]  # no output, no partial, no record


def test_skip_bad_lines_accounts_for_every_line(tmp_path: Path, model_dir: Path) -> None:
    bad = tmp_path / "bad.txt"
    lines = list(LINES)
    lines[10] = "broken"
    lines[1000] = lines[1000].replace(" ", "\0", 1)  # issue 65, item 5: a NUL in a phrase
    lines[2000] = "a ||| b ||| 0.5"
    bad.write_text("\n".join(lines) + "\n")
    out, rejects = tmp_path / "out.txt", tmp_path / "rejects.txt"
    cfg = ScoreConfig(device="cpu", chunk_bytes=16384, skip_bad_lines=str(rejects))
    stats = score_table(str(bad), str(model_dir), str(out), cfg)
    assert (stats.lines_in, stats.lines_out, stats.bad) == (len(LINES), len(LINES) - 3, 3)
    assert rejects.read_text().splitlines() == ["broken", lines[1000], "a ||| b ||| 0.5"]
    assert f"{bad}:1001: found a NUL byte at character " in stats.bad_examples[1]
    assert len(read_lines(out)) == len(LINES) - 3


def test_cli_score_and_errors(tmp_path: Path, model_dir: Path) -> None:
    out = tmp_path / "cli.gz"
    runner = CliRunner()
    args = ["score", str(SLICE), "-m", str(model_dir), "-o", str(out), "--device", "cpu"]
    result = runner.invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert "scored 2,090 pairs" in result.output
    assert len(read_lines(out)) == 2090
    missing = runner.invoke(
        cli,
        ["score", str(tmp_path / "nope.gz"), "-m", str(model_dir), "-o", str(tmp_path / "x.gz")],
    )
    assert missing.exit_code == 1 and "nope.gz: cannot open" in missing.output
    usage = runner.invoke(cli, [*args, "--shard", "4/3"])
    assert usage.exit_code == 2


class LongRun:
    """A longer input so a run is still going when it is killed (the slice 6 times over, the
    source phrases made distinct per copy: tables are grouped by source), the command that
    scores it, and the output of one uninterrupted run of that command. The input and each
    command's uninterrupted output are made once per module: every test of it that compares
    with an uninterrupted run of the same flags compares with the same bytes (they used to be
    made again by each test, also by those that never read them)."""

    def __init__(self, folder: Path, model_dir: Path) -> None:
        self.folder, self.model_dir = folder, model_dir
        self.big = folder / "big.gz"
        self.lines = [f"{i:02d}{line}" for i in range(6) for line in LINES]
        self.big.write_bytes(gzip.compress(("\n".join(self.lines) + "\n").encode()))
        self.wholes: dict[tuple[str, ...], Path] = {}

    def command(self, flags: Sequence[str] = ()) -> list[str]:
        # Records by time, 50 a second (a run takes a second or so), each after several chunks.
        return [sys.executable, "-m", "rescorer", "score", str(self.big), "-m",
                str(self.model_dir), "--device", "cpu", "--precision", "fp32", "--chunk-bytes",
                "8192", "--checkpoint-every", "0.02", "-q", *flags]  # fmt: skip

    def whole(self, flags: Sequence[str] = ()) -> Path:
        """The output of one uninterrupted run with ``flags`` (made on first use)."""
        key = tuple(flags)
        if key not in self.wholes:
            whole = self.folder / f"whole-{len(self.wholes)}.gz"
            subprocess.run([*self.command(flags), "-o", str(whole)], check=True, env=ONE_THREAD)
            self.wholes[key] = whole
        return self.wholes[key]


@pytest.fixture(scope="module")
def long_run(tmp_path_factory: pytest.TempPathFactory, model_dir: Path) -> LongRun:
    return LongRun(tmp_path_factory.mktemp("long-run"), model_dir)


@pytest.mark.slow
def test_killed_run_resumes_to_identical_bytes(tmp_path: Path, long_run: LongRun) -> None:
    """SIGKILL a run part-way through, --resume it, and compare with an uninterrupted run."""
    lines, cmd, whole = long_run.lines, long_run.command(), long_run.whole()
    out = tmp_path / "resumed.gz"
    record = Path(str(out) + ".partial.json")
    proc = subprocess.Popen([*cmd, "-o", str(out)], env=ONE_THREAD)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if record.exists() and json.loads(record.read_text() or "{}").get("next_line", 0) > 3000:
            break
        time.sleep(0.01)
    assert proc.poll() is None, "the run ended before it could be killed"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not out.exists() and record.exists()
    done = json.loads(record.read_text())["next_line"]
    assert 1 < done < len(lines)
    subprocess.run([*cmd, "-o", str(out), "--resume"], check=True, env=ONE_THREAD)
    assert out.read_bytes() == whole.read_bytes()
    assert not record.exists() and not Path(str(out) + ".partial").exists()


def logp_column(path: Path) -> np.ndarray:
    return np.array([float(line.split(" ||| ")[2].split(" ")[-1]) for line in read_lines(path)])


def test_compiled_kernels_give_the_same_scores(tmp_path: Path, model_dir: Path) -> None:
    eager = logp_column(run_score(tmp_path, model_dir, "eager.gz", column="logp", compile="no"))
    fused = logp_column(run_score(tmp_path, model_dir, "fused.gz", column="logp", compile="yes"))
    np.testing.assert_allclose(fused, eager, rtol=1e-6, atol=1e-5)


def fifo_with(tmp_path: Path, data: bytes) -> tuple[Path, threading.Thread]:
    """A named pipe that a thread fills with ``data`` once (as <(zcat ...) would)."""
    fifo = tmp_path / "input.fifo"
    os.mkfifo(fifo)

    def feed() -> None:
        with open(fifo, "wb") as f:
            f.write(data)

    writer = threading.Thread(target=feed, daemon=True)
    writer.start()
    return fifo, writer


def score_cli(
    table: Path | str, model_dir: Path, out: Path, *args: str, stdin: bytes | None = None
) -> subprocess.CompletedProcess[bytes]:
    """``rescorer score`` in a process of its own, which may not take more than two minutes."""
    argv = [sys.executable, "-m", "rescorer", "score", str(table), "-m", str(model_dir)]
    argv += ["-o", str(out), "--device", "cpu", "--precision", "fp32", "-q", *args]
    return subprocess.run(argv, input=stdin, capture_output=True, timeout=120, check=False)


@pytest.mark.slow
@pytest.mark.parametrize("gzipped", [True, False])
def test_a_pipe_is_read_once(tmp_path: Path, model_dir: Path, gzipped: bool) -> None:
    """A FIFO / <(...) / /dev/stdin input used to be opened twice: gzip came out empty with
    exit 0, plain text failed with a false score-count error at line 1, and a FIFO whose
    writer had finished hung (issue 11, defect 2)."""
    expected = run_score(tmp_path, model_dir, "file.txt").read_bytes()
    data = SLICE.read_bytes() if gzipped else gzip.decompress(SLICE.read_bytes())
    fifo, writer = fifo_with(tmp_path, data)
    out = tmp_path / "pipe.txt"
    proc = score_cli(fifo, model_dir, out, "--chunk-bytes", "16384")
    writer.join(timeout=10)
    assert proc.returncode == 0, proc.stderr
    assert out.read_bytes() == expected


@pytest.mark.slow
def test_a_pipe_cannot_be_sharded_or_resumed(tmp_path: Path, model_dir: Path) -> None:
    fifo = tmp_path / "input.fifo"
    os.mkfifo(fifo)
    for flag in (["--shard", "1/2"], ["--resume"]):
        proc = score_cli(fifo, model_dir, tmp_path / "o.txt", *flag)
        assert proc.returncode == 1
        assert b"need a regular input file, not stdin or a pipe" in proc.stderr


@pytest.mark.slow
def test_stdin_gets_the_score_count_check(tmp_path: Path, model_dir: Path) -> None:
    """Every line must have the first line's score count, on stdin too (issue 11, defect 6)."""
    lines = gzip.decompress(SLICE.read_bytes()).split(b"\n")
    fields = lines[4].split(b" ||| ")
    fields[2] += b" 0.5"  # line 5: one score too many
    lines[4] = b" ||| ".join(fields)
    proc = score_cli("-", model_dir, tmp_path / "out.txt", stdin=b"\n".join(lines))
    assert proc.returncode == 1
    assert b"<stdin>:5:" in proc.stderr or b"-:5:" in proc.stderr, proc.stderr
    assert b"found 5 scores, expected 4" in proc.stderr, proc.stderr
    assert not (tmp_path / "out.txt").exists()


@pytest.mark.slow
def test_a_pipe_whose_first_chunk_is_all_bad_checks_the_count_as_a_file_does(
    tmp_path: Path, model_dir: Path
) -> None:
    """Issue 65, item 3: a pipe took the score count from its first chunk alone; one without a
    well-formed line gave none, and a later line of another count was written with the new
    column, exit 0, where the same file skips it. Now both skip it."""
    lines = gzip.decompress(SLICE.read_bytes()).split(b"\n")[:-1]
    table = [line.split(b" ||| ")[0] + b" ||| broken" for line in lines[:1000]]  # > a chunk
    fields = lines[1500].split(b" ||| ")
    fields[2] += b" 0.5"  # one score too many, in a later chunk
    table += [*lines[1000:1500], b" ||| ".join(fields), *lines[1501:]]
    path = tmp_path / "t.txt"
    path.write_bytes(b"\n".join(table) + b"\n")
    runs = {}
    for how, source, stdin in (("file", path, None), ("pipe", "-", path.read_bytes())):
        out, bad = tmp_path / f"{how}.txt", tmp_path / f"{how}.bad"
        args = ("--chunk-bytes", "16384", "--skip-bad-lines", str(bad))
        proc = score_cli(source, model_dir, out, *args, stdin=stdin)
        assert proc.returncode == 0, proc.stderr
        runs[how] = (out.read_bytes(), bad.read_bytes())
    assert runs["pipe"] == runs["file"]
    assert runs["pipe"][1].split(b"\n")[-2] == b" ||| ".join(fields)  # skipped, last
    assert runs["pipe"][0].count(b"\n") == len(lines) - 1001


@pytest.mark.slow
def test_a_second_run_on_the_same_output_is_refused(tmp_path: Path, model_dir: Path) -> None:
    """Two runs with the same -o used to share OUT.partial; the final file mixed both inputs
    and one run exited 0 (issue 11, defect 3). The second is now refused, naming the first."""
    out = tmp_path / "out.txt"
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time\n"
         "from rescorer.job.output import Output\n"
         f"Output({str(out)!r}, {{}}, None).lock()\n"
         "open(sys.argv[1] + '.partial', 'wb').write(b'the first run')\n"
         "print('locked', flush=True)\n"
         "time.sleep(60)\n",
         str(out)],
        stdout=subprocess.PIPE,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"locked\n"
        with pytest.raises(RescorerError, match=rf"another rescorer score \(pid {holder.pid}\)"):
            run_score(tmp_path, model_dir, "out.txt")
        assert (tmp_path / "out.txt.partial").read_bytes() == b"the first run"
        assert not out.exists()
    finally:
        holder.kill()
        holder.wait()
    run_score(tmp_path, model_dir, "out.txt")  # the lock died with its holder
    assert len(read_lines(out)) == len(LINES)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]


def test_an_error_before_the_first_line_leaves_nothing(tmp_path: Path, model_dir: Path) -> None:
    """A truncated gzip input used to leave an empty OUT.partial behind."""
    broken = tmp_path / "broken.gz"
    broken.write_bytes(SLICE.read_bytes()[:100])
    out = tmp_path / "out" / "o.gz"
    out.parent.mkdir()
    config = ScoreConfig(device="cpu", precision="fp32")
    with pytest.raises(InputError, match="truncated"):
        score_table(str(broken), str(model_dir), str(out), config)
    assert list(out.parent.iterdir()) == []


@pytest.mark.parametrize("flag", ["out", "skip_bad_lines"])
def test_the_input_cannot_be_an_output(tmp_path: Path, model_dir: Path, flag: str) -> None:
    """--skip-bad-lines naming the input truncated it before it was read (issue 11, defect 5);
    -o naming it is refused too. The same file is found by device and inode, not by name."""
    table = tmp_path / "pt.gz"
    table.write_bytes(SLICE.read_bytes())
    (tmp_path / "link.gz").hardlink_to(table)
    out = str(tmp_path / "link.gz") if flag == "out" else str(tmp_path / "out.gz")
    config = ScoreConfig(device="cpu", skip_bad_lines=str(tmp_path / "link.gz"))
    if flag == "out":
        config = ScoreConfig(device="cpu")
    with pytest.raises(RescorerError, match="is the input table itself"):
        score_table(str(table), str(model_dir), out, config)
    assert table.read_bytes() == SLICE.read_bytes()


def interrupt_after_checkpoints(
    monkeypatch: pytest.MonkeyPatch, table: Path, model_dir: Path, out: Path, n: int = 2
) -> None:
    """Run until ``n`` progress records were written, then stop as Ctrl-C would."""
    from rescorer.job import output

    real = output.Output.checkpoint
    calls = [0]

    def checkpoint(self: output.Output, *args: object) -> None:
        real(self, *args)  # type: ignore[arg-type]
        calls[0] += 1
        if calls[0] == n:
            raise KeyboardInterrupt

    monkeypatch.setattr(output.Output, "checkpoint", checkpoint)
    config = ScoreConfig(device="cpu", precision="fp32", chunk_bytes=8192, checkpoint_every=0)
    with pytest.raises(KeyboardInterrupt):
        score_table(str(table), str(model_dir), str(out), config)
    monkeypatch.setattr(output.Output, "checkpoint", real)
    assert Path(f"{out}.partial.json").exists()


def resume(table: Path, model_dir: Path, out: Path) -> None:
    config = ScoreConfig(device="cpu", precision="fp32", chunk_bytes=8192, resume=True)
    score_table(str(table), str(model_dir), str(out), config)


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        ("input", r"was written for other input content \(the table changed since\)"),
        ("model", r"was written for another model \(the model directory changed since\)"),
        ("short", r"shorter than the \d+ its record says: it was cut short after the record"),
        ("deleted", r"\.partial: missing, but .* says \d+ bytes were written"),
        ("tail", r"its last written bytes differ from its record"),
    ],
)
def test_resume_checks_what_its_record_says(
    tmp_path: Path, model_dir: Path, monkeypatch: pytest.MonkeyPatch, damage: str, message: str
) -> None:
    """--resume used to trust the record: a changed input or model mixed old and new scores,
    a short partial file was padded with NUL bytes, a deleted one crashed (issue 11, defect 4).
    Each is now refused; without damage the resumed output equals one uninterrupted run."""
    table = tmp_path / "pt.gz"
    table.write_bytes(SLICE.read_bytes())
    models = tmp_path / "models"
    shutil.copytree(model_dir, models / "m")
    out = tmp_path / "out.txt"
    interrupt_after_checkpoints(monkeypatch, table, models / "m", out)
    partial = Path(f"{out}.partial")
    if damage == "input":
        table.write_bytes(
            gzip.compress(gzip.decompress(SLICE.read_bytes()).replace(b" 1 1", b" 1 2", 1))
        )
    elif damage == "model":
        config = json.loads((models / "m" / "config.json").read_text())
        (models / "m" / "config.json").write_text(json.dumps(config, indent=1))
    elif damage == "short":
        partial.write_bytes(partial.read_bytes()[:-10])
    elif damage == "deleted":
        partial.unlink()
    elif damage == "tail":
        data = bytearray(partial.read_bytes())
        data[-5] ^= 1
        partial.write_bytes(bytes(data))
    with pytest.raises(RescorerError, match=message):
        resume(table, models / "m", out)
    assert not out.exists()


def test_a_record_from_before_capture_still_resumes(
    tmp_path: Path, model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--capture came after progress records: a run with its default leaves it out of the
    record's key, as records written before it do, so they resume (they were refused, options
    differing); a resume asking --capture on is refused (its scores may differ in the last
    bits on a GPU)."""
    table = tmp_path / "pt.gz"
    table.write_bytes(SLICE.read_bytes())
    out = tmp_path / "out.txt"
    interrupt_after_checkpoints(monkeypatch, table, model_dir, out)
    record = json.loads(Path(f"{out}.partial.json").read_text())
    assert "capture" not in record["run"]["config"] and "chunk_bytes" in record["run"]["config"]
    config = ScoreConfig(device="cpu", precision="fp32", chunk_bytes=8192, resume=True)
    with pytest.raises(RescorerError, match="capture"):
        score_table(str(table), str(model_dir), str(out), replace(config, capture="on"))
    score_table(str(table), str(model_dir), str(out), config)
    whole = tmp_path / "whole.txt"
    score_table(str(table), str(model_dir), str(whole), replace(config, resume=False))
    assert out.read_bytes() == whole.read_bytes()


def test_a_rerun_without_resume_refuses_to_discard_the_interrupted_run(
    tmp_path: Path, model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 39, item 3: after a kill, the same command again started over and lost 10,729
    scored pairs without a word; a later --resume then blamed a crash or power loss. Now the
    re-run is refused (OUT.partial and its record untouched), --resume continues it, and
    --restart starts over, removing the record first so that no --resume can trust it."""
    whole = run_score(tmp_path, model_dir, "whole.txt", chunk_bytes=8192)
    out = tmp_path / "out.txt"
    partial, record = Path(f"{out}.partial"), Path(f"{out}.partial.json")
    interrupt_after_checkpoints(monkeypatch, SLICE, model_dir, out)
    before = (partial.read_bytes(), record.read_bytes())
    again = ScoreConfig(device="cpu", precision="fp32", chunk_bytes=8192)
    with pytest.raises(
        RescorerError, match=r"holds [\d,]+ scored lines of an interrupted run"
    ) as err:
        score_table(str(SLICE), str(model_dir), str(out), again)
    assert "add --resume to continue it, or --restart to start over" in str(err.value)
    assert (partial.read_bytes(), record.read_bytes()) == before and not out.exists()
    # the command line: exit 1, one line
    args = ["score", str(SLICE), "-m", str(model_dir), "-o", str(out), "--chunk-bytes", "8192"]
    result = CliRunner().invoke(cli, [*args, "-q"])
    assert result.exit_code == 1 and "--restart" in result.stderr, result.output
    assert (partial.read_bytes(), record.read_bytes()) == before
    result = CliRunner().invoke(cli, [*args, "-q", "--resume", "--restart"])
    assert result.exit_code == 2 and "give one" in result.stderr, result.output
    resume(SLICE, model_dir, out)
    assert out.read_bytes() == whole.read_bytes()
    # --restart (or --force) starts over
    for flag in ("restart", "force"):
        out.unlink()
        interrupt_after_checkpoints(monkeypatch, SLICE, model_dir, out)
        interrupted = partial.read_bytes()
        assert len(interrupted) < len(whole.read_bytes())
        score_table(str(SLICE), str(model_dir), str(out), ScoreConfig(
            device="cpu", precision="fp32", chunk_bytes=8192, **{flag: True}))  # fmt: skip
        assert out.read_bytes() == whole.read_bytes() and not record.exists()


def test_an_undamaged_interrupted_run_resumes_exactly(
    tmp_path: Path, model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    whole = run_score(tmp_path, model_dir, "whole.txt", chunk_bytes=8192)
    out = tmp_path / "out.txt"
    interrupt_after_checkpoints(monkeypatch, SLICE, model_dir, out)
    resume(SLICE, model_dir, out)
    assert out.read_bytes() == whole.read_bytes()


@pytest.mark.slow
@pytest.mark.parametrize(
    "flags",
    [[], ["--shard", "2/3"], ["--word-penalty", "--workers", "2"]],
    ids=["plain", "shard", "word-penalty+workers"],
)
def test_eight_kills_then_resumes_end_byte_identical(
    tmp_path: Path, long_run: LongRun, flags: list[str]
) -> None:
    """Fault injection: SIGKILL one run at 8 seeded points (after a seeded number of lines
    plus a seeded delay, so mid-chunk too), resume it each time, and compare the final output
    with one uninterrupted run (issue 11). The records come by time (--checkpoint-every 0.02,
    issue 25), each after several chunks: a kill loses the chunks since the last one. (It was
    20 points: each costs a process start and `import torch`; 8 spread over the run already
    kill before the first record, between records and mid-chunk, and resume each of those.)"""
    lines, cmd, whole = long_run.lines, long_run.command(flags), long_run.whole(flags)
    out = tmp_path / "out.gz"
    record = Path(f"{out}.partial.json")
    points = 8
    rng = np.random.default_rng(20)
    targets = np.sort(rng.integers(1, len(lines), size=points))
    kills = 0
    for target, delay in zip(targets, rng.uniform(0, 0.05, size=points), strict=True):
        if out.exists():
            break  # the run finished between two kill points
        proc = subprocess.Popen([*cmd, "-o", str(out), "--resume"], env=ONE_THREAD)
        deadline = time.monotonic() + 120
        while proc.poll() is None and time.monotonic() < deadline:
            state = json.loads(record.read_text() or "{}") if record.exists() else {}
            if state.get("next_line", 0) >= target:
                time.sleep(delay)
                break
            time.sleep(0.005)
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            kills += 1
        proc.wait()
    if not out.exists():
        subprocess.run([*cmd, "-o", str(out), "--resume"], check=True, env=ONE_THREAD)
    assert kills >= points // 2 + 1  # most kill points landed in a live run
    assert out.read_bytes() == whole.read_bytes()
    left = sorted(p.name for p in tmp_path.iterdir())  # no partial file, no record
    if "--shard" not in flags:
        assert left == ["out.gz"]
        return
    assert left == ["out.gz", "out.gz.manifest.json"]
    # The killed and resumed shard's manifest vouches for the same input range and output.
    resumed, single = (json.loads(Path(f"{p}.manifest.json").read_text()) for p in (out, whole))
    for key in ("range", "lines", "input", "model", "options"):
        assert resumed[key] == single[key], key
    assert resumed["output"]["sha256"] == single["output"]["sha256"]


def test_fsyncs_are_bounded_by_the_duration_not_the_chunks(
    tmp_path: Path, model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 25, item 2: a run of many chunks records its progress (two or three fsyncs each)
    at most every --checkpoint-every seconds and once at the end, not per chunk."""
    from rescorer.job import output

    fsyncs, records, advances = [0], [0], [0]
    real_fsync, real_advance = os.fsync, output.Output.advance

    def counting_fsync(fd: int) -> None:
        fsyncs[0] += 1
        real_fsync(fd)

    def counting_advance(self: output.Output, *args: Any) -> None:
        advances[0] += 1
        real_advance(self, *args)

    monkeypatch.setattr(os, "fsync", counting_fsync)
    monkeypatch.setattr(output.Output, "advance", counting_advance)
    every = 0.5  # a record per chunk (the old cadence) breaks the bound unless chunks are slow
    config = ScoreConfig(device="cpu", precision="fp32", chunk_bytes=2048, checkpoint_every=every)
    start = time.monotonic()
    score_table(str(SLICE), str(model_dir), str(tmp_path / "out.gz"), config)
    seconds = time.monotonic() - start
    records[0] = fsyncs[0] // 2  # the partial file's and the record's (no bad-lines file)
    # The records: one at most every `every` seconds, and the last one at the end.
    assert advances[0] > 100  # chunks written
    assert fsyncs[0] % 2 == 0 and 1 <= records[0] <= seconds / every + 1, (fsyncs, seconds)
    # With --checkpoint-every 0, a record per chunk, as before; the same bytes.
    fsyncs[0] = advances[0] = 0
    config = ScoreConfig(device="cpu", precision="fp32", chunk_bytes=2048, checkpoint_every=0)
    score_table(str(SLICE), str(model_dir), str(tmp_path / "each.gz"), config)
    assert fsyncs[0] == 2 * advances[0]
    assert (tmp_path / "each.gz").read_bytes() == (tmp_path / "out.gz").read_bytes()


@pytest.mark.parametrize("during", ["between-chunks", "mid-write"])
def test_an_interrupt_records_the_last_whole_chunk(
    tmp_path: Path, model_dir: Path, monkeypatch: pytest.MonkeyPatch, during: str
) -> None:
    """With records by time, Ctrl-C (KeyboardInterrupt) still leaves a record of the last
    chunk written whole, also when it lands while a chunk is being written (the record then
    names the chunk before; --resume cuts the rest off): the resumed output is the
    uninterrupted one."""
    from rescorer.job import output

    whole = run_score(tmp_path, model_dir, "whole.txt", chunk_bytes=8192)
    out = tmp_path / "out.txt"
    writes = [0]
    real = output.Output.write if during == "mid-write" else output.Output.advance

    def interrupted(self: output.Output, *args: Any) -> None:
        real(self, *args)
        writes[0] += 1
        if writes[0] == 7:
            raise KeyboardInterrupt

    name = "write" if during == "mid-write" else "advance"
    monkeypatch.setattr(output.Output, name, interrupted)
    config = ScoreConfig(device="cpu", precision="fp32", chunk_bytes=8192, checkpoint_every=1e6)
    with pytest.raises(KeyboardInterrupt):
        score_table(str(SLICE), str(model_dir), str(out), config)
    monkeypatch.setattr(output.Output, name, real)
    record = json.loads(Path(f"{out}.partial.json").read_text())
    from rescorer.io.chunks import iter_chunks
    from rescorer.io.inputs import open_binary

    with open_binary(str(SLICE)) as stream:
        ends = [c.offset + len(c.data) for c in iter_chunks(stream, 8192)]
    whole_chunks = 6 if during == "mid-write" else 7  # the 7th was being written, or written
    assert record["offset"] == ends[whole_chunks - 1]
    assert whole.read_bytes()[: record["out_bytes"]].count(b"\n") == record["next_line"] - 1
    assert Path(f"{out}.partial").stat().st_size >= record["out_bytes"]
    resume(SLICE, model_dir, out)
    assert out.read_bytes() == whole.read_bytes()


@pytest.mark.parametrize("workers", [0, 2])
def test_overlap_changes_no_byte(tmp_path: Path, model_dir: Path, workers: int) -> None:
    """Chunk k+1 submitted before chunk k's scores are collected (the default) or each chunk
    waited for: the same bytes (issue 25, item 1)."""
    runs = [
        run_score(
            tmp_path, model_dir, f"{overlap}.gz", chunk_bytes=8192, overlap=overlap, workers=workers
        ).read_bytes()
        for overlap in (True, False)
    ]
    assert runs[0] == runs[1]


@pytest.mark.parametrize("out_name", ["out.txt", "out.gz"])
def test_a_missing_final_newline_is_kept_as_it_was(
    tmp_path: Path, model_dir: Path, out_name: str
) -> None:
    """Lines out = lines in, byte for byte outside the score field, the last one included."""
    data = gzip.decompress(SLICE.read_bytes()).rstrip(b"\n")
    table = tmp_path / "no-final-newline.txt"
    table.write_bytes(data)
    out = tmp_path / out_name
    config = ScoreConfig(device="cpu", precision="fp32", chunk_bytes=16384)
    score_table(str(table), str(model_dir), str(out), config)
    written = out.read_bytes()
    written = gzip.decompress(written) if out_name.endswith(".gz") else written
    assert not written.endswith(b"\n")
    assert written.count(b"\n") == data.count(b"\n")
    with_newline = run_score(tmp_path, model_dir, "with.txt").read_bytes()
    assert written + b"\n" == with_newline


def test_an_empty_table_gives_a_valid_empty_gzip_file(tmp_path: Path, model_dir: Path) -> None:
    table = tmp_path / "empty.txt"
    table.write_bytes(b"")
    out = tmp_path / "empty.gz"
    score_table(str(table), str(model_dir), str(out), ScoreConfig(device="cpu"))
    data = out.read_bytes()
    assert data[:2] == b"\x1f\x8b"  # a gzip member: gzip -t and zcat accept it (0 bytes: no)
    assert gzip.decompress(data) == b""


@pytest.mark.slow
@pytest.mark.parametrize("workers", ["0", "2"])
def test_sigint_keeps_the_partial_output_and_says_how_to_resume(
    tmp_path: Path, long_run: LongRun, workers: str
) -> None:
    """Ctrl-C reaches the whole process group (the workers too): exit 130 and one line naming
    --resume; OUT.partial and its record stay, and --resume finishes the same bytes. With
    workers it used to hang until a second Ctrl-C, the workers printing tracebacks."""
    cmd, whole = long_run.command(["--workers", workers]), long_run.whole(["--workers", workers])
    out = tmp_path / "out.gz"
    record = Path(f"{out}.partial.json")
    proc = subprocess.Popen(
        [*cmd, "-o", str(out)],
        env=ONE_THREAD,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, as a terminal's foreground job
        preexec_fn=default_sigint,
    )
    deadline = time.monotonic() + 60
    while not record.exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.01)
    os.killpg(proc.pid, signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=30)  # a hang, not a speed limit
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail(f"still running 30 s after Ctrl-C: {proc.communicate()[1][-2000:]}")
    assert proc.returncode == 130, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "--resume" in lines[0] and f"{out}.partial" in lines[0], err
    assert record.exists() and Path(f"{out}.partial").exists() and not out.exists()
    subprocess.run([*cmd, "-o", str(out), "--resume"], check=True, env=ONE_THREAD)
    assert out.read_bytes() == whole.read_bytes()


@pytest.mark.slow
def test_progress_lines_off_a_terminal(tmp_path: Path, long_run: LongRun) -> None:
    """Under nohup or Slurm stderr is a file: a line every --progress-every seconds with pairs,
    the share of the input, the rate and the ETA (issue 14, item 1)."""
    cmd = long_run.command()
    # Plain text: a gzip input this small is read ahead whole by the decompressing thread (on
    # a real table the read-ahead is a few MB of GBs).
    big = tmp_path / "big.txt"
    big.write_bytes(gzip.decompress(long_run.big.read_bytes()))
    cmd = [str(big) if c.endswith("big.gz") else c for c in cmd if c != "-q"]
    log = tmp_path / "err.log"
    with open(log, "w") as err:
        subprocess.run(
            [*cmd, "-o", str(tmp_path / "o.gz"), "--progress-every", "0.05"],
            stderr=err,
            env=ONE_THREAD,
            check=True,
        )
    lines = [ln for ln in log.read_text().splitlines() if ln.startswith(f"rescorer score {big}:")]
    assert len(lines) >= 3, log.read_text()
    shares = [float(ln.split("pairs in ")[1].split(", ")[1].split("%")[0]) for ln in lines]
    assert shares == sorted(shares) and 0 < shares[0] < 50 and shares[-1] <= 100
    assert all("pairs/s" in ln for ln in lines) and any("ETA" in ln for ln in lines)
    quiet = subprocess.run(
        [*cmd, "-o", str(tmp_path / "q.gz"), "--progress-every", "0"],
        capture_output=True,
        text=True,
        env=ONE_THREAD,
        check=True,
    )
    assert f"rescorer score {big}:" not in quiet.stderr


@pytest.mark.slow
@pytest.mark.parametrize("workers", ["0", "2"])
def test_a_reader_that_closes_the_pipe_ends_the_run_with_exit_1(
    tmp_path: Path, long_run: LongRun, workers: str
) -> None:
    """``score -o - | head``: once the reader is gone the run stops with exit 1 and one line,
    never a summary saying every line was written."""
    cmd = long_run.command(["--workers", workers])
    cmd = [c for c in cmd if c != "-q"]
    proc = subprocess.Popen(
        [*cmd, "-o", "-"], env=ONE_THREAD, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.readline()  # a line arrived, then the reader goes, as head -1 does
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 1, err
    lines = err.strip().splitlines()
    # the first line says how the run computes (issue 39, item 1); then the error alone
    assert len(lines) == 2 and " thread" in lines[0] and "closed it" in lines[1], err
    assert "lines written" not in err


BOUND = 0.02  # nats: how far chunking, sharding or batching may move a pair's score (README)


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["auto", "bf16"])
def test_a_pairs_score_does_not_depend_on_chunks_or_shards(
    tmp_path: Path, model_dir: Path, precision: str
) -> None:
    """The same pairs scored with --chunk-bytes 2 KiB and 64 KiB and as 3 merged shards: each
    pair's score moves by less than the bound (issue 14, item 3). ``auto`` is fp32 (rounding
    only); bf16 is held to the bound the README states."""
    from rescorer.job.merge import merge

    def logp_column(path: Path) -> np.ndarray:
        return np.array([e.scores[-1] for e in read_table(str(path))])

    runs = []
    for chunk_bytes in (2048, 65536):
        out = tmp_path / f"c{chunk_bytes}.txt"
        config = ScoreConfig(
            device="cpu", precision=precision, column="logp", chunk_bytes=chunk_bytes
        )
        stats = score_table(str(SLICE), str(model_dir), str(out), config)
        assert stats.precision == ("fp32" if precision == "auto" else "bf16")
        runs.append(logp_column(out))
    parts = []
    for k in (1, 2, 3):
        part = tmp_path / f"s{k}.txt"
        config = ScoreConfig(
            device="cpu", precision=precision, column="logp", chunk_bytes=4096, shard=(k, 3)
        )
        score_table(str(SLICE), str(model_dir), str(part), config)
        parts.append(str(part))
    merge(str(tmp_path / "merged.txt"), parts)
    runs.append(logp_column(tmp_path / "merged.txt"))
    spread = np.ptp(np.stack(runs), axis=0)  # per pair: largest minus smallest score
    assert len(spread) == len(LINES)
    assert spread.max() <= (1e-4 if precision == "auto" else BOUND), spread.max()


def test_a_first_compile_is_said_and_kept_alive_until_the_first_chunk(
    tmp_path: Path, model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 39, item 2: score's first progress line came 3 minutes in, after a compile that
    said nothing. Now a line says it compiles and how long that usually takes, and a line
    every --progress-every seconds keeps coming while it does (the fake compile below waits
    for one before it returns), then the progress lines."""
    import rescorer.job.run as job_run  # the streamed job says the opening and compile lines
    import rescorer.score.scorer as scorer
    from rescorer.model.encdec import Kernels

    said: list[str] = []
    heard = threading.Event()

    def say(line: str) -> None:
        said.append(line)
        if "still compiling" in line:
            heard.set()

    def fake_compile(model: EncoderDecoder, guard: object = None) -> Kernels:
        first = [True]

        def wrap(fn: Any) -> Any:
            def call(*args: Any, **kwargs: Any) -> Any:
                if first[0]:
                    first[0] = False
                    assert heard.wait(60), "no 'still compiling' line while compiling"
                return fn(*args, **kwargs)

            return call

        steps = (model.enc_rec.step, model.dec_rec.step, model.readout_logprobs,
                 model.readout_picks, model.decoder_tree_step)  # fmt: skip
        return Kernels(*map(wrap, steps))

    monkeypatch.setattr(job_run, "_say", say)
    monkeypatch.setattr(scorer, "compile_kernels", fake_compile)
    run_score(tmp_path, model_dir, compile="yes", progress_every=0.05)
    assert said[0].startswith("rescorer score: cpu, fp32, ") and " thread" in said[0], said
    assert said[1].startswith("rescorer score: compiling the model's steps and readout"), said
    assert "(usually " in said[1] and "--compile no skips it" in said[1]
    assert said[2].startswith("rescorer score: still compiling, with the first chunk ("), said
    quiet: list[str] = []
    monkeypatch.setattr(job_run, "_say", quiet.append)
    heard.set()
    run_score(tmp_path, model_dir, "quiet.gz", compile="yes", quiet=True, progress_every=0.05)
    assert quiet == []


def test_scoring_a_scored_table_warns(
    tmp_path: Path, model_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 39, item 9: scoring an already-scored table exited 0 and only moses-ini noticed.
    Now score warns, after its first chunk: a column equal to this run's, or a last column that
    is exp(k) on every line as --word-penalty writes it; not on the original table."""
    once = run_score(tmp_path, model_dir, "once.gz")
    assert "scored already" not in capsys.readouterr().err
    score_table(str(once), str(model_dir), str(tmp_path / "twice.gz"),
                ScoreConfig(device="cpu", precision="fp32", chunk_bytes=16384))  # fmt: skip
    err = capsys.readouterr().err
    assert f"rescorer score: warning: {once}: score 5 equals this run's column 1 on its " in err
    assert "it was scored already, by this model" in err and err.count("scored already") == 1
    # another model's column then the word penalty: the last column tells
    from rescorer.score.models import already_scored

    lines = [b"a ||| b ||| 0.1 0.2 0.3 0.4 0.05 1", b"a ||| c ||| 0.1 0.2 0.3 0.4 0.07 7.38906"]
    said = already_scored("pt.gz", lines, np.log(np.array([0.5, 0.25])))
    assert said is not None and "has 6 scores, the last exp(k) on its first 2 lines" in said
    # neither Moses' four columns nor its old fifth (the phrase penalty, 2.718) is a score run's
    assert already_scored("pt.gz", [ln.rsplit(b" ", 2)[0] for ln in lines], np.zeros(2)) is None
    old = [b"a ||| b ||| 0.1 0.2 0.3 0.4 2.718", b"a ||| c ||| 0.1 0.2 0.3 0.4 2.718"]
    assert already_scored("pt.gz", old, np.log(np.array([0.5, 0.25]))) is None


@pytest.mark.slow
def test_progress_of_a_gzip_of_several_members_never_says_100_percent_early(
    tmp_path: Path, long_run: LongRun
) -> None:
    """Issue 39, item 9: '100.0% of the input' partway through a 20,000-line file, a gzip of
    several members (its trailer gives the last member's size only)."""
    lines, cmd = long_run.lines, long_run.command()
    text = ("\n".join(lines) + "\n").encode()
    half = text.index(b"\n", len(text) // 2) + 1
    members = tmp_path / "members.gz"
    members.write_bytes(gzip.compress(text[:half]) + gzip.compress(text[half:]))
    cmd = [str(members) if c.endswith("big.gz") else c for c in cmd if c != "-q"]
    done = subprocess.run([*cmd, "-o", str(tmp_path / "o.gz"), "--progress-every", "0.05"],
                          capture_output=True, text=True, env=ONE_THREAD, check=True)  # fmt: skip
    shown = [ln for ln in done.stderr.splitlines() if ln.startswith(f"rescorer score {members}:")]
    assert len(shown) >= 3, done.stderr
    shares = [float(ln.split("pairs in ")[1].split(", ")[1].split("%")[0]) for ln in shown]
    assert shares == sorted(shares) and shares[0] < 50 and shares[-1] < 100, shares
