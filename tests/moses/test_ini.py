"""moses.ini: parsing the real tuned ini, and rewriting it for a scored table."""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import DATA_DIR, REAL_INI

from rescorer.cli import cli
from rescorer.errors import InputError, RescorerError
from rescorer.io.table import read_table
from rescorer.moses.ini import read_ini, update_for_scored_table, write_scored_ini

SLICE = DATA_DIR / "pt.en-fr.slice.gz"


def scored_table(tmp_path: Path, extra: tuple[str, ...] = ("0.5",), lines: int = 50) -> Path:
    """A real slice with columns appended, as rescorer score writes it."""
    out = tmp_path / f"pt.{4 + len(extra)}.gz"
    with gzip.open(out, "wt", encoding="utf-8") as f:
        for i, entry in enumerate(read_table(str(SLICE))):
            if i == lines:
                break
            f.write(entry.line_with_columns(extra) + "\n")
    return out


def ini_with(tmp_path: Path, old: str, new: str) -> Path:
    path = tmp_path / "moses.ini"
    path.write_text(REAL_INI.read_text().replace(old, new))
    return path


def test_real_ini_features_and_weights() -> None:
    ini = read_ini(str(REAL_INI))
    assert [f.name for f in ini.features] == [
        "UnknownWordPenalty0",
        "WordPenalty0",
        "PhrasePenalty0",
        "TranslationModel0",
        "LexicalReordering0",
        "Distortion0",
        "LM0",
    ]
    (tm,) = ini.translation_models()
    assert (tm.kind, tm.num_features, tm.get("path")) == (
        "PhraseDictionaryMemory",
        4,
        "phrase-table.gz",
    )
    weights = ini.weights()
    assert weights["TranslationModel0"] == (0.11452, 0.0672427, -0.000424593, 0.0192088)
    assert weights["LM0"] == (0.111134,)
    assert ini.resolve(ini.feature("LM0").get("path") or "") == str(DATA_DIR / "lm.fr.binary")
    assert ini.text() == REAL_INI.read_text()  # every byte kept


def test_scored_table_changes_only_num_features_weights_and_path(tmp_path: Path) -> None:
    table = scored_table(tmp_path)
    out = tmp_path / "new.ini"
    update = write_scored_ini(str(REAL_INI), str(table), str(out))
    assert update.num_features == 5 and update.binarize_command is None
    old_lines = REAL_INI.read_text().split("\n")
    new_lines = out.read_text().split("\n")
    assert len(old_lines) == len(new_lines)
    changed = {
        i: (a, b) for i, (a, b) in enumerate(zip(old_lines, new_lines, strict=True)) if a != b
    }
    feature_line = next(i for i, line in enumerate(old_lines) if "TranslationModel0 " in line)
    weight_line = next(
        i for i, line in enumerate(old_lines) if line.startswith("TranslationModel0=")
    )
    assert set(changed) == {feature_line, weight_line}
    assert changed[feature_line][1] == (
        "PhraseDictionaryMemory name=TranslationModel0 num-features=5 "
        f"path={os.path.abspath(table)} input-factor=0 output-factor=0"
    )
    assert (
        changed[weight_line][1] == "TranslationModel0= 0.11452 0.0672427 -0.000424593 0.0192088 0.2"
    )
    again = read_ini(str(out))
    assert again.feature("TranslationModel0").num_features == 5
    assert len(again.weights()["TranslationModel0"]) == 5


def test_two_columns_take_two_weights(tmp_path: Path) -> None:
    table = scored_table(tmp_path, ("0.5", "2.71828"))
    ini = read_ini(str(REAL_INI))
    update = update_for_scored_table(ini, str(table), 6, weights=(0.1, 0.3))
    assert "TranslationModel0= 0.11452 0.0672427 -0.000424593 0.0192088 0.1 0.3\n" in update.text
    with pytest.raises(RescorerError, match=r"2 new column.*1 --new-weight"):
        update_for_scored_table(ini, str(table), 6, weights=(0.1,))


def test_refuses_a_table_without_new_columns() -> None:
    with pytest.raises(
        RescorerError,
        match=r"4 score columns, TranslationModel0 already has num-features=4: is it the scored",
    ):
        write_scored_ini(str(REAL_INI), str(SLICE), "/nonexistent/never-written.ini")


def test_rejects_a_name_mert_takes_for_sparse(tmp_path: Path) -> None:
    ini = ini_with(tmp_path, "TranslationModel0", "Translation_Model")
    with pytest.raises(RescorerError, match="sparse"):
        write_scored_ini(str(ini), str(scored_table(tmp_path)), str(tmp_path / "out.ini"))
    assert not (tmp_path / "out.ini").exists()


@pytest.mark.parametrize(
    ("kind", "command", "path"),
    [
        (
            "PhraseDictionaryCompact",
            "processPhraseTableMin -in {t} -out {b} -nscores 5",
            "{b}.minphr",
        ),
        ("PhraseDictionaryOnDisk", "CreateOnDiskPt 1 1 5 100 2 {t} {b}.folder", "{b}.folder"),
    ],
)
def test_binarised_tables_get_the_build_command(
    tmp_path: Path, kind: str, command: str, path: str
) -> None:
    ini = read_ini(str(ini_with(tmp_path, "PhraseDictionaryMemory", kind)))
    table = os.path.abspath(scored_table(tmp_path))
    update = update_for_scored_table(ini, table, 5)
    names = {"t": table, "b": table[: -len(".gz")]}
    assert update.binarize_command is not None
    assert update.binarize_command.startswith(command.format(**names))
    assert f"path={path.format(**names)} " in update.text


def test_several_tables_need_feature_name(tmp_path: Path) -> None:
    second = (
        "PhraseDictionaryMemory name=TranslationModel1 num-features=4 path=other.gz "
        "input-factor=0 output-factor=0\n"
    )
    text = REAL_INI.read_text().replace("LexicalReordering name", second + "LexicalReordering name")
    text = text.replace(
        "UnknownWordPenalty0= 1", "UnknownWordPenalty0= 1\nTranslationModel1= 1 1 1 1"
    )
    ini_path = tmp_path / "two.ini"
    ini_path.write_text(text)
    table = scored_table(tmp_path)
    with pytest.raises(RescorerError, match="--feature-name"):
        update_for_scored_table(read_ini(str(ini_path)), str(table), 5)
    update = update_for_scored_table(
        read_ini(str(ini_path)), str(table), 5, feature_name="TranslationModel1"
    )
    assert "TranslationModel1= 1 1 1 1 0.2" in update.text
    assert "TranslationModel0= 0.11452 0.0672427 -0.000424593 0.0192088\n" in update.text


def test_comments_and_crlf_survive(tmp_path: Path) -> None:
    text = REAL_INI.read_text().replace("0.0192088", "0.0192088  # tuned").replace("\n", "\r\n")
    ini_path = tmp_path / "crlf.ini"
    ini_path.write_bytes(text.encode())
    update = update_for_scored_table(read_ini(str(ini_path)), str(scored_table(tmp_path)), 5)
    assert (
        "TranslationModel0= 0.11452 0.0672427 -0.000424593 0.0192088 0.2  # tuned\r\n"
        in update.text
    )
    assert update.text.count("\r\n") == text.count("\r\n")


@pytest.mark.parametrize(
    ("old", "new", "lineno", "message"),
    [
        ("LM0= 0.111134", "LM0= 0.1x", 46, "not all numbers"),
        ("LM0= 0.111134", "LM0= nan", 46, "must be finite numbers"),
        ("LM0= 0.111134", "LM0= -inf", 46, "must be finite numbers"),
        ("LM0= 0.111134", "LM0 0.111134", 46, "expected 'Name= v1 v2 ...'"),
        ("order=5", "order", 28, "not key=value"),
        ("order=5", "order=5 factor=1", 28, "duplicate key 'factor'"),
    ],
)
def test_malformed_ini_names_file_and_line(
    tmp_path: Path, old: str, new: str, lineno: int, message: str
) -> None:
    ini_path = ini_with(tmp_path, old, new)
    with pytest.raises(InputError, match=message) as err:
        read_ini(str(ini_path))
    assert (err.value.path, err.value.lineno) == (str(ini_path), lineno)


def test_cli_moses_ini(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    table = scored_table(tmp_path)
    out = tmp_path / "new.ini"
    monkeypatch.chdir(tmp_path)
    args = ["moses-ini", str(REAL_INI), "--phrase-table", table.name, "-o", str(out)]
    result = CliRunner().invoke(cli, [*args, "--new-weight", "0.05"])
    assert result.exit_code == 0, result.output
    assert "num-features 4 -> 5" in result.stderr
    assert "0.0192088 0.05\n" in out.read_text()
    assert f" path={table} " in out.read_text()  # absolute: Moses resolves against its cwd
    bad = CliRunner().invoke(cli, [*args[:3], str(SLICE), "-o", str(tmp_path / "bad.ini")])
    assert bad.exit_code == 1 and "rescorer moses-ini: error:" in bad.stderr
    assert not (tmp_path / "bad.ini").exists()


def test_refuses_more_new_columns_than_score_adds(tmp_path: Path) -> None:
    """A reordering table (6 scores) scored by mistake has 7 columns: 3 new against the phrase
    table's 4, which rescorer score never writes (issue 14, item 4)."""
    table = scored_table(tmp_path, ("0.2", "0.3", "0.5"))
    with pytest.raises(RescorerError, match=r"3 new columns, but rescorer score adds 1"):
        write_scored_ini(str(REAL_INI), str(table), str(tmp_path / "never.ini"))
    assert not (tmp_path / "never.ini").exists()


def test_warns_when_the_second_new_column_is_not_a_word_penalty(tmp_path: Path) -> None:
    """Two new columns of probabilities: the table was scored twice, not with --word-penalty."""
    twice = write_scored_ini(
        str(REAL_INI), str(scored_table(tmp_path, ("0.5", "0.25"))), str(tmp_path / "a.ini")
    )
    assert len(twice.warnings) == 1 and "scored twice" in twice.warnings[0]
    penalty = write_scored_ini(
        str(REAL_INI), str(scored_table(tmp_path, ("0.5", "7.38906"))), str(tmp_path / "b.ini")
    )
    assert penalty.warnings == ()
