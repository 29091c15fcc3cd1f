"""Every command that writes files refuses an output that is one of its inputs (by device and
inode: the same name, a hard link or a symlink), before it reads or writes anything (issue 29
item 1, issue 27 item 9 for moses-ini). Before, each of these ran: the input was replaced by
the command's output (or, for merge, by the merge), exit 0."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from rescorer.cli import cli

NBEST = "0 ||| a b ||| LM0= -3 WordPenalty0= -2 ||| -5\n"
INI = "[feature]\nKENLM name=LM0 factor=0 path=lm.arpa order=3\n[weight]\nLM0= 0.5\n"


def files(tmp_path: Path) -> dict[str, Path]:
    made = {
        "table": tmp_path / "pt.txt",
        "nbest": tmp_path / "dev.nbest",
        "ini": tmp_path / "moses.ini",
        "input": tmp_path / "dev.en",
        "feats": tmp_path / "rnn.feats",
    }
    made["table"].write_text("a b ||| x y ||| 0.5 0.5 0.5 0.5\n")
    made["nbest"].write_text(NBEST)
    made["ini"].write_text(INI)
    made["input"].write_text("a b\n")
    made["feats"].write_text("RNN0= -1\n")
    return made


CASES = {
    "moses-ini": (["moses-ini", "{ini}", "--phrase-table", "{table}", "-o", "{ini}"], "ini"),
    "combine": (["combine", "{table}", "--weights", "{ini}", "-o", "{link}"], "table"),
    "combine-lm": (
        ["combine", "{table}", "--weights", "{ini}", "--lm", "{input}", "-o", "{input}"],
        "input",
    ),
    "filter": (["filter", "{table}", "--input", "{input}", "-o", "{link}"], "table"),
    "filter-input": (["filter", "{table}", "--input", "{input}", "-o", "{input}"], "input"),
    "filter-ini-out": (
        [
            "filter",
            "{table}",
            "--input",
            "{input}",
            "-o",
            "{out}",
            "--weights",
            "{ini}",
            "--ini-out",
            "{link}",
        ],
        "ini",
    ),
    "rerank": (["rerank", "{nbest}", "--weights", "{ini}", "-o", "{link}"], "nbest"),
    "rerank-feats": (
        ["rerank", "{nbest}", "--weights", "{ini}", "--feature-file", "{feats}", "-o", "{feats}"],
        "feats",
    ),
    "score-nbest": (
        [
            "score-nbest",
            "{nbest}",
            "-m",
            "{out}",
            "--phrase-table",
            "{table}",
            "--input",
            "{input}",
            "-o",
            "{link}",
        ],
        "nbest",
    ),
    "score-nbest-input": (
        [
            "score-nbest",
            "{nbest}",
            "-m",
            "{out}",
            "--phrase-table",
            "{table}",
            "--input",
            "{input}",
            "-o",
            "{input}",
        ],
        "input",
    ),
    "merge": (["merge", "{link}", "{table}"], "table"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_an_output_that_is_an_input_is_refused(tmp_path: Path, name: str) -> None:
    made = files(tmp_path)
    args, victim = CASES[name]
    link = tmp_path / "link"
    link.hardlink_to(made[victim])
    names = {k: str(v) for k, v in made.items()}
    names.update(link=str(link), out=str(tmp_path / "out"))
    before = {k: v.read_bytes() for k, v in made.items()}
    result = CliRunner().invoke(cli, [a.format(**names) for a in args])
    assert result.exit_code == 1, (result.output, result.exception)
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "itself" in lines[0] and "the same file" in lines[0], lines
    assert {k: v.read_bytes() for k, v in made.items()} == before
    assert not (tmp_path / "out").exists()


# --- issue 58 item 3: every side file, and outputs that do not exist yet --------------------

SIDE_CASES = {
    # extend checked -o against the table only: each of these was overwritten
    "extend-lex-f2e": (["extend", "{table}", "-m", "{out}", "--lex-f2e", "{lex}", "--lex-e2f",
                        "{lex2}", "-o", "{lex}"], "lex"),
    "extend-lex-e2f": (["extend", "{table}", "-m", "{out}", "--lex-f2e", "{lex}", "--lex-e2f",
                        "{lex2}", "-o", "{lex2}"], "lex2"),
    "extend-input": (["extend", "{table}", "-m", "{out}", "--input", "{input}", "-o", "{link}"],
                     "input"),
    # the model folder's files
    "score-model": (["score", "{table}", "-m", "{model}", "-o", "{model}/config.json"], "config"),
    "extend-model": (["extend", "{table}", "-m", "{model}", "-o", "{model}/vocab.src.json"],
                     "vocab"),
    "score-nbest-table": (["score-nbest", "{nbest}", "-m", "{out}", "--phrase-table", "{table}",
                           "--input", "{input}", "-o", "{table}"], "table"),
}  # fmt: skip


def model_folder(tmp_path: Path) -> dict[str, Path]:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}\n")
    (model / "vocab.src.json").write_text("{}\n")
    return {"model": model, "config": model / "config.json", "vocab": model / "vocab.src.json"}


@pytest.mark.parametrize("name", sorted(SIDE_CASES))
def test_a_side_input_as_output_is_refused(tmp_path: Path, name: str) -> None:
    made = files(tmp_path)
    made["lex"] = tmp_path / "lex.f2e"
    made["lex2"] = tmp_path / "lex.e2f"
    made["lex"].write_text("x a 0.5\n")
    made["lex2"].write_text("a x 0.5\n")
    made.update(model_folder(tmp_path))
    args, victim = SIDE_CASES[name]
    link = tmp_path / "link"
    link.symlink_to(made[victim])
    names = {k: str(v) for k, v in made.items()}
    names.update(link=str(link), out=str(tmp_path / "out"))
    before = {k: v.read_bytes() for k, v in made.items() if v.is_file()}
    result = CliRunner().invoke(cli, [a.format(**names) for a in args])
    assert result.exit_code == 1, (result.output, result.exception)
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "itself" in lines[0] and "the same file" in lines[0], lines
    assert {k: v.read_bytes() for k, v in made.items() if v.is_file()} == before


@pytest.mark.parametrize("command", ["score", "extend"])
def test_skip_bad_lines_as_the_output_is_refused(tmp_path: Path, command: str) -> None:
    """``--skip-bad-lines X -o X``: the bad lines were reported "written to X", then the
    output was renamed over them. X need not exist: the same path is the same file."""
    made = files(tmp_path)
    out = tmp_path / "x.txt"
    for spelled in (str(out), str(tmp_path / "." / "x.txt")):
        args = [command, str(made["table"]), "-m", str(tmp_path / "model"), "-o", str(out)]
        result = CliRunner().invoke(cli, [*args, "--skip-bad-lines", spelled])
        assert result.exit_code == 1, (result.output, result.exception)
        assert "--skip-bad-lines" in result.output and "the same file" in result.output
        assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in made.values())
