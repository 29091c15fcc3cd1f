"""moses.ini: parsing the real tuned ini, and rewriting it for a scored table."""

from __future__ import annotations

import gzip
import json
import math
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import DATA_DIR, MOSES, REAL_INI, TINY_SYSTEM

from rescorer.cli import cli
from rescorer.errors import InputError, RescorerError
from rescorer.io.table import format_prob, read_table
from rescorer.moses.added_columns import CHECK_LINES
from rescorer.moses.ini import read_ini
from rescorer.moses.ini_rewrite import (
    update_for_scored_table,
    with_start_weights,
    write_scored_ini,
)
from rescorer.score.models import already_scored

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
        changed[weight_line][1]
        == "TranslationModel0= 0.11452 0.0672427 -0.000424593 0.0192088 0.0432"
    )
    # the other paths: absolute, resolved from the ini's folder, each token else as it was
    assert changed[reordering_line][1] == changed[reordering_line][0].replace(
        "path=reordering-table.gz", f"path={SYSTEM_PATHS['LexicalReordering0']}"
    )
    assert changed[lm_line][1] == f"KENLM name=LM0 factor=0 path={SYSTEM_PATHS['LM0']} order=2"
    again = read_ini(str(out))
    assert again.feature("TranslationModel0").num_features == 5
    assert len(again.weights()["TranslationModel0"]) == 5


def test_the_new_weight_is_derived_from_the_tuned_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 39, item 4: every new column started at 0.2 against tuned weights of 0.005-0.13,
    and decoding before re-tuning lost 15 BLEU (44.63 against 59.49 with 0.02). The default is
    now the median magnitude of the feature's own weights, said on stderr; --new-weight still
    chooses; a feature whose weights are all 0 keeps 0.2 (mert cannot start from all zeros)."""
    table = scored_table(tmp_path, ("0.5", "7.38906"))
    out = tmp_path / "new.ini"
    monkeypatch.chdir(tmp_path)
    args = ["moses-ini", str(TINY_INI), "--phrase-table", table.name, "-o", str(out)]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert "0.0192088 0.0432 0.0432\n" in out.read_text()  # median of |0.11452| ... |0.0192088|
    assert (
        "rescorer moses-ini: new weight 0.0432 (the median magnitude of TranslationModel0's 4 "
        "non-zero weights; --new-weight to choose)"
    ) in result.stderr
    chosen = CliRunner().invoke(cli, [*args[:-1], str(tmp_path / "c.ini"), "--new-weight", "0.2"])
    assert chosen.exit_code == 0 and "new weight" not in chosen.stderr
    assert "0.0192088 0.2 0.2\n" in (tmp_path / "c.ini").read_text()
    zero = ini_with(tmp_path, "0.11452 0.0672427 -0.000424593 0.0192088", "0 0 0 0")
    update = update_for_scored_table(read_ini(str(zero), str(TINY_SYSTEM)), str(table), 6)
    assert "TranslationModel0= 0 0 0 0 0.2 0.2\n" in update.text
    assert "weights are all 0" in update.note


def test_two_columns_take_two_weights(tmp_path: Path) -> None:
    table = scored_table(tmp_path, ("0.5", "2.71828"))
    ini = read_ini(str(TINY_INI))
    update = update_for_scored_table(ini, str(table), 6, weights=(0.1, 0.3))
    assert "TranslationModel0= 0.11452 0.0672427 -0.000424593 0.0192088 0.1 0.3\n" in update.text
    one_for_all = update_for_scored_table(ini, str(table), 6, weights=(0.05,))
    assert "0.0192088 0.05 0.05\n" in one_for_all.text
    with pytest.raises(RescorerError, match=r"2 new column.*3 --new-weight values"):
        update_for_scored_table(ini, str(table), 6, weights=(0.1, 0.2, 0.3))


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
    assert "TranslationModel1= 1 1 1 1 1\n" in update.text  # its own weights' median
    assert "TranslationModel0= 0.11452 0.0672427 -0.000424593 0.0192088\n" in update.text


def test_comments_and_crlf_survive(tmp_path: Path) -> None:
    text = TINY_INI.read_text().replace("0.0192088", "0.0192088  # tuned").replace("\n", "\r\n")
    ini_path = tmp_path / "crlf.ini"
    ini_path.write_bytes(text.encode())
    ini = read_ini(str(ini_path), str(TINY_SYSTEM))
    update = update_for_scored_table(ini, str(scored_table(tmp_path)), 5)
    assert (
        "TranslationModel0= 0.11452 0.0672427 -0.000424593 0.0192088 0.0432  # tuned\r\n"
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


@pytest.mark.parametrize(
    ("extra", "described"),
    [
        (("0.5",), "1 model"),
        (("0.5", "7.38906"), "1 model + word penalty"),
        (("0.5", "0.25"), "2 models"),
        (("0.5", "0.25", "2.71828"), "2 models + word penalty"),
        (("0.5", "0.25", "0.125", "1"), "3 models + word penalty"),
    ],
)
def test_the_counts_say_what_the_new_columns_are(
    tmp_path: Path, extra: tuple[str, ...], described: str
) -> None:
    """Without a manifest: a column per model, the last one the word penalty if it is e^k."""
    out = tmp_path / "new.ini"
    update = write_scored_ini(str(TINY_INI), str(scored_table(tmp_path, extra)), str(out))
    assert update.added is not None and update.added.describe() == described
    assert update.warnings == ()
    assert f"0.0192088{' 0.0432' * len(extra)}\n" in out.read_text()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        # one model + WP, scored again with one model + WP
        (("0.5", "7.38906", "0.25", "7.38906"), r"column 2 of 4 \(score 6\) is exp"),
        # one model scored twice: the same column twice
        (("0.5", "0.5"), r"new columns 1 and 2 are equal on the first 50 lines"),
        # a reordering table's scores are not what score writes either: 3 new probabilities
        # could be 3 models, but a value above 1 outside the last column is no model's
        (("0.5", "1.5", "0.3"), r"column 2 of 3 \(score 6\) has values above 1"),
        (("3.5",), r"column 1 of 1 \(score 5\) has values above 1"),
    ],
)
def test_refuses_a_table_scored_twice(tmp_path: Path, extra: tuple[str, ...], message: str) -> None:
    with pytest.raises(RescorerError, match=message):
        write_scored_ini(str(TINY_INI), str(scored_table(tmp_path, extra)), str(tmp_path / "x"))
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize(
    ("shift", "same"), [(0.0, True), (3e-6, True), (1.5e-4, True), (3e-3, False)]
)
def test_score_warns_of_a_column_exactly_when_moses_ini_refuses_it(
    tmp_path: Path, shift: float, same: bool
) -> None:
    """Issue 64, item 3: score warned "moses-ini refuses a table scored twice" (its columns
    within 2e-4 in ln) and moses-ini then took the twice-scored table as two models (its
    columns compared exactly: 0.000218863 against 0.000218862). One rule decides both now: a
    table scored once (column 5), scored again by a run whose log p is ``shift`` away."""
    rng = np.random.default_rng(0)
    logp = rng.uniform(-30.0, 0.0, size=CHECK_LINES)  # the first run's log p
    once, twice = [], []  # the table after one run, and after the second
    for i, entry in enumerate(read_table(str(SLICE))):
        if i == CHECK_LINES:
            break
        once.append(entry.line_with_columns([format_prob(logp[i])]))
        twice.append(entry.line_with_columns([format_prob(logp[i]), format_prob(logp[i] + shift)]))
    table = tmp_path / "pt.twice.gz"
    table.write_bytes(gzip.compress(("\n".join(twice) + "\n").encode("utf-8")))
    said = already_scored("pt.once.gz", [line.encode() for line in once], logp + shift)
    ini = tmp_path / "x.ini"
    result = CliRunner().invoke(
        cli, ["moses-ini", str(TINY_INI), "--phrase-table", str(table), "-o", str(ini)]
    )
    assert (said is not None) == same
    assert (result.exit_code == 1) == same, result.stderr
    if same:
        assert "moses-ini refuses a table scored twice" in str(said)
        assert "new columns 1 and 2 are equal on the first 1,000 lines" in result.stderr
    else:
        assert "4 -> 6 (2 models)" in result.stderr


def test_a_shard_manifest_states_the_count(tmp_path: Path) -> None:
    """A shard's manifest names its models and --word-penalty: the columns must add up."""
    table = scored_table(tmp_path, ("0.5", "0.25", "7.38906"))
    manifest = Path(str(table) + ".manifest.json")
    manifest.write_text(
        json.dumps({"model": {"sha256": ["a", "b"]}, "options": {"word_penalty": True}})
    )
    update = write_scored_ini(str(TINY_INI), str(table), str(tmp_path / "ok.ini"))
    assert update.added is not None and update.added.describe() == "2 models + word penalty"
    manifest.write_text(json.dumps({"model": {"sha256": "a"}, "options": {"word_penalty": True}}))
    with pytest.raises(RescorerError, match=r"says the run added 2 \(1 model \+ word penalty\)"):
        write_scored_ini(str(TINY_INI), str(table), str(tmp_path / "never.ini"))
    assert not (tmp_path / "never.ini").exists()


def test_refuses_a_reordering_table_as_score_and_train_do(tmp_path: Path) -> None:
    """An unscored msd reordering table has 6 columns, 2 more than the ini's 4: it was taken
    for a table scored with --word-penalty, with a warning (issue 27, item 2)."""
    table = TINY_SYSTEM / "reordering-table.gz"
    with pytest.raises(RescorerError, match=r"is a lexicalised reordering table \(6 scores"):
        write_scored_ini(str(TINY_INI), str(table), str(tmp_path / "never.ini"))
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


def test_an_unfinished_run_to_the_table_is_a_warning(tmp_path: Path) -> None:
    table = scored_table(tmp_path)
    Path(str(table) + ".partial.json").write_text("{}")
    update = write_scored_ini(str(TINY_INI), str(table), str(tmp_path / "new.ini"))
    assert len(update.warnings) == 1 and "has not finished" in update.warnings[0]


# ------------------------------------- the real Moses decoder reads 6 and 7 scores (issue 24)
def scored_tiny_system(tmp_path: Path, extra: int, word_penalty: bool) -> Path:
    """A copy of the tiny system whose table has ``extra`` model columns (distinct
    probabilities) and, with ``word_penalty``, e^k after them, as rescorer score writes it."""
    system = tmp_path / "system"
    shutil.copytree(TINY_SYSTEM, system)
    table = system / "phrase-table.rnn.gz"
    with gzip.open(table, "wt", encoding="utf-8") as f:
        for i, entry in enumerate(read_table(str(TINY_SYSTEM / "phrase-table.gz"))):
            columns = [f"{0.1 + 0.8 * ((i + 3 * m) % 7) / 7:g}" for m in range(extra)]
            if word_penalty:
                columns.append(f"{math.exp(i % 3):g}")
            f.write(entry.line_with_columns(columns) + "\n")
    return table


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
        assert code == 1 and f"-o {out} is the INI" in stderr
    code, stderr = moses_ini(str(ini), *args, "-o", str(table))
    assert code == 1 and f"-o {table} is the --phrase-table" in stderr
    assert ini.read_bytes() == TINY_INI.read_bytes() and link.is_symlink()


@pytest.mark.parametrize(("word_penalty", "scores"), [(False, 6), (True, 7)])
def test_moses_decodes_two_models_through_the_new_ini(
    tmp_path: Path, word_penalty: bool, scores: int
) -> None:
    table = scored_tiny_system(tmp_path, 2, word_penalty)
    system = table.parent
    new_ini = system / "moses.rnn.ini"
    args = ["moses-ini", str(system / "moses.ini"), "--phrase-table", str(table)]
    result = CliRunner().invoke(cli, [*args, "-o", str(new_ini), "--new-weight", "0.05"])
    assert result.exit_code == 0, result.output
    assert f"num-features 4 -> {scores} (2 models" in result.stderr
    assert f"num-features={scores} " in new_ini.read_text()
    assert f"0.0192088{' 0.05' * (scores - 4)}\n" in new_ini.read_text()
    source = "".join((system / "test.en").read_text().splitlines(keepends=True)[:3])
    nbest = system / "n.nbest"
    proc = subprocess.run(
        [str(MOSES / "bin" / "moses"), "-f", str(new_ini), "-v", "0", "-threads", "1",
         "-n-best-list", str(nbest), "2"],
        input=source, capture_output=True, text=True, cwd=system, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert len(proc.stdout.splitlines()) == 3 and all(proc.stdout.splitlines())
    # Moses prints the table's scores under its name, all of them, the new ones last
    first = nbest.read_text().splitlines()[0].split(" ||| ")[2].split()
    at = first.index("TranslationModel0=")
    assert len(first[at + 1 : at + 1 + scores]) == scores
    assert all(not v.endswith("=") for v in first[at + 1 : at + 1 + scores])


UNTUNED = """[weight]
UnknownWordPenalty0= 1
WordPenalty0= -1
PhrasePenalty0= 0.2
TranslationModel0= 0.2 0.2 0.2 0.2
LexicalReordering0= 0.3 0.3 0.3 0.3 0.3 0.3
Distortion0= 0.3
LM0= 0.5
"""  # train-model.perl's starting weights, as it writes them


def test_start_weights_replace_every_weight_and_nothing_else(tmp_path: Path) -> None:
    start = tmp_path / "untuned.ini"
    start.write_text(UNTUNED, encoding="utf-8")
    ini = read_ini(str(TINY_INI))
    text = with_start_weights(ini, read_ini(str(start)))
    out = tmp_path / "moses.ini"
    out.write_text(text, encoding="utf-8")
    assert read_ini(str(out)).weights() == read_ini(str(start)).weights()
    assert read_ini(str(out)).weights()["TranslationModel0"] == (0.2, 0.2, 0.2, 0.2)
    weight_lines = {w.lineno for w in ini.weight_lines}
    kept = [line for i, line in enumerate(ini.lines, 1) if i not in weight_lines]
    assert [line for line in text.splitlines(keepends=True) if line in kept] == kept
    assert len(text.splitlines()) == len(ini.lines)


def test_start_weights_must_weigh_every_feature_alike(tmp_path: Path) -> None:
    start = tmp_path / "untuned.ini"
    start.write_text(UNTUNED.replace("LM0= 0.5\n", ""), encoding="utf-8")
    lm_line = read_ini(str(TINY_INI)).weight_line("LM0").lineno
    with pytest.raises(RescorerError, match=rf"moses.ini:{lm_line}: LM0 has no 'LM0=' line in "):
        with_start_weights(read_ini(str(TINY_INI)), read_ini(str(start)))
    start.write_text(UNTUNED.replace("Distortion0= 0.3", "Distortion0= 0.3 0.1"), "utf-8")
    with pytest.raises(RescorerError, match=r"Distortion0 has 1 weights, .*untuned.ini:7 has 2"):
        with_start_weights(read_ini(str(TINY_INI)), read_ini(str(start)))


def test_start_weights_keep_crlf_endings_and_refuse_two_lines_in_the_start(tmp_path: Path) -> None:
    """A CRLF ini stays CRLF where its weights are replaced; a start ini with two lines for a
    feature (Moses takes the last) is refused, naming both, as moses-ini refuses them."""
    crlf = tmp_path / "crlf.ini"
    crlf.write_bytes(TINY_INI.read_bytes().replace(b"\n", b"\r\n"))
    start = tmp_path / "untuned.ini"
    start.write_text(UNTUNED, encoding="utf-8")
    text = with_start_weights(read_ini(str(crlf)), read_ini(str(start)))
    assert "\r\n" in text and text.count("\n") == text.count("\r\n")
    assert "LM0= 0.5\r\n" in text
    start.write_text(UNTUNED + "LM0= 0.4\n", encoding="utf-8")
    with pytest.raises(RescorerError, match=r"untuned.ini:8 and .*untuned.ini:9: 2 'LM0='"):
        with_start_weights(read_ini(str(crlf)), read_ini(str(start)))


# ------------------------------ moses-ini --second-table (issue 58 item 7, issue 59 item 4)
def real_ini_copy(folder: Path) -> Path:
    """The real tuned en-fr ini (TranslationModel0= 0.11452 0.0672427 -0.000424593 0.0192088)
    in ``folder``, its three files links to the tiny system's."""
    folder.mkdir(parents=True, exist_ok=True)
    ini = folder / "moses.ini"
    shutil.copy(REAL_INI, ini)
    for name, target in (
        ("phrase-table.gz", "phrase-table.gz"),
        ("reordering-table.wbe-msd-bidirectional-fe.gz", "reordering-table.gz"),
        ("lm.fr.binary", "lm.arpa"),
    ):
        (folder / name).symlink_to(TINY_SYSTEM / target)
    return ini


def second_table(
    folder: Path, last: tuple[str, ...] = ("2.718", "2.718"), name: str = "new.txt"
) -> Path:
    """A table as extend --form second-table writes it: two models' p, then 2.718 (or
    ``last``'s values, line by line)."""
    table = folder / name
    table.parent.mkdir(parents=True, exist_ok=True)
    table.write_text(
        "".join(
            f"a{i} ||| b ||| 0.5 0.25 {v} |||  ||| 0 0 0 ||| |||\n" for i, v in enumerate(last)
        ),
        encoding="utf-8",
    )
    return table


def test_second_table_weights_derive_from_the_first_tables_tuned_ones(tmp_path: Path) -> None:
    """Every new weight was 0.2 against tuned weights of 0.0004-0.115: Moses used none of the new
    pairs before tuning. Now the median magnitude of TranslationModel0's (0.0432, as moses-ini
    --phrase-table derives a new column's), and the constant 2.718 column (ln = 1 for every pair
    of the second table) gets -0.0432: a cost per new pair used."""
    ini = real_ini_copy(tmp_path / "system")
    out = tmp_path / "2t.ini"
    code, said = moses_ini(str(ini), "--second-table", str(second_table(tmp_path)), "-o", str(out))
    assert code == 0, said
    assert read_ini(str(out)).weights()["TranslationModel1"] == (0.0432, 0.0432, -0.0432)
    assert "median magnitude of TranslationModel0's 4 non-zero weights" in said
    assert "-0.0432 for the last column" in said, said
    code, said = moses_ini(str(ini), "--second-table", str(second_table(tmp_path)), "-o",
                           str(out), "--new-weight", "0.1")  # fmt: skip
    assert code == 0 and read_ini(str(out)).weights()["TranslationModel1"] == (0.1, 0.1, 0.1)


def test_a_fill_ups_provenance_column_starts_as_a_cost(tmp_path: Path) -> None:
    """A fill-up's provenance column (1 for the table's pairs, 2.718 for the new ones: ln = 0
    or 1) got +0.0432, a bonus per new pair; now -0.0432, and the message says which sign."""
    ini = real_ini_copy(tmp_path / "system")
    table = tmp_path / "fill.gz"
    with gzip.open(table, "wt", encoding="utf-8") as f:
        for i, entry in enumerate(read_table(str(SLICE))):
            if i == 50:
                break
            f.write(entry.line_with_columns(("0.5", "2.718" if i % 7 == 3 else "1")) + "\n")
    out = tmp_path / "fill.ini"
    code, said = moses_ini(str(ini), "--phrase-table", str(table), "-o", str(out))
    assert code == 0, said
    weights = read_ini(str(out)).weights()["TranslationModel0"]
    assert weights[4:] == (0.0432, -0.0432)
    assert "-0.0432 for the provenance column" in said, said


@pytest.mark.parametrize("flag", ["--second-table", "--phrase-table"])
def test_a_path_with_a_space_is_refused_as_moses_cannot_read_it(tmp_path: Path, flag: str) -> None:
    """The real Moses splits a feature line at spaces, quoted or not: 'Incorrect format for
    feature function arg: ace/pt.gz' (FeatureFunction::ParseLine); the ini was written."""
    ini = real_ini_copy(tmp_path / "system")
    if flag == "--second-table":
        table = second_table(tmp_path / "new pairs")
    else:
        table = tmp_path / "scored tables" / "pt.5.gz"
        table.parent.mkdir()
        shutil.copy(scored_table(tmp_path), table)
    out = tmp_path / "x.ini"
    code, said = moses_ini(str(ini), flag, str(table), "-o", str(out))
    assert code == 1 and not out.exists()
    assert said.strip().splitlines()[-1].startswith("rescorer moses-ini: error: ")
    assert f"{table.resolve()}" in said and "has a space" in said and "Moses" in said, said


def test_an_ini_folder_with_a_space_is_refused_too(tmp_path: Path) -> None:
    """Relative paths made absolute from a folder with a space in its name: Moses could not read
    them either."""
    ini = real_ini_copy(tmp_path / "my system")
    out = tmp_path / "x.ini"
    code, said = moses_ini(str(ini), "--second-table", str(second_table(tmp_path)), "-o", str(out))
    assert code == 1 and not out.exists()
    assert "has a space" in said and "my system" in said, said


def test_a_fill_up_table_is_refused_as_a_second_table(tmp_path: Path) -> None:
    """A fill-up (its last column 1 for the table's pairs, 2.718 for new ones) holds the first
    table's pairs too: beside it, every pair would be there twice."""
    ini = real_ini_copy(tmp_path / "system")
    table = second_table(tmp_path, last=("1", "1", "2.718", "1"))
    out = tmp_path / "x.ini"
    code, said = moses_ini(str(ini), "--second-table", str(table), "-o", str(out))
    assert code == 1 and not out.exists()
    assert "a fill-up" in said and "--phrase-table" in said and "--form second-table" in said, said


def test_a_second_table_needs_an_ini_whose_weights_match_num_features(tmp_path: Path) -> None:
    """num-features=5 with 4 weights went through to an ini Moses stops on ('Mismatch in number
    of features and number of weights')."""
    ini = real_ini_copy(tmp_path / "system")
    ini.write_text(
        ini.read_text().replace("num-features=4 path=phrase", "num-features=5 path=phrase")
    )
    out = tmp_path / "x.ini"
    code, said = moses_ini(str(ini), "--second-table", str(second_table(tmp_path)), "-o", str(out))
    assert code == 1 and not out.exists()
    lineno = next(
        n
        for n, line in enumerate(ini.read_text().splitlines(), 1)
        if line.startswith("TranslationModel0=")
    )
    assert f"{ini}:{lineno}: TranslationModel0 has 4 weights but num-features=5" in said, said
