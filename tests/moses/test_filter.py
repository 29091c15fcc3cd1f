"""Filters: --input (filter-model-given-input.pl), --min-score, --top-k (table-limit)."""

from __future__ import annotations

import gzip
import itertools
import math
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import DATA_DIR, REAL_INI, TINY_SYSTEM

from rescorer.cli import cli
from rescorer.errors import InputError, RescorerError
from rescorer.io.table import read_table
from rescorer.moses.combine import WeightSpec
from rescorer.moses.filter import FilterConfig, MinScore, filter_table, parse_min_score
from rescorer.moses.ini import read_ini

TABLE = DATA_DIR / "en-fr.filter-slice.pt.gz"  # 1,004 real lines around test6's n-grams
INPUT = DATA_DIR / "en-fr.test6.en"  # the first 6 lines of test.en
TM = (0.11452, 0.0672427, -0.000424593, 0.0192088)  # its weights, copied by hand
WORD_PENALTY, PHRASE_PENALTY = -0.0919745, 0.0125348
TINY_INI = TINY_SYSTEM / "moses.ini"  # the real tuned ini of a system whose files are there


def read_lines(path: Path) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return f.read().split("\n")[:-1]


def run(args: list[str]) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["filter", *args])
    return result.exit_code, result.stderr


def test_input_keeps_exactly_the_sources_found_in_the_input(tmp_path: Path) -> None:
    out = tmp_path / "filtered.gz"
    code, stderr = run([str(TABLE), "--input", str(INPUT), "-o", str(out)])
    assert code == 0, stderr
    # independently: a source is kept iff " src " occurs in " line " and has <= 10 words
    padded = [f" {' '.join(line.split())} " for line in INPUT.read_text().split("\n")]
    table = read_lines(TABLE)
    expected = [
        line
        for line in table
        if len(line.split(" ||| ")[0].split()) <= 10
        and any(f" {line.split(' ||| ')[0]} " in p for p in padded)
    ]
    kept = read_lines(out)
    assert kept == expected  # same lines, same bytes, same order
    assert 0 < len(kept) < len(table)
    assert f"kept {len(kept):,} of {len(table):,} phrase pairs" in stderr


def test_tokenize_raw_input(tmp_path: Path) -> None:
    raw = tmp_path / "raw.en"
    raw.write_text("Please enter a name for the pattern:\nGCC does not currently support it\n")
    tokenized = tmp_path / "tok.en"
    tokenized.write_text(
        "please enter a name for the pattern :\ngcc does not currently support it\n"
    )
    a, b = tmp_path / "a.gz", tmp_path / "b.gz"
    args = [str(TABLE), "--input", str(raw), "--tokenize", "en", "--lowercase", "-o", str(a)]
    assert run(args)[0] == 0
    assert run([str(TABLE), "--input", str(tokenized), "-o", str(b)])[0] == 0
    assert read_lines(a) == read_lines(b) != []
    upper = tmp_path / "upper.en"
    upper.write_text(tokenized.read_text().upper())
    c = tmp_path / "c.gz"
    assert run([str(TABLE), "--input", str(upper), "--lowercase", "-o", str(c)])[0] == 0
    assert read_lines(c) == read_lines(b)
    code, stderr = run([str(TABLE), "--tokenize", "en", "-o", str(tmp_path / "d.gz")])
    assert code == 1 and "give it" in stderr


def test_min_score_drops_raw_columns_below_threshold(tmp_path: Path) -> None:
    out = tmp_path / "min.gz"
    code, _ = run([str(TABLE), "--min-score", "2:0.1", "--min-score", "0:0.05", "-o", str(out)])
    assert code == 0
    expected = [
        line
        for line in read_lines(TABLE)
        if float(line.split(" ||| ")[2].split()[2]) >= 0.1
        and float(line.split(" ||| ")[2].split()[0]) >= 0.05
    ]
    assert read_lines(out) == expected and 0 < len(expected) < 1004


def test_min_score_specs() -> None:
    assert parse_min_score("2:0.0001,0:1e-3") == (MinScore(2, 0.0001), MinScore(0, 0.001))
    for bad in ("2", "x:1", "2:y", "-1:0.5", "", "1:nan", "1:inf", "1:-inf"):
        with pytest.raises(RescorerError, match="expected COL:THRESHOLD"):
            parse_min_score(bad)


def test_bad_min_score_leaves_no_output(tmp_path: Path) -> None:
    out = tmp_path / "never.gz"
    code, stderr = run([str(TABLE), "--min-score", "2=0.1", "-o", str(out)])
    assert code == 1 and "expected COL:THRESHOLD" in stderr
    with pytest.raises(InputError, match="column 4 does not exist") as err:
        filter_table(str(TABLE), str(out), FilterConfig(min_scores=(MinScore(4, 0.1),)))
    assert (err.value.path, err.value.lineno) == (str(TABLE), 1)
    assert list(tmp_path.iterdir()) == []


def by_hand(line: str) -> float:
    fields = line.split(" ||| ")
    scores = [float(v) for v in fields[2].split()]
    return (
        sum(w * max(math.log(v), -100.0) for w, v in zip(TM, scores, strict=True))
        + WORD_PENALTY * -len(fields[1].split())
        + PHRASE_PENALTY
    )


@pytest.mark.parametrize("k", [1, 3])
def test_top_k_keeps_the_k_best_per_source_in_file_order(tmp_path: Path, k: int) -> None:
    out = tmp_path / "top.gz"
    args = [str(TABLE), "--top-k", str(k), "--weights", str(REAL_INI), "--no-lm", "-o", str(out)]
    code, stderr = run(args)
    assert code == 0, stderr
    expected: list[str] = []
    for _, group in itertools.groupby(read_lines(TABLE), key=lambda x: x.split(" ||| ")[0]):
        lines = list(group)
        best = sorted(range(len(lines)), key=lambda i: (-by_hand(lines[i]), i))[:k]
        expected += [lines[i] for i in sorted(best)]
    assert read_lines(out) == expected
    assert len(expected) < 1004


def test_top_k_ties_keep_file_order(tmp_path: Path) -> None:
    table = tmp_path / "ties.txt"
    rows = [
        "a ||| x ||| 0.5 0.5 0.5 0.5",
        "a ||| y ||| 0.9 0.5 0.5 0.5",
        "a ||| z ||| 0.5 0.5 0.5 0.5",
        "a ||| w ||| 0.5 0.5 0.5 0.5",
        "b ||| x ||| 0.1 0.1 0.1 0.1",
    ]
    table.write_text("\n".join(rows) + "\n")
    out = tmp_path / "out.txt"
    args = [str(table), "--top-k", "2", "--weight", "TranslationModel0=1,1,1,1", "-o", str(out)]
    assert run(args)[0] == 0
    assert out.read_text().split("\n")[:-1] == [rows[0], rows[1], rows[4]]


def test_top_k_refuses_a_source_that_comes_back(tmp_path: Path) -> None:
    table = tmp_path / "unsorted.txt"
    table.write_text("b ||| x ||| 1 1 1 1\na ||| y ||| 1 1 1 1\nb ||| z ||| 1 1 1 1\n")
    config = FilterConfig(top_k=1)
    ini = read_ini(str(REAL_INI))
    with pytest.raises(InputError, match="source phrase 'a' comes after 'b'") as err:
        weights = WeightSpec(ini=ini, use_lm=False)
        filter_table(str(table), str(tmp_path / "o.gz"), config, weights=weights)
    assert err.value.lineno == 2
    assert not (tmp_path / "o.gz").exists()


def test_a_nul_byte_in_a_phrase_is_a_bad_line_named_with_its_number(tmp_path: Path) -> None:
    """Issue 65, item 5: a NUL inside a phrase was read as part of a word (Moses copies it into
    its translations); filter now refuses the line as every table reader does."""
    table = tmp_path / "nul.txt"
    table.write_bytes(b"a ||| x ||| 1 1 1 1\na ||| y\0z ||| 1 1 1 1\nb ||| z ||| 1 1 1 1\n")
    out = tmp_path / "o.gz"
    code, stderr = run([str(table), "--min-score", "0:0.5", "-o", str(out)])
    assert code == 1
    assert f"{table}:2: found a NUL byte at character 8 of the line" in stderr
    assert not out.exists()


def test_moses_ini_out_points_at_the_filtered_table(tmp_path: Path) -> None:
    """Every path of the new ini is absolute (issue 27, item 1): the phrase table is OUT, the
    reordering table and LM are resolved from the ini's folder, the other bytes unchanged."""
    out, ini_out = tmp_path / "filtered.gz", tmp_path / "filtered.ini"
    args = [str(TABLE), "--input", str(INPUT), "--moses-ini", str(TINY_INI)]
    code, stderr = run([*args, "--ini-out", str(ini_out), "-o", str(out)])
    assert code == 0, stderr
    new = read_ini(str(ini_out))
    assert new.feature("TranslationModel0").get("path") == str(out)
    old_text = TINY_INI.read_text()
    assert ini_out.read_text() == (
        old_text.replace("path=phrase-table.gz", f"path={out}")
        .replace("path=reordering-table.gz", f"path={TINY_SYSTEM / 'reordering-table.gz'}")
        .replace("path=lm.arpa", f"path={TINY_SYSTEM / 'lm.arpa'}")
    )


def test_ini_out_checks_the_files_before_any_work_and_takes_the_run_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A copy of the ini apart from its system: refused before the table is read (no OUT),
    naming the feature; with --run-dir, its paths are taken from the system's folder."""
    copy = tmp_path / "copy.ini"
    copy.write_bytes(TINY_INI.read_bytes())
    monkeypatch.chdir(tmp_path)
    args = [str(TABLE), "--input", str(INPUT), "--moses-ini", str(copy), "--ini-out", "new.ini"]
    code, stderr = run([*args, "-o", "filtered.gz"])
    assert code == 1 and sorted(p.name for p in tmp_path.iterdir()) == ["copy.ini"]
    assert f"{copy}:26: LexicalReordering0 (LexicalReordering) names " in stderr
    code, stderr = run([*args, "-o", "filtered.gz", "--run-dir", str(TINY_SYSTEM)])
    assert code == 0, stderr
    new = read_ini("new.ini")
    assert new.feature("LM0").get("path") == str(TINY_SYSTEM / "lm.arpa")
    assert new.feature("TranslationModel0").get("path") == str(tmp_path / "filtered.gz")
    code, stderr = run([*args[:-1], str(copy), "-o", "f2.gz", "--run-dir", str(TINY_SYSTEM)])
    assert code == 1 and f"--ini-out {copy} is the --moses-ini" in stderr


def test_all_filters_at_once_match_the_filters_one_after_another(tmp_path: Path) -> None:
    steps = [
        ["--input", str(INPUT)],
        ["--min-score", "2:0.01"],
        ["--top-k", "2", "--weights", str(REAL_INI), "--no-lm"],
    ]
    current = TABLE
    for i, step in enumerate(steps):
        nxt = tmp_path / f"step{i}.gz"
        assert run([str(current), *step, "-o", str(nxt)])[0] == 0
        current = nxt
    together = tmp_path / "together.gz"
    assert run([str(TABLE), *itertools.chain(*steps), "-o", str(together)])[0] == 0
    assert read_lines(together) == read_lines(current)
    assert len(list(read_table(str(together)))) > 0
