"""The log-linear combiner: Moses' table-limit score of a phrase pair, by hand and by file."""

from __future__ import annotations

import gzip
import math
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import DATA_DIR, REAL_INI, REAL_LM, TINY_ARPA, TINY_SYSTEM

from rescorer.cli import cli
from rescorer.errors import InputError, RescorerError
from rescorer.io.table import parse_line, read_table
from rescorer.moses.combine import Combiner, CombinerConfig, build_config, parse_weight_option
from rescorer.moses.ini import read_ini

# A dependency of rescorer's, but absent where the suite runs on a borrowed GPU machine.
kenlm = pytest.importorskip("kenlm", reason="the kenlm module is not installed")

SLICE = DATA_DIR / "pt.en-fr.slice.gz"

# The real ini's tuned weights, copied by hand from tests/data/en-fr.moses.ini.
TM = (0.11452, 0.0672427, -0.000424593, 0.0192088)
WORD_PENALTY = -0.0919745
PHRASE_PENALTY = 0.0125348
LM_WEIGHT = 0.111134

REAL_LINES = [
    "! ! ! ||| ! ! ! ||| 1 0.930901 1 0.705736 ||| 0-0 1-1 2-2 ||| 1 1 1 ||| |||",
    "element &lt; % s &gt; ||| l&apos; élément &lt; % s &gt; ||| 0.25 0.245472 0.2 0.0397755 "
    "||| 0-0 0-1 1-2 2-3 3-4 4-5 ||| 4 5 1 ||| |||",
    "reliable ; no check ||| fiable . aucun contrôle ||| 1 7.33672e-06 1 7.55032e-05 "
    "||| 0-0 1-1 2-2 3-3 ||| 1 1 1 ||| |||",
]


def entry(line: str, lineno: int = 1):  # type: ignore[no-untyped-def]
    parsed = parse_line(line, lineno)
    assert not isinstance(parsed, str), parsed
    return parsed


def by_hand(line: str, lm_log10: float = 0.0) -> float:
    scores = [float(v) for v in line.split(" ||| ")[2].split()]
    n_words = len(line.split(" ||| ")[1].split())
    return (
        sum(w * math.log(v) for w, v in zip(TM, scores, strict=True))
        + WORD_PENALTY * -n_words
        + PHRASE_PENALTY
        + LM_WEIGHT * lm_log10 * math.log(10)
    )


def test_parse_weight_option() -> None:
    assert parse_weight_option("TranslationModel0=0.1,-0.2,3e-4") == (
        "TranslationModel0",
        (0.1, -0.2, 3e-4),
    )
    for bad in ("TM0", "TM0=", "=1", "TM0=1,x", "TM0=nan"):
        with pytest.raises(RescorerError, match="expected NAME=v1,v2"):
            parse_weight_option(bad)


def test_real_lines_without_lm_equal_hand_computation() -> None:
    config = build_config(read_ini(str(REAL_INI)), [], 4, use_lm=False)
    assert config == CombinerConfig("TranslationModel0", TM, WORD_PENALTY, PHRASE_PENALTY, ())
    combiner = Combiner(config)
    for line in REAL_LINES:
        assert combiner.score(entry(line)) == pytest.approx(by_hand(line), rel=1e-12)


@pytest.mark.skipif(not REAL_LM.exists(), reason="needs ../shared/data/en-fr/lm.fr.binary")
def test_real_lines_with_real_lm_equal_hand_computation() -> None:
    config = build_config(read_ini(str(REAL_INI)), [], 4, lm_path=str(REAL_LM))
    combiner = Combiner(config)
    model = kenlm.Model(str(REAL_LM))
    for line in REAL_LINES:
        target = line.split(" ||| ")[1]
        lm_log10 = sum(s for s, _, _ in model.full_scores(target, bos=False, eos=False))
        assert combiner.score(entry(line)) == pytest.approx(
            by_hand(line, lm_log10), rel=1e-6
        )  # kenlm sums in float32


def test_tiny_lm_and_overrides_by_hand() -> None:
    overrides = [parse_weight_option("TranslationModel0=1,0,0.5,0"), ("LM0", (2.0,))]
    config = build_config(read_ini(str(REAL_INI)), overrides, 4, lm_path=str(TINY_ARPA))
    line = "x y ||| a b c ||| 0.5 0.25 0 1e-50 ||| 0-0 1-1 ||| 1 1 1 ||| |||"
    # ln 0.5 + 0.5 * (ln 0 floored to -100); 3 words; LM: p(a) p(b|a) p(c|a b) from tiny.arpa
    expected = (
        math.log(0.5)
        + 0.5 * -100.0
        + WORD_PENALTY * -3
        + PHRASE_PENALTY
        + 2.0 * (-0.6 - 0.2 - 0.05) * math.log(10)
    )
    assert Combiner(config).score(entry(line)) == pytest.approx(expected, rel=1e-6)


def test_weights_without_ini() -> None:
    overrides = [("TranslationModel0", (1.0, 1.0, 1.0, 1.0)), ("WordPenalty0", (-1.0,))]
    config = build_config(None, overrides, 4)
    assert (config.word_penalty, config.phrase_penalty, config.lms) == (-1.0, 0.0, ())
    with pytest.raises(RescorerError, match="no such feature"):
        build_config(None, [("TranslatoinModel0", (1.0,) * 4)], 4)
    with pytest.raises(RescorerError, match="5 score columns but TranslationModel0 has 4"):
        build_config(read_ini(str(REAL_INI)), [], 5)


def test_negative_column_names_the_line() -> None:
    config = build_config(read_ini(str(REAL_INI)), [], 4, use_lm=False)
    bad = entry("a ||| b ||| 0.5 -0.1 0.5 0.5", lineno=7)
    with pytest.raises(InputError, match=r"score column 1 is -0\.1") as err:
        Combiner(config, "pt.gz").score(bad)
    assert (err.value.path, err.value.lineno) == ("pt.gz", 7)


def test_cli_combine_field_and_column(tmp_path: Path) -> None:
    out, col = tmp_path / "combined.gz", tmp_path / "scores.txt"
    common = ["--weights", str(REAL_INI), "--lm", str(TINY_ARPA)]
    result = CliRunner().invoke(cli, ["combine", str(SLICE), *common, "-o", str(out)])
    assert result.exit_code == 0, result.output
    result = CliRunner().invoke(cli, ["combine", str(SLICE), *common, "--column", "-o", str(col)])
    assert result.exit_code == 0, result.output
    entries = list(read_table(str(SLICE)))
    with gzip.open(out, "rt", encoding="utf-8") as f:
        lines = f.read().split("\n")[:-1]
    values = col.read_text().split("\n")[:-1]
    assert len(lines) == len(values) == len(entries) == 2090
    combiner = Combiner(build_config(read_ini(str(REAL_INI)), [], 4, lm_path=str(TINY_ARPA)))
    for e, line, value in zip(entries, lines, values, strict=True):
        original, _, score = line.rpartition(" ||| ")
        assert original == e.line() and score == value
        assert float(value) == pytest.approx(combiner.score(e), rel=1e-7, abs=1e-7)


def test_a_missing_lm_names_the_feature_the_path_and_the_run_dir(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        cli, ["combine", str(SLICE), "--weights", str(REAL_INI), "-o", str(tmp_path / "x.gz")]
    )
    assert result.exit_code == 1
    assert (
        f"{REAL_INI}:28: LM0 (KENLM) names {DATA_DIR / 'lm.fr.binary'}, which does not exist "
        f"(path=lm.fr.binary taken relative to {DATA_DIR}, the folder Moses is meant to run in"
    ) in result.stderr
    assert "with --run-dir); or give --lm FILE, or --no-lm" in result.stderr
    assert list(tmp_path.iterdir()) == []  # nothing left behind


def test_the_ini_paths_are_taken_from_the_run_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 27, item 1: an ini kept apart from its system (mert's working dir, a copy) named
    an LM that combine looked for beside the ini, and failed without --lm."""
    copy = tmp_path / "tuning" / "moses.ini"
    copy.parent.mkdir()
    copy.write_bytes((TINY_SYSTEM / "moses.ini").read_bytes())
    monkeypatch.chdir(tmp_path)  # neither the system's folder nor the ini's
    table = str(TINY_SYSTEM / "phrase-table.gz")
    args = ["combine", table, "--weights", str(copy), "--column"]
    by_run_dir = CliRunner().invoke(cli, [*args, "--run-dir", str(TINY_SYSTEM), "-o", "a"])
    by_lm = CliRunner().invoke(cli, [*args, "--lm", str(TINY_SYSTEM / "lm.arpa"), "-o", "b"])
    assert by_run_dir.exit_code == 0, by_run_dir.output
    assert by_lm.exit_code == 0, by_lm.output
    assert Path("a").read_text() == Path("b").read_text() and len(Path("a").read_text()) > 0
    no_lm = CliRunner().invoke(cli, [*args, "--no-lm", "-o", "c"])
    assert no_lm.exit_code == 0 and Path("c").read_text() != Path("a").read_text()


@pytest.mark.slow
def test_combine_and_filter_do_not_import_torch(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "from rescorer.cli import cli\n"
        f"args = ['filter', {str(SLICE)!r}, '--top-k', '2', '--weights', {str(REAL_INI)!r},"
        f" '--no-lm', '-o', {str(tmp_path / 'f.gz')!r}]\n"
        "try:\n    cli(args)\nexcept SystemExit as e:\n    assert e.code == 0, e.code\n"
        f"args = ['combine', {str(SLICE)!r}, '--weights', {str(REAL_INI)!r},"
        f" '--lm', {str(TINY_ARPA)!r}, '-o', {str(tmp_path / 'c.gz')!r}]\n"
        "try:\n    cli(args)\nexcept SystemExit as e:\n    assert e.code == 0, e.code\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_malformed_table_names_the_line_and_leaves_no_output(tmp_path: Path) -> None:
    table = tmp_path / "bad.txt"
    table.write_text("a ||| b ||| 0.5 0.5 0.5 0.5\na ||| c ||| 0.5 0.5 0.5\n")
    out = tmp_path / "out.gz"
    args = ["combine", str(table), "--weights", str(REAL_INI), "--no-lm", "-o", str(out)]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 1 and f"{table}:2: found 3 scores" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.txt"]
