"""rescorer extend on hostile input (issue 58, items 4, 5, 6, 12 and 14; issue 59, item 3): a
model whose scores overflow, lexical probabilities that are not probabilities, side inputs
changed under a resumed run, a fill-up table that cannot be read, and the command's own first
line, --threads and NOT LEARNED warning."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from conftest import TINY_SYSTEM

from rescorer.cli import cli
from rescorer.errors import InputError, RescorerError
from rescorer.extend.config import ExtendConfig
from rescorer.io.table import read_table
from rescorer.moses.lex import read_lex

TABLE = TINY_SYSTEM / "phrase-table.gz"
TEST_EN = TINY_SYSTEM / "test.en"


def run(*args: object) -> Result:
    """``rescorer ARGS`` in this process (each subprocess would import torch again)."""
    return CliRunner().invoke(cli, [str(a) for a in args])


def error_line(result: Result) -> str:
    """The one error line of a refused run (exit 1)."""
    assert result.exit_code == 1, (result.exit_code, result.output)
    lines = result.stderr.strip().splitlines()
    assert lines and lines[-1].startswith("rescorer extend: error: "), result.stderr
    return lines[-1]


def overflowing(model: Path, folder: Path) -> Path:
    """``model`` with every weight times 1e30: finite weights whose scores overflow fp32."""
    from safetensors.torch import load_file, save_file

    huge = folder / f"huge-{model.parent.name}"
    shutil.copytree(model, huge)
    weights = huge / "model.safetensors"
    save_file({k: v * 1e30 for k, v in load_file(weights).items()}, weights)
    return huge


def lex_files(folder: Path) -> tuple[Path, Path]:
    """lex.f2e and lex.e2f over the words of the tiny table's first pairs."""
    f2e, e2f = folder / "lex.f2e", folder / "lex.e2f"
    table = list(read_table(str(TABLE)))[:300]
    f2e.write_text("".join(f"{e.tgt_tokens[0]} {e.src_tokens[0]} 0.5\n" for e in table))
    e2f.write_text("".join(f"{e.src_tokens[0]} {e.tgt_tokens[0]} 0.25\n" for e in table))
    return f2e, e2f


# ------------------------------------------------------------ 58.4: models whose scores overflow
def test_a_second_model_that_overflows_is_refused_as_score_refuses_it(
    tmp_path: Path, tiny_model_dir: Path, tiny_inverse_model_dir: Path
) -> None:
    """``-m FWD -m HUGE-INVERSE`` wrote ``nan`` in every new pair's second column, exit 0."""
    huge = overflowing(tiny_inverse_model_dir, tmp_path)
    out = tmp_path / "ext.gz"
    done = run("extend", TABLE, "-m", tiny_model_dir, "-m", huge, "-o", out,
               "--device", "cpu", "--precision", "fp32", "-q")  # fmt: skip
    line = error_line(done)
    assert line.startswith(f"rescorer extend: error: {huge}: the model scores the new pair ")
    assert " ||| " in line and "as nan in fp32, not a finite log probability" in line
    assert f"{TABLE}:" in line  # the line whose source phrase it is
    assert sorted(p.name for p in tmp_path.iterdir()) == [huge.name]  # no output, no partial


def test_a_first_model_that_overflows_is_refused_not_silent(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    """The generating model's scores overflow: it proposed nothing and exited 0."""
    huge = overflowing(tiny_model_dir, tmp_path)
    out = tmp_path / "ext.gz"
    done = run("extend", TABLE, "-m", huge, "-o", out, "--device", "cpu", "--precision", "fp32")
    line = error_line(done)
    assert line.startswith(f"rescorer extend: error: {huge}: the model's next-word scores for ")
    assert "not finite" in line and "in fp32" in line and f"{TABLE}:" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == [huge.name]


# ---------------------------------------------------- 58.5: lexical weights that are not ones
@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "-0.5", "7", "1.5", "1e400"])
def test_a_lex_value_that_is_not_a_probability_is_refused(tmp_path: Path, value: str) -> None:
    """nan, inf, -0.5 and 7 were taken as probabilities (written as nan, inf, a clamped
    product, 823543)."""
    lex = tmp_path / "lex.f2e"
    lex.write_text(f"la the 0.5\nmaison house 0.25\nchat cat {value}\n", encoding="utf-8")
    with pytest.raises(InputError) as refused:
        read_lex(str(lex))
    assert str(refused.value).startswith(f"{lex}:3: {value!r} is not a probability in [0, 1]")


def test_lex_values_of_0_and_1_are_probabilities(tmp_path: Path) -> None:
    """train-model.perl writes w with %.7f: a w under 5e-8 reads 0.0000000, a real value."""
    lex = tmp_path / "lex.e2f"
    lex.write_text("la the 0.0000000\nmaison house 1.0000000\nchat cat 1\n", encoding="utf-8")
    table = read_lex(str(lex))
    assert (table.get("the", "la"), table.get("house", "maison")) == (0.0, 1.0)


def test_extend_names_the_lex_file_and_line(tmp_path: Path, tiny_model_dir: Path) -> None:
    f2e, e2f = lex_files(tmp_path)
    e2f.write_text(e2f.read_text() + "chat cat 7\n")
    lines = len(e2f.read_text().splitlines())
    out = tmp_path / "ext.gz"
    done = run("extend", TABLE, "-m", tiny_model_dir, "--lex-f2e", f2e, "--lex-e2f", e2f,
               "-o", out, "--device", "cpu")  # fmt: skip
    assert error_line(done) == (
        f"rescorer extend: error: {e2f}:{lines}: '7' is not a probability in [0, 1] "
        "(expected 'word word p', p a word translation probability)"
    )
    assert not out.exists()


# --------------------------------------------------- 58.6: side inputs changed under --resume
@pytest.mark.parametrize("changed", ["input", "lex_f2e", "lex_e2f"])
def test_a_resume_refuses_a_side_input_changed_under_its_name(
    tmp_path: Path, tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch, changed: str
) -> None:
    """--input or a lex file rewritten between the interrupted run and --resume: the chunks
    before and after would come from different files."""
    from rescorer.extend.pipeline import Extending, extend_table

    f2e, e2f = lex_files(tmp_path)
    side = {"input": tmp_path / "test.en", "lex_f2e": f2e, "lex_e2f": e2f}
    shutil.copy(TEST_EN, side["input"])
    config = ExtendConfig(
        device="cpu", chunk_bytes=8192, checkpoint_every=0, quiet=True,
        input=str(side["input"]), lex_f2e=str(f2e), lex_e2f=str(e2f),
    )  # fmt: skip
    out = tmp_path / "out.gz"
    real, calls = Extending.collect, []

    def interrupted(self: Extending, *args: object) -> object:
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(Extending, "collect", interrupted)
    with pytest.raises(KeyboardInterrupt):
        extend_table(str(TABLE), [str(tiny_model_dir)], str(out), config)
    monkeypatch.setattr(Extending, "collect", real)
    path = side[changed]
    text = path.read_text(encoding="utf-8").splitlines(keepends=True)
    path.write_text("".join(text[1:] + text[:1]), encoding="utf-8")  # same size, other content
    resumed = dataclasses.replace(config, resume=True)
    with pytest.raises(RescorerError) as refused:
        extend_table(str(TABLE), [str(tiny_model_dir)], str(out), resumed)
    flag = "--" + changed.replace("_", "-")
    assert str(refused.value).startswith(f"{flag} {path}: its content changed since the ")
    assert not out.exists() and Path(f"{out}.partial").exists()  # kept for a --restart


# -------------------------------------------------- 58.12: a fill-up table that cannot be read
def crlf_table(folder: Path) -> Path:
    table = folder / "crlf.txt"
    lines = [e for _, e in zip(range(20), read_table(str(TABLE)), strict=False)]
    text = "".join(
        f"{e.src} ||| {e.tgt} ||| {' '.join(f'{v:g}' for v in e.scores)} ||| |||\r\n" for e in lines
    )
    table.write_text(text, encoding="utf-8", newline="")
    return table


@pytest.mark.parametrize(
    ("make", "said"),
    [
        (lambda d: d / "missing.gz", "cannot open: No such file or directory"),
        (lambda d: d, "is a folder, expected a file"),
        (lambda d: Path("/dev/zero"), "not a regular file"),
        (crlf_table, ":1: found a carriage return (CR) in the line"),
    ],
    ids=["missing", "folder", "dev-zero", "crlf"],
)
def test_a_fill_up_table_that_cannot_be_read_is_named_as_it_is(
    tmp_path: Path, tiny_model_dir: Path, make: object, said: str
) -> None:
    """Each was "no line to read the score count from (empty, or a pipe)"."""
    table = make(tmp_path)  # type: ignore[operator]
    out = tmp_path / "ext.gz"
    line = error_line(run("extend", table, "-m", tiny_model_dir, "-o", out, "--device", "cpu"))
    assert line.startswith(f"rescorer extend: error: {table}") and said in line, line
    assert "empty, or a pipe" not in line


def test_an_empty_fill_up_table_is_said_to_be_empty(tmp_path: Path, tiny_model_dir: Path) -> None:
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"")
    line = error_line(run("extend", empty, "-m", tiny_model_dir, "-o", tmp_path / "x.gz"))
    assert line == (
        f"rescorer extend: error: {empty}: no phrase-table line to read the score count from "
        "(an empty table): a fill-up needs one"
    )


# ------------------------------------------ 59.3, 58.14: extend as a first-class command
def test_extend_has_threads_a_first_line_and_the_not_learned_warning(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    """No --threads (exit 2), no first line (device, precision, threads), and no word that
    the generating model is NOT LEARNED (the tiny model is: 20 updates)."""
    out = tmp_path / "ext.gz"
    done = run("extend", TABLE, "-m", tiny_model_dir, "-o", out, "--device", "cpu",
               "--precision", "fp32", "--threads", "1", "-n", "2")  # fmt: skip
    assert done.exit_code == 0, done.output
    lines = done.stderr.splitlines()
    assert "rescorer extend: cpu, fp32, 1 thread (--threads)" in lines, lines
    warning = next(line for line in lines if "NOT LEARNED" in line)
    assert warning.startswith(f"rescorer extend: warning: {tiny_model_dir}: the model is NOT ")
    assert "the pairs it proposes" in warning
    quiet = run("extend", TABLE, "-m", tiny_model_dir, "-o", tmp_path / "q.gz", "--device",
                "cpu", "--threads", "1", "-n", "2", "-q")  # fmt: skip
    assert quiet.exit_code == 0 and "NOT LEARNED" in quiet.stderr  # a warning, even with -q
    assert "thread" not in quiet.stderr


def test_extend_refuses_a_thread_count_as_score_does(tmp_path: Path, tiny_model_dir: Path) -> None:
    done = run("extend", TABLE, "-m", tiny_model_dir, "-o", tmp_path / "x.gz", "--threads", "0")
    assert done.exit_code == 2 and "--threads" in done.stderr


def test_merge_refuses_shards_extended_with_other_lex_files(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    """A shard's manifest said only "lex": true: shards made with different lex files merged."""
    f2e, e2f = lex_files(tmp_path)
    other = tmp_path / "other.e2f"
    other.write_text(e2f.read_text().replace(" 0.25\n", " 0.125\n"))
    parts = []
    for k, lex in ((1, e2f), (2, other)):
        part = tmp_path / f"part{k}.gz"
        done = run("extend", TABLE, "-m", tiny_model_dir, "--lex-f2e", f2e, "--lex-e2f", lex,
                   "--chunk-bytes", "8K", "--shard", f"{k}/2", "-o", part, "--device", "cpu",
                   "-q")  # fmt: skip
        assert done.exit_code == 0, done.output
        parts.append(part)
    merged = run("merge", *parts, "-o", tmp_path / "merged.gz", "-q")
    assert merged.exit_code == 1 and "options" in merged.stderr, merged.stderr
    assert not (tmp_path / "merged.gz").exists()
