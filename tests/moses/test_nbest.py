"""n-best lists: reading Moses' format, and reranking that reproduces Moses' own order."""

from __future__ import annotations

import gzip
from itertools import pairwise
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import DATA_DIR, REAL_INI, TINY_SYSTEM

from rescorer.cli import cli
from rescorer.errors import InputError, RescorerError
from rescorer.io.table import parse_scores
from rescorer.moses.combine import Weights, parse_weight_option
from rescorer.moses.filter import parse_min_score
from rescorer.moses.ini import read_ini
from rescorer.moses.nbest import (
    RerankConfig,
    parse_features,
    parse_nbest_line,
    read_nbest,
    rerank_nbest,
    weighted_sum,
)

NBEST = DATA_DIR / "en-fr.dev13.nbest.gz"  # Moses' 100-best of dev.en sentences 0-12
HYP = DATA_DIR / "en-fr.dev13.hyp.fr"  # Moses' 1-best output for them


# Numbers Python's float() reads and Moses does not: digit separators, Arabic-Indic and
# full-width digits (issue 26, "one number grammar").
NOT_MOSES_NUMBERS = ["1_000", "\u0661\u0662", "\uff11\uff12", "1\u06f0"]


def rerank(args: list[str]) -> tuple[int, str, str]:
    out = [] if "-o" in args else ["-o", "-"]  # -o is required: stdout here unless named
    result = CliRunner().invoke(cli, ["rerank", *args, *out])
    return result.exit_code, result.stdout, result.stderr


def test_parse_moses_line_and_fake_entry() -> None:
    line = (
        "0 ||| émis par  ||| LexicalReordering0= -0.336472 0 0 0 0 0 Distortion0= 0 "
        "LM0= -15.926 WordPenalty0= -2 PhrasePenalty0= 1 TranslationModel0= -0.405465 -1.85261 "
        "-0.405465 -1.39257 ||| -1.8578"
    )
    entry = parse_nbest_line(line, "x", 1)
    assert (entry.sent_id, entry.hypothesis, entry.total) == (0, "émis par", -1.8578)
    assert entry.features[0] == ("LexicalReordering0", (-0.336472, 0, 0, 0, 0, 0))
    assert entry.features[-1][0] == "TranslationModel0" and len(entry.features) == 6
    # moses-parallel.pl's filler for a sentence that failed (concatenate_nbest)
    fake = parse_nbest_line("7 |||   ||| LM0= 0 WordPenalty0= 0 ||| 0.0", "x", 2)
    assert (fake.sent_id, fake.hypothesis, fake.total) == (7, "", 0.0)
    assert fake.features == (("LM0", (0.0,)), ("WordPenalty0", (0.0,)))


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("0 ||| a b  ||| LM0= -1", "found 3 field"),
        ("x ||| a ||| LM0= -1 ||| -1", "sentence id 'x'"),
        ("0 ||| a ||| -1 LM0= -1 ||| -1", "before any 'Name=' label"),
        ("0 ||| a ||| LM0= -1x ||| -1", "'-1x' of LM0 is not a number"),
        ("0 ||| a ||| LM0= -1 ||| total", "total score 'total'"),
    ],
)
def test_bad_lines_name_file_and_line(tmp_path: Path, line: str, message: str) -> None:
    path = tmp_path / "bad.nbest"
    path.write_text(f"0 ||| ok ||| LM0= -1 ||| -0.1\n{line}\n")
    with pytest.raises(InputError, match=message) as err:
        list(read_nbest(str(path)))
    assert (err.value.path, err.value.lineno) == (str(path), 2)
    out = tmp_path / "out.txt"
    code, _, stderr = rerank([str(path), "--weight", "LM0=1", "-o", str(out)])
    assert code == 1 and f"{path}:2:" in stderr and not out.exists()


def test_rerank_with_the_ini_reproduces_moses_order_and_totals() -> None:
    weights = Weights.build(read_ini(str(REAL_INI)))
    entries = list(read_nbest(str(NBEST)))
    assert len(entries) == 1201
    oov_sentences = set()
    for sent_id in {e.sent_id for e in entries}:
        group = [e for e in entries if e.sent_id == sent_id]
        ours = [weighted_sum(e.features, weights, "n", e.lineno) for e in group]
        for e, score in zip(group, ours, strict=True):
            # Moses' total = printed features + UnknownWordPenalty (-100 per OOV, weight 1)
            hidden = (e.total - score) / -100.0
            assert hidden == pytest.approx(round(hidden), abs=1e-4)
            assert score - 100.0 * round(hidden) == pytest.approx(e.total, rel=1e-4, abs=1e-4)
            if round(hidden):
                oov_sentences.add(sent_id)
        # Moses' order: our scores do not increase down the list (beyond print rounding)
        assert all(b <= a + 1e-4 for a, b in pairwise(ours))
    assert oov_sentences == {9, 12}


def test_rerank_1best_equals_moses_output(tmp_path: Path) -> None:
    """Byte for byte, the trailing space of each of Moses' lines too (issue 64, item 6: it was
    dropped, so cmp against Moses' own 1-best failed although every sentence matched)."""
    out = tmp_path / "1best.fr"
    code, _, stderr = rerank([str(NBEST), "--weights", str(REAL_INI), "-o", str(out)])
    assert code == 0, stderr
    assert out.read_bytes() == HYP.read_bytes()
    assert "rescorer rerank: 13 sentences, 1,201 hypotheses; 1-best changed for 0" in stderr


# What the Moses of ../shared/tools/moses wrote for the input "a", "" and "b" with
# tests/data/tiny-system/moses.ini and -n-best-list F 2: its 1-best and its n-best list.
TINY_1BEST = b"une \n\nb \n"
TINY_NBEST = """\
0 ||| une  ||| LexicalReordering0= -0.0905212 0 0 0 0 0 Distortion0= 0 LM0= -7.78298 \
WordPenalty0= -1 PhrasePenalty0= 1 TranslationModel0= -0.316575 -0.783435 -0.911348 -0.930856 \
||| -0.890219
0 ||| un  ||| LexicalReordering0= -0.091725 0 0 0 0 0 Distortion0= 0 LM0= -7.87903 \
WordPenalty0= -1 PhrasePenalty0= 1 TranslationModel0= -0.313885 -0.785991 -0.762206 -0.783293 \
||| -0.898297
1 |||  ||| LexicalReordering0= 0 0 0 0 0 0 Distortion0= 0 LM0= 0 WordPenalty0= 0 \
PhrasePenalty0= 0 TranslationModel0= 0 0 0 0 ||| 0
2 ||| b  ||| LexicalReordering0= 0 0 0 0 0 0 Distortion0= 0 LM0= -3.12114 WordPenalty0= -1 \
PhrasePenalty0= 1 TranslationModel0= 0 0 0 0 ||| -100.242
"""


def test_rerank_writes_an_empty_hypothesis_as_moses_does(tmp_path: Path) -> None:
    """An empty line for an empty hypothesis (an empty input line), a trailing space after
    every word otherwise: Moses' own 1-best bytes."""
    nbest, out = tmp_path / "tiny.nbest", tmp_path / "1best"
    nbest.write_text(TINY_NBEST)
    ini = str(TINY_SYSTEM / "moses.ini")
    code, _, stderr = rerank([str(nbest), "--weights", ini, "--decoded-with", ini, "-o", str(out)])
    assert code == 0, stderr
    assert out.read_bytes() == TINY_1BEST


def test_decoded_with_keeps_the_hidden_part(tmp_path: Path) -> None:
    out = tmp_path / "re.nbest.gz"
    args = ["--weights", str(REAL_INI), "--decoded-with", str(REAL_INI), "--nbest-out"]
    code, _, stderr = rerank([str(NBEST), *args, "-o", str(out)])
    assert code == 0, stderr
    original = list(read_nbest(str(NBEST)))
    again = list(read_nbest(str(out)))
    assert len(again) == len(original)
    for old, new in zip(sorted(original, key=lambda e: (e.sent_id, -e.total)), again, strict=True):
        assert new.total == pytest.approx(old.total, rel=1e-6, abs=1e-6)


def test_extra_feature_file_reranks(tmp_path: Path) -> None:
    entries = list(read_nbest(str(NBEST)))
    feats = tmp_path / "rnn.feats"
    # the last hypothesis of each sentence gets RNN0 = 1, the others 0
    last = {e.sent_id: e.lineno for e in entries}
    feats.write_text("".join(f"RNN0= {int(last[e.sent_id] == e.lineno)}\n" for e in entries))
    out = tmp_path / "re.nbest"
    args = ["--weights", str(REAL_INI), "--feature-file", str(feats), "--weight", "RNN0=1000"]
    code, _, stderr = rerank([str(NBEST), *args, "--nbest-out", "-o", str(out)])
    assert code == 0, stderr
    reranked = list(read_nbest(str(out)))
    firsts = [e for i, e in enumerate(reranked) if i == 0 or reranked[i - 1].sent_id != e.sent_id]
    by_line = {e.lineno: e for e in entries}
    assert [f.hypothesis for f in firsts] == [by_line[last[s]].hypothesis for s in sorted(last)]
    assert all(f.features[-1] == ("RNN0", (1.0,)) for f in firsts)
    short = tmp_path / "short.feats"
    short.write_text("RNN0= 0\n")
    code, _, stderr = rerank([str(NBEST), *args[:3], str(short), *args[4:]])
    assert code == 1 and "fewer lines" in stderr


def test_missing_sentences_give_empty_lines(tmp_path: Path) -> None:
    path = tmp_path / "gaps.nbest"
    path.write_text(
        "1 ||| b  ||| LM0= -2 ||| -2\n1 ||| c  ||| LM0= -1 ||| -1\n3 ||| d  ||| LM0= -1 ||| -1\n"
    )
    code, stdout, _ = rerank([str(path), "--weight", "LM0=1"])
    assert code == 0 and stdout == "\nc \n\nd \n"  # Moses: each word and a space
    path.write_text("1 ||| b  ||| LM0= -2 ||| -2\n0 ||| c  ||| LM0= -1 ||| -1\n")
    config = RerankConfig(Weights({"LM0": (1.0,)}))
    with pytest.raises(InputError, match="sentence 0 after sentence 1"):
        rerank_nbest(str(path), str(tmp_path / "o.txt"), config)


def test_gzip_output_is_readable(tmp_path: Path) -> None:
    out = tmp_path / "1best.gz"
    assert rerank([str(NBEST), "--weights", str(REAL_INI), "-o", str(out)])[0] == 0
    with gzip.open(out, "rt", encoding="utf-8") as f:
        assert len(f.read().split("\n")) == 14


def test_features_are_read_with_the_tables_number_grammar() -> None:
    """Issue 26: float() gave 1000.0 and 12.0 for these where the table reader refuses them."""
    assert parse_features("LM0= 1_000 TM0= \u0661\u0662") == (
        "feature value '1_000' of LM0 is not a number"
    )
    assert parse_features("LM0= -1e-05 TM0= .5 3") == (("LM0", (-1e-05,)), ("TM0", (0.5, 3.0)))


@pytest.mark.parametrize("number", NOT_MOSES_NUMBERS)
def test_every_moses_reader_refuses_what_the_table_refuses(tmp_path: Path, number: str) -> None:
    """Table scores, n-best features and totals, ini weights, --weight and --min-score: one
    grammar (rescorer.io.table.parse_number)."""
    assert isinstance(parse_scores(f"0.5 {number}"), str)
    assert isinstance(parse_features(f"LM0= {number}"), str)
    with pytest.raises(InputError, match="total score"):
        parse_nbest_line(f"0 ||| a ||| LM0= -1 ||| {number}", "x", 1)
    ini = tmp_path / "moses.ini"
    ini.write_text(REAL_INI.read_text().replace("LM0= 0.111134", f"LM0= {number}"))
    with pytest.raises(InputError, match="not all numbers"):
        read_ini(str(ini))
    with pytest.raises(RescorerError, match="expected NAME=v1,v2"):
        parse_weight_option(f"LM0={number}")
    with pytest.raises(RescorerError, match="expected COL:THRESHOLD"):
        parse_min_score(f"2:{number}")
    with pytest.raises(RescorerError, match="expected COL:THRESHOLD"):
        parse_min_score("\u0662:0.5")  # a column number int() reads as 2
