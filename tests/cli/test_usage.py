"""Usage errors exit 2 before anything is read or loaded (issue 14, item 2).

Every case names a model folder and an input that do not exist: reaching them would be exit 1
("no such file"), so exit 2 shows the flags were checked first.
"""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from rescorer.cli import cli

NO_MODEL = "/nonexistent/model"
TRAIN = ["train", "/nonexistent/pt.gz", "-o", "/nonexistent/out"]
VOCAB = ["vocab", "/nonexistent/pt.gz", "-o", "/nonexistent/out"]
SCORE = ["score", "/nonexistent/pt.gz", "-m", NO_MODEL, "-o", "/nonexistent/o.gz"]
CASES = {
    "train --max-time 90x": ([*TRAIN, "--max-time", "90x"], "--max-time"),
    "train --device gpu": ([*TRAIN, "--device", "gpu"], "--device"),
    "train --hidden-size 0": ([*TRAIN, "--hidden-size", "0"], "--hidden-size"),
    "train --batch-size 0": ([*TRAIN, "--batch-size", "0"], "--batch-size"),
    "train --valid-fraction 1.5": ([*TRAIN, "--valid-fraction", "1.5"], "--valid-fraction"),
    "train --valid-fraction 1": ([*TRAIN, "--valid-fraction", "1"], "--valid-fraction"),
    "train --max-updates -1": ([*TRAIN, "--max-updates", "-1"], "--max-updates"),
    "train --patience -1": ([*TRAIN, "--patience", "-1"], "--patience"),
    # One declaration for both commands (cli/common.vocab_size_options): 0 and 1 are reserved.
    "train --src-vocab-size 1": ([*TRAIN, "--src-vocab-size", "1"], "--src-vocab-size"),
    "vocab --tgt-vocab-size 1": ([*VOCAB, "--tgt-vocab-size", "1"], "--tgt-vocab-size"),
    "score --device gpu": ([*SCORE, "--device", "gpu"], "--device"),
    "score --chunk-bytes 1X": ([*SCORE, "--chunk-bytes", "1X"], "--chunk-bytes"),
    "score --chunk-bytes 0K": ([*SCORE, "--chunk-bytes", "0K"], "--chunk-bytes"),
    "score --device cuda:x": ([*SCORE, "--device", "cuda:x"], "--device"),
    "score --compress-level 10": ([*SCORE, "--compress-level", "10"], "--compress-level"),
    "score --shard 0/3": ([*SCORE, "--shard", "0/3"], "--shard"),
    "score stdin --resume": (
        ["score", "-", "-m", NO_MODEL, "-o", "/nonexistent/o.gz", "--resume"],
        "--resume",
    ),
    "score stdin --shard": (
        ["score", "-", "-m", NO_MODEL, "-o", "/nonexistent/o.gz", "--shard", "1/2"],
        "--shard",
    ),
    "score -o - --resume": (
        ["score", "/nonexistent/pt.gz", "-m", NO_MODEL, "-o", "-", "--resume"],
        "--resume",
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_usage_error_exits_2_before_anything_is_loaded(name: str) -> None:
    args, flag = CASES[name]
    result = CliRunner().invoke(cli, args, input="")
    assert result.exit_code == 2, (name, result.exit_code, result.output)
    last = result.stderr.strip().splitlines()[-1]
    # issue 39, item 7: prefixed as every error line is (before: click's "Error: ")
    assert last.startswith(f"rescorer {args[0]}: error: ") and flag in last, last


def test_the_same_flags_with_good_values_get_past_the_checks() -> None:
    """Control: with good values the run goes on and stops at the missing model (exit 1)."""
    result = CliRunner().invoke(cli, [*SCORE, "--device", "cuda:0", "--compress-level", "9"])
    assert result.exit_code == 1, result.output
    for size in ("1M", "256K", "1MiB", "16384"):  # issue 39, item 7: sizes take units
        result = CliRunner().invoke(cli, [*SCORE, "--chunk-bytes", size])
        assert result.exit_code == 1, (size, result.output)


def test_a_usage_error_of_a_subcommand_and_of_the_group() -> None:
    result = CliRunner().invoke(cli, ["plot", "words", "-o", "x.png"])
    assert result.exit_code == 2
    assert result.stderr.splitlines()[0].startswith("Usage: ")  # click's usage and hint stay
    assert "plot words [OPTIONS]" in result.stderr.splitlines()[0]
    assert result.stderr.splitlines()[-1] == (
        "rescorer plot words: error: Missing option '-m' / '--model'."
    )
    result = CliRunner().invoke(cli, ["no-such-command"])
    assert result.exit_code == 2
    assert result.stderr.splitlines()[-1].startswith("rescorer: error: No such command")


def test_chunk_bytes_units() -> None:
    from rescorer.cli.ranges import ByteSize

    size = ByteSize()
    assert [size.convert(v, None, None) for v in ("1M", "16k", "2MiB", "1G", "7", "1mb")] == [
        1 << 20,
        16 << 10,
        2 << 20,
        1 << 30,
        7,
        1 << 20,
    ]


def test_mert_seed_takes_an_integer_or_clock() -> None:
    from rescorer.cli.drivers import MertSeed

    seed = MertSeed()
    assert [seed.convert(v, None, None) for v in ("7", 0, "clock", " Clock ", None)] == [
        7,
        0,
        None,
        None,
        None,
    ]
    with pytest.raises(click.BadParameter, match="expected an integer or 'clock'"):
        seed.convert("time", None, None)
