"""Progress lines off a terminal for filter, combine and train (issue 14, item 1; score's own
test is in tests/score/test_pipeline.py). stderr is a file here, as under nohup or Slurm;
on a terminal, a bar (score and train)."""

from __future__ import annotations

import fcntl
import gzip
import os
import pty
import re
import select
import statistics
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest
from conftest import REAL_INI, SAMPLE_TABLE, SLICE

ROWS = 20  # copies of the real 2,090-line slice: 41,800 lines, five progress checks


@pytest.fixture(scope="module")
def big_table(tmp_path_factory: pytest.TempPathFactory) -> Path:
    lines = gzip.decompress(SLICE.read_bytes()).decode("utf-8").splitlines(keepends=True)
    path = tmp_path_factory.mktemp("progress") / "big.pt.gz"
    path.write_bytes(gzip.compress("".join(lines * ROWS).encode("utf-8"), mtime=0))
    return path


def run(args: list[str], log: Path) -> list[str]:
    with open(log, "w") as err:
        subprocess.run([sys.executable, "-m", "rescorer", *args], stderr=err, check=True)
    return log.read_text(encoding="utf-8").splitlines()


SHARE = re.compile(r"([0-9.]+)% of the input")


def check_reading_lines(lines: list[str], label: str) -> None:
    mine = [ln for ln in lines if ln.startswith(label)]
    assert len(mine) >= 3, lines
    shares = [float(SHARE.search(ln)[1]) for ln in mine]  # type: ignore[index]
    # The share is of the decompressed text (from the gzip trailer), so it grows steadily.
    assert shares == sorted(shares) and 0 < shares[0] < 40 and shares[-1] <= 100, shares
    assert all(re.search(r"[0-9,]+ lines in .* lines/s", ln) for ln in mine)
    assert any("ETA" in ln for ln in mine)


@pytest.mark.slow
@pytest.mark.parametrize("command", ["filter", "combine"])
def test_filter_and_combine_print_progress(command: str, big_table: Path, tmp_path: Path) -> None:
    args = [command, str(big_table), "-o", str(tmp_path / "out.gz")]
    if command == "combine":
        args += ["--weights", str(REAL_INI), "--no-lm"]
    else:
        args += ["--min-score", "2:0.001"]
    lines = run([*args, "--progress-every", "1e-6"], tmp_path / "err.log")
    check_reading_lines(lines, f"rescorer {command} {big_table}:")
    quiet = run([*args, "--progress-every", "0"], tmp_path / "quiet.log")
    assert not [ln for ln in quiet if ln.startswith(f"rescorer {command} {big_table}:")]


def tiny_train(table: Path, tmp_path: Path, updates: int, valid_every: int) -> list[str]:
    """A seconds-long training run with a progress line after every update (no log record)."""
    return [
        "train", str(table), "-o", str(tmp_path / "m"), "--hidden-size", "8", "--embed-size",
        "6", "--maxout-units", "5", "--src-vocab-size", "100", "--tgt-vocab-size", "100",
        "--batch-size", "8", "--max-updates", str(updates), "--log-every", "1000",
        "--valid-every", str(valid_every), "--progress-every", "1e-6",
    ]  # fmt: skip


@pytest.mark.slow
def test_train_prints_reading_progress_and_its_budget(big_table: Path, tmp_path: Path) -> None:
    args = tiny_train(big_table, tmp_path, updates=12, valid_every=1000)
    lines = run(args, tmp_path / "err.log")
    check_reading_lines(lines, "rescorer train: counting the vocabularies:")
    check_reading_lines(lines, "rescorer train: encoding:")
    # --log-every 1000 would print no update line: --progress-every does, with the budget.
    updates = [ln for ln in lines if re.match(r"rescorer train: update [0-9]+ epoch", ln)]
    assert len(updates) == 12, lines
    assert updates[-1].endswith("100% of the budget, ETA 0m00s"), updates[-1]
    assert "8% of the budget" in updates[0]


@pytest.mark.slow
def test_train_rates_leave_out_validation(big_table: Path, tmp_path: Path) -> None:
    """A validation between two progress lines does not inflate the next line's rate (the
    window restarted at the validation while its pairs went on counting: 20,617 pairs/s on a
    machine that trains 500)."""
    args = tiny_train(big_table, tmp_path, updates=40, valid_every=5)
    lines = run(args, tmp_path / "err.log")
    rates = {
        int(m[1]): float(m[2].replace(",", ""))
        for ln in lines
        if (m := re.search(r"update ([0-9]+) epoch .* \| ([0-9,]+) pairs/s", ln))
    }
    assert sorted(rates) == list(range(1, 41)), lines
    # Away from validations every rate is a plain one-update rate: their median is the
    # yardstick (robust to a few updates stalled by a busy machine).
    after_validation = set(range(6, 41, 5))
    plain = [r for u, r in rates.items() if u > 1 and u not in after_validation]
    yardstick = statistics.median(plain)
    # Right after each validation (updates 6, 11, ...): the old code divided every pair since
    # the last log record by the time since the validation, 11x to 36x too high here.
    after = {u: rates[u] for u in range(11, 41, 5)}
    assert all(rate < 8 * yardstick for rate in after.values()), (yardstick, after)


def on_a_terminal(args: list[str]) -> list[str]:
    """What ``rescorer ARGS`` writes to a terminal (stdout and stderr on a pseudo-terminal of
    120 columns), line by line; a bar's redraws stay in its line, after their carriage
    returns."""
    main, child = pty.openpty()
    fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    proc = subprocess.Popen(
        [sys.executable, "-m", "rescorer", *args],
        stdin=subprocess.DEVNULL,
        stdout=child,
        stderr=child,
    )
    os.close(child)
    out = b""
    try:
        while select.select([main], [], [], 600)[0]:  # a hang guard, not a speed limit
            try:
                block = os.read(main, 1 << 16)
            except OSError:  # EIO: the command ended and its side of the terminal closed
                break
            if not block:
                break
            out += block
    finally:
        os.close(main)
    assert proc.wait(timeout=60) == 0, out.decode("utf-8", "replace")[-3000:]
    return out.decode("utf-8").split("\r\n")


@pytest.mark.slow
@pytest.mark.parametrize("command", ["score", "train"])
def test_on_a_terminal_the_bar_comes_below_the_lines_said_before_it(
    command: str, big_table: Path, tiny_model_dir: Path, tmp_path: Path
) -> None:
    """Issue 64, item 6: score drew its progress bar before its first line, and the line ran
    on after the bar ('\\r  0%|...| 0.0% [00:00<?]rescorer score: cpu, fp32, ...'). A bar is
    now drawn at the first progress it shows, on a line of its own."""
    if command == "score":  # over score's 4 MiB compile threshold: the bar, not the kernels
        args = ["score", str(big_table), "-m", str(tiny_model_dir), "-o", str(tmp_path / "o.gz"),
                "--ignore-coverage", "--compile", "no"]  # fmt: skip
    else:
        args = tiny_train(big_table, tmp_path, updates=2, valid_every=1000)
    lines = on_a_terminal([*args, "--device", "cpu", "--progress-every", "30"])
    assert lines[0].startswith(f"rescorer {command}: "), lines[:3]
    bars = [line for line in lines if "%|" in line]
    assert bars, lines
    assert all(line.startswith("\r") and "rescorer" not in line for line in bars), bars


# The paper's analyses (issue 27, item 7): each stage of a long run says where it is.
ANALYSES = {
    "plot words": (
        ["plot", "words", "--points", "60", "--labels", "10"],
        ["t-SNE map of 60 target words"],
    ),
    "plot phrases": (
        ["plot", "phrases", "{table}", "--phrases", "80"],
        ["reading {table}", "encoding", "t-SNE map of 80 phrases"],
    ),
    "compare": (
        ["compare", "{table}", "--summary-sources", "300"],
        ["reading {table} (long source phrases)", "reading {table} (their candidates)", "scoring"],
    ),
    "sample": (["sample", "{model}", "--input", "{sources}", "-n", "5"], ["sampling"]),
}
SHARES = {"t-SNE": "of 1,000 at most", "reading": "of the input", "encoding": "of the phrases",
          "scoring": "of the pairs", "sampling": "of the phrases"}  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("command", sorted(ANALYSES))
def test_the_analyses_print_progress_and_quiet_silences_them(
    command: str, big_table: Path, tiny_model_dir: Path, tmp_path: Path
) -> None:
    """Before: nothing until the end (79 s for plot words, 101 s for plot phrases)."""
    template, stages = ANALYSES[command]
    sources = tmp_path / "sources.txt"
    sources.write_text("la maison\n" * 300, encoding="utf-8")
    values = {"{table}": str(big_table), "{model}": str(tiny_model_dir), "{sources}": str(sources)}
    args = [values.get(a, a) for a in template]
    if command != "sample":
        args += ["-m", str(tiny_model_dir)]
    out = tmp_path / ("fig.png" if command.startswith("plot") else "out.txt")
    args += ["-o", str(out), "--progress-every", "1e-6"]
    lines = run(args, tmp_path / "err.log")
    for stage in stages:
        label = f"rescorer {command}: {stage.replace('{table}', str(big_table))}: "
        mine = [ln for ln in lines if ln.startswith(label)]
        assert mine, (label, lines)
        share = SHARES[stage.split(" ")[0]]
        for line in mine:
            assert re.fullmatch(
                rf"{re.escape(label)}[0-9,]+ \w+ in [0-9]+m[0-9]{{2}}s, [0-9.]+% {share}, "
                r"[0-9,]+ \w+/s(, ETA [0-9]+m[0-9]{2}s)?",
                line,
            ), line
    assert run([*args, "-q"], tmp_path / "quiet.log") == []


@pytest.mark.slow
def test_resume_names_the_epoch_as_the_progress_lines_do(tmp_path: Path) -> None:
    """`train --resume` said "epoch 2" where the run had printed "epoch 1.20" (issue 27,
    item 9): 30 updates of 8 pairs on the 198 training pairs of the 200-line sample."""
    lines = run(
        tiny_train(SAMPLE_TABLE, tmp_path, updates=30, valid_every=1000), tmp_path / "a.log"
    )
    last = [ln for ln in lines if ln.startswith("rescorer train: update 30 epoch ")]
    assert len(last) == 1, lines
    epoch = last[0].split(" epoch ")[1].split(" ")[0]
    assert 1 < float(epoch) < 2, epoch  # the second epoch has begun
    args = [*tiny_train(SAMPLE_TABLE, tmp_path, updates=32, valid_every=1000), "--resume"]
    lines = run(args, tmp_path / "b.log")
    said = f"rescorer train: resuming at update 30 (epoch {epoch}, "
    assert [ln for ln in lines if ln.startswith(said)], (epoch, lines)
