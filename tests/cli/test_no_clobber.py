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
        ["score-nbest", "{nbest}", "-m", "{out}", "--input", "{input}", "-o", "{link}"],
        "nbest",
    ),
    "score-nbest-input": (
        ["score-nbest", "{nbest}", "-m", "{out}", "--input", "{input}", "-o", "{input}"],
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
