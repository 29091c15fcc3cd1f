"""moses.ini: parsing the real tuned ini, and rewriting it for a scored table."""

from __future__ import annotations

import gzip
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import DATA_DIR, MOSES, REAL_INI, TINY_SYSTEM

from rescorer.cli import cli
from rescorer.errors import InputError, RescorerError
from rescorer.io.table import read_table
from rescorer.moses.ini import read_ini, update_for_scored_table, write_scored_ini

SLICE = DATA_DIR / "pt.en-fr.slice.gz"
# The real tuned ini of a system whose files are all there (the same lines as REAL_INI but the
# file names, LM order and search limits): what moses-ini rewrites must name existing files.
TINY_INI = TINY_SYSTEM / "moses.ini"
SYSTEM_PATHS = {
    "TranslationModel0": TINY_SYSTEM / "phrase-table.gz",
    "LexicalReordering0": TINY_SYSTEM / "reordering-table.gz",
    "LM0": TINY_SYSTEM / "lm.arpa",
}


def scored_table(tmp_path: Path, extra: tuple[str, ...] = ("0.5",), lines: int = 50) -> Path:
    """A real slice with columns appended, as rescorer score writes it."""
    out = tmp_path / f"pt.{4 + len(extra)}.gz"
    with gzip.open(out, "wt", encoding="utf-8") as f:
        for i, entry in enumerate(read_table(str(SLICE))):
            if i == lines:
                break
            f.write(entry.line_with_columns(extra) + "\n")
    return out


def ini_with(tmp_path: Path, old: str, new: str, base: Path = TINY_INI) -> Path:
    """A copy of ``base`` (in tmp_path: read it with run_dir=TINY_SYSTEM) with one change."""
    path = tmp_path / "moses.ini"
    text = base.read_text()
    assert old in text
    path.write_text(text.replace(old, new))
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


def test_scored_table_changes_only_num_features_weights_and_paths(tmp_path: Path) -> None:
    table = scored_table(tmp_path)
    out = tmp_path / "new.ini"
    update = write_scored_ini(str(TINY_INI), str(table), str(out))
    assert update.num_features == 5 and update.binarize_command is None
    old_lines = TINY_INI.read_text().split("\n")
    new_lines = out.read_text().split("\n")
    assert len(old_lines) == len(new_lines)
    changed = {
        i: (a, b) for i, (a, b) in enumerate(zip(old_lines, new_lines, strict=True)) if a != b
    }
    feature_line = next(i for i, line in enumerate(old_lines) if "TranslationModel0 " in line)
    weight_line = next(
        i for i, line in enumerate(old_lines) if line.startswith("TranslationModel0=")
    )
    reordering_line = next(i for i, line in enumerate(old_lines) if "LexicalReordering " in line)
    lm_line = next(i for i, line in enumerate(old_lines) if line.startswith("KENLM "))
    assert set(changed) == {feature_line, weight_line, reordering_line, lm_line}
    assert changed[feature_line][1] == (
        "PhraseDictionaryMemory name=TranslationModel0 num-features=5 "
        f"path={os.path.abspath(table)} input-factor=0 output-factor=0"
    )
    assert (
        changed[weight_line][1] == "TranslationModel0= 0.11452 0.0672427 -0.000424593 0.0192088 0.2"
    )
    # the other paths: absolute, resolved from the ini's folder, each token else as it was
    assert changed[reordering_line][1] == changed[reordering_line][0].replace(
        "path=reordering-table.gz", f"path={SYSTEM_PATHS['LexicalReordering0']}"
    )
    assert changed[lm_line][1] == f"KENLM name=LM0 factor=0 path={SYSTEM_PATHS['LM0']} order=2"
    again = read_ini(str(out))
    assert again.feature("TranslationModel0").num_features == 5
    assert len(again.weights()["TranslationModel0"]) == 5


def test_two_columns_take_two_weights(tmp_path: Path) -> None:
    table = scored_table(tmp_path, ("0.5", "2.71828"))
    ini = read_ini(str(TINY_INI))
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
    ini = read_ini(str(ini_with(tmp_path, "PhraseDictionaryMemory", kind)), str(TINY_SYSTEM))
    table = os.path.abspath(scored_table(tmp_path))
    update = update_for_scored_table(ini, table, 5)
    names = {"t": table, "b": table[: -len(".gz")]}
    assert update.binarize_command is not None
    assert update.binarize_command.startswith(command.format(**names))
    assert f"path={path.format(**names)} " in update.text


def test_several_tables_need_feature_name(tmp_path: Path) -> None:
    second = (
        "PhraseDictionaryMemory name=TranslationModel1 num-features=4 path=phrase-table.gz "
        "input-factor=0 output-factor=0\n"
    )
    text = TINY_INI.read_text().replace("LexicalReordering name", second + "LexicalReordering name")
    text = text.replace(
        "UnknownWordPenalty0= 1", "UnknownWordPenalty0= 1\nTranslationModel1= 1 1 1 1"
    )
    ini_path = tmp_path / "two.ini"
    ini_path.write_text(text)
    table = scored_table(tmp_path)
    ini = read_ini(str(ini_path), str(TINY_SYSTEM))
    with pytest.raises(RescorerError, match="--feature-name"):
        update_for_scored_table(ini, str(table), 5)
    update = update_for_scored_table(ini, str(table), 5, feature_name="TranslationModel1")
    assert "TranslationModel1= 1 1 1 1 0.2" in update.text
    assert "TranslationModel0= 0.11452 0.0672427 -0.000424593 0.0192088\n" in update.text


def test_comments_and_crlf_survive(tmp_path: Path) -> None:
    text = TINY_INI.read_text().replace("0.0192088", "0.0192088  # tuned").replace("\n", "\r\n")
    ini_path = tmp_path / "crlf.ini"
    ini_path.write_bytes(text.encode())
    ini = read_ini(str(ini_path), str(TINY_SYSTEM))
    update = update_for_scored_table(ini, str(scored_table(tmp_path)), 5)
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
    ini_path = ini_with(tmp_path, old, new, base=REAL_INI)
    with pytest.raises(InputError, match=message) as err:
        read_ini(str(ini_path))
    assert (err.value.path, err.value.lineno) == (str(ini_path), lineno)


def test_cli_moses_ini(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    table = scored_table(tmp_path)
    out = tmp_path / "new.ini"
    monkeypatch.chdir(tmp_path)
    args = ["moses-ini", str(TINY_INI), "--phrase-table", table.name, "-o", str(out)]
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
        str(TINY_INI), str(scored_table(tmp_path, ("0.5", "0.25"))), str(tmp_path / "a.ini")
    )
    assert len(twice.warnings) == 1 and "scored twice" in twice.warnings[0]
    penalty = write_scored_ini(
        str(TINY_INI), str(scored_table(tmp_path, ("0.5", "7.38906"))), str(tmp_path / "b.ini")
    )
    assert penalty.warnings == ()


def test_refuses_a_reordering_table_as_score_and_train_do(tmp_path: Path) -> None:
    """An unscored msd reordering table has 6 columns, 2 more than the ini's 4: it was taken
    for a table scored with --word-penalty, with a warning (issue 27, item 2)."""
    table = TINY_SYSTEM / "reordering-table.gz"
    with pytest.raises(RescorerError, match=r"is a lexicalised reordering table \(6 scores"):
        write_scored_ini(str(REAL_INI), str(table), str(tmp_path / "never.ini"))
    assert not (tmp_path / "never.ini").exists()


# ------------------------------------------------- an ini that runs anywhere (issue 27, item 1)
def scored_tiny_table(tmp_path: Path) -> Path:
    """The tiny system's table with a fifth column, as rescorer score writes one."""
    out = tmp_path / "phrase-table.rnn.gz"
    with gzip.open(out, "wt", encoding="utf-8") as f:
        for i, entry in enumerate(read_table(str(TINY_SYSTEM / "phrase-table.gz"))):
            f.write(entry.line_with_columns([f"{0.1 + 0.8 * (i % 7) / 7:g}"]) + "\n")
    return out


def moses_ini(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["moses-ini", *args])
    return result.exit_code, result.stderr


@pytest.mark.skipif(
    not (MOSES / "bin" / "moses").exists(),
    reason=f"the real Moses decoder is not at {MOSES} (../shared/tools/moses)",
)
def test_the_new_ini_decodes_with_the_real_moses_from_another_folder(tmp_path: Path) -> None:
    """The ini moses-ini wrote named the LM and the reordering table relative to the
    system's folder: Moses run from elsewhere died on them."""
    table = scored_tiny_table(tmp_path)
    new_ini = tmp_path / "out" / "moses.rnn.ini"
    new_ini.parent.mkdir()
    code, stderr = moses_ini(str(TINY_INI), "--phrase-table", str(table), "-o", str(new_ini))
    assert code == 0, stderr
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    source = "".join((TINY_SYSTEM / "test.en").read_text().splitlines(keepends=True)[:3])
    proc = subprocess.run(
        [str(MOSES / "bin" / "moses"), "-f", str(new_ini), "-v", "0", "-threads", "1"],
        input=source, capture_output=True, text=True, cwd=elsewhere, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert len(proc.stdout.splitlines()) == 3 and all(proc.stdout.splitlines())


def test_a_copy_of_the_ini_needs_the_run_dir(tmp_path: Path) -> None:
    """An ini kept apart from its system (mert-work/moses.ini, a copy): its relative paths
    name files beside it that are not there: refused, naming the feature, unless --run-dir
    names the folder Moses runs it from."""
    copy = tmp_path / "mert-work" / "moses.ini"
    copy.parent.mkdir()
    shutil.copy(TINY_INI, copy)
    table, out = scored_tiny_table(tmp_path), tmp_path / "new.ini"
    code, stderr = moses_ini(str(copy), "--phrase-table", str(table), "-o", str(out))
    assert code == 1 and not out.exists()
    assert stderr.startswith(
        f"rescorer moses-ini: error: {copy}:26: LexicalReordering0 (LexicalReordering) names "
        f"{copy.parent / 'reordering-table.gz'}, which does not exist (path=reordering-table.gz "
        f"taken relative to {copy.parent}, the folder Moses is meant to run in"
    )
    args = [str(copy), "--phrase-table", str(table), "-o", str(out)]
    code, stderr = moses_ini(*args, "--run-dir", str(TINY_SYSTEM))
    assert code == 0, stderr
    new = read_ini(str(out), run_dir=str(tmp_path / "mert-work"))  # any folder: all absolute
    for name, path in SYSTEM_PATHS.items():
        want = table if name == "TranslationModel0" else path
        assert new.feature(name).get("path") == str(want)
        assert new.resolve(new.feature(name).get("path") or "") == str(want)


def test_an_absolute_path_that_does_not_exist_is_named(tmp_path: Path) -> None:
    ini = ini_with(tmp_path, "path=lm.arpa", "path=/nonexistent/lm.arpa")
    out = tmp_path / "new.ini"
    code, stderr = moses_ini(str(ini), "--phrase-table", str(scored_tiny_table(tmp_path)),
                             "-o", str(out), "--run-dir", str(TINY_SYSTEM))  # fmt: skip
    assert code == 1 and not out.exists()
    assert stderr == (
        f"rescorer moses-ini: error: {ini}:28: LM0 (KENLM) names /nonexistent/lm.arpa, which "
        "does not exist\n"
    )


def test_moses_finds_a_reordering_table_without_its_gz(tmp_path: Path) -> None:
    """LexicalReordering's path= may leave out .gz (LexicalReorderingTable.cpp:166-167)."""
    ini = ini_with(tmp_path, "path=reordering-table.gz", "path=reordering-table")
    out = tmp_path / "new.ini"
    code, stderr = moses_ini(str(ini), "--phrase-table", str(scored_tiny_table(tmp_path)),
                             "-o", str(out), "--run-dir", str(TINY_SYSTEM))  # fmt: skip
    assert code == 0, stderr
    assert f"path={TINY_SYSTEM / 'reordering-table'}\n" in out.read_text()


# ------------------------------------------------------------ item 9: what moses-ini is given
def test_a_gzip_ini_is_read_as_moses_reads_it(tmp_path: Path) -> None:
    """Moses decompresses a config named .gz (InputFileStream); moses-ini said "invalid
    UTF-8". Gzip data under another name, which Moses reads as text, is named as such."""
    table, out = scored_tiny_table(tmp_path), tmp_path / "new.ini"
    packed = tmp_path / "moses.ini.gz"
    packed.write_bytes(gzip.compress(TINY_INI.read_bytes()))
    args = ["--phrase-table", str(table), "--run-dir", str(TINY_SYSTEM)]
    code, stderr = moses_ini(str(packed), *args, "-o", str(out))
    assert code == 0, stderr
    plain = tmp_path / "plain.ini"
    assert moses_ini(str(TINY_INI), *args, "-o", str(plain))[0] == 0
    assert out.read_text() == plain.read_text()
    misnamed = tmp_path / "moses.ini"
    misnamed.write_bytes(packed.read_bytes())
    code, stderr = moses_ini(str(misnamed), *args, "-o", str(tmp_path / "never.ini"))
    assert code == 1 and not (tmp_path / "never.ini").exists()
    assert stderr == (
        f"rescorer moses-ini: error: {misnamed}: gzip data, expected a plain-text moses.ini (Moses "
        "decompresses a config only when its name ends in .gz)\n"
    )


def test_the_output_may_not_be_an_input(tmp_path: Path) -> None:
    """-o equal to INI overwrote the original (score refuses its own input as -o)."""
    ini = tmp_path / "moses.ini"
    shutil.copy(TINY_INI, ini)
    table = scored_tiny_table(tmp_path)
    link = tmp_path / "link.ini"
    link.symlink_to(ini)
    args = ["--phrase-table", str(table), "--run-dir", str(TINY_SYSTEM)]
    for out in (ini, link, tmp_path / "." / "moses.ini"):
        code, stderr = moses_ini(str(ini), *args, "-o", str(out))
        assert code == 1 and f"-o {out} is INI itself" in stderr
    code, stderr = moses_ini(str(ini), *args, "-o", str(table))
    assert code == 1 and f"-o {table} is --phrase-table itself" in stderr
    assert ini.read_bytes() == TINY_INI.read_bytes() and link.is_symlink()
