"""``rescorer rerank`` refuses n-best lists that would make it write garbage (issue 29 item 5):
a sentence id far beyond the list's count (3*10^8 wrote 300 MB of blank lines) and a total
that is not a finite number (a `nan` total was accepted)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from rescorer.cli import cli

LINE = "{id} ||| a b ||| LM0= -3 WordPenalty0= -2 ||| {total}\n"


def rerank(tmp_path: Path, text: str, *weights: str) -> tuple[int, str, Path]:
    nbest, out = tmp_path / "in.nbest", tmp_path / "out.txt"
    nbest.write_text(text)
    args = ["rerank", str(nbest), "-o", str(out)]
    for w in weights or ("LM0=1", "WordPenalty0=1"):
        args += ["--weight", w]
    result = CliRunner().invoke(cli, args)
    return result.exit_code, result.output, out


def test_a_sentence_id_far_beyond_the_list_is_refused(tmp_path: Path) -> None:
    text = LINE.format(id=0, total=-5) + LINE.format(id=3 * 10**8, total=-5)
    code, said, out = rerank(tmp_path, text)
    assert code == 1, said
    assert "in.nbest:2: sentence id 300000000 after sentence 0" in said
    assert not out.exists()


def test_a_few_missing_sentences_still_give_blank_lines(tmp_path: Path) -> None:
    text = LINE.format(id=0, total=-5) + LINE.format(id=3, total=-5)
    code, said, out = rerank(tmp_path, text)
    assert code == 0, said
    assert out.read_text() == "a b\n\n\na b\n"


@pytest.mark.parametrize("total", ["nan", "inf", "-inf", "NaN"])
def test_a_total_that_is_not_finite_is_refused(tmp_path: Path, total: str) -> None:
    code, said, out = rerank(tmp_path, LINE.format(id=0, total=total))
    assert code == 1, said
    assert f"in.nbest:1: total score {total!r} is not finite" in said
    assert not out.exists()


def test_weights_that_overflow_the_new_total_are_refused(tmp_path: Path) -> None:
    code, said, out = rerank(tmp_path, LINE.format(id=0, total=-5), "LM0=1e308", "WordPenalty0=1")
    assert code == 1, said
    assert "in.nbest:1: the new total is -inf" in said
    assert not out.exists()
