"""``rescorer score-nbest`` (issue 14, item 6): the RNN feature of n-best hypotheses equals the
sum of ``score``'s log p of their phrase pairs, read from real Moses n-best lists; a word Moses
passed through untranslated adds 0, as in the real decoder (issue 27, item 5)."""

from __future__ import annotations

import gzip
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import DATA_DIR, DEV13_NBEST, MOSES, TINY_SYSTEM

from rescorer.cli import cli

NBEST = DATA_DIR / "nbest"
SEG = NBEST / "tiny.test6.nbest-seg"  # -include-segmentation-in-n-best
MARKS = NBEST / "tiny.test6.nbest-marks"  # -report-segmentation
INPUT = NBEST / "tiny.test6.en"
TABLE = TINY_SYSTEM / "phrase-table.gz"  # the table these lists were decoded with


def table_sources(table: Path) -> set[str]:
    with gzip.open(table, "rt", encoding="utf-8") as f:
        return {line.split(" ||| ")[0] for line in f}


def independent_pairs(path: Path) -> list[list[tuple[str, str]]]:
    """Per n-best line, its phrase pairs, from the 5th field, parsed here from scratch."""
    sources = [line.split() for line in INPUT.read_text(encoding="utf-8").splitlines()]
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        fields = [f.strip() for f in line.split("|||")]
        words, src = fields[1].split(), sources[int(fields[0])]
        pairs = []
        for seg in sorted(
            fields[4].split(), key=lambda s: int(re.split("[-=]", s.split("=")[1])[0])
        ):
            s_range, t_range = seg.split("=")
            s0, s1 = (int(x) for x in (s_range.split("-") * 2)[:2])
            t0, t1 = (int(x) for x in (t_range.split("-") * 2)[:2])
            pairs.append((" ".join(src[s0 : s1 + 1]), " ".join(words[t0 : t1 + 1])))
        out.append(pairs)
    return out


def score_with_rescorer_score(
    pairs: list[tuple[str, str]], model: Path, tmp_path: Path
) -> dict[tuple[str, str], float]:
    """ln p of each pair from ``rescorer score --column logp`` on a table of the pairs."""
    table, scored = tmp_path / "pairs.pt", tmp_path / "pairs.scored.pt"
    distinct = sorted(set(pairs))
    table.write_text("".join(f"{s} ||| {t} ||| 1\n" for s, t in distinct), encoding="utf-8")
    args = ["score", str(table), "-m", str(model), "-o", str(scored), "--column", "logp"]
    result = CliRunner().invoke(cli, [*args, "--precision", "fp32", "-q"])
    assert result.exit_code == 0, result.output
    lines = scored.read_text(encoding="utf-8").splitlines()
    return {
        pair: float(line.split(" ||| ")[2].split()[1])
        for pair, line in zip(distinct, lines, strict=True)
    }


def run_score_nbest(
    nbest: Path, model: Path, out: Path, *extra: str, table: Path = TABLE, src: Path = INPUT
) -> list[str]:
    args = ["score-nbest", str(nbest), "-m", str(model), "--input", str(src), "-o", str(out)]
    args += ["--phrase-table", str(table)]
    result = CliRunner().invoke(cli, [*args, "--precision", "fp32", *extra])
    assert result.exit_code == 0, result.output
    return out.read_text(encoding="utf-8").splitlines()


def feature(line: str, name: str = "RNN0") -> float:
    return float(line.split("|||")[2].split(f"{name}=")[1].split()[0])


def test_the_feature_is_the_sum_of_score_over_the_phrase_pairs(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    per_line = independent_pairs(SEG)
    logp = score_with_rescorer_score([p for ps in per_line for p in ps], tiny_model_dir, tmp_path)
    out = run_score_nbest(SEG, tiny_model_dir, tmp_path / "out.nbest")
    original = SEG.read_text(encoding="utf-8").splitlines()
    assert len(out) == len(original) == 45
    known = table_sources(TABLE)
    unknown = {p for ps in per_line for p in ps if p[0] not in known}
    assert {p[0] for p in unknown} == {"faliscan"}  # sentence 2's unknown word, passed through
    for line, before, pairs in zip(out, original, per_line, strict=True):
        expected = sum(max(logp[p], -100.0) for p in pairs if p not in unknown)
        assert feature(line) == pytest.approx(expected, rel=1e-6, abs=1e-5)
        # Only the feature field grew: id, words, total and segmentation are as they were.
        old, new = before.split("|||"), line.split("|||")
        assert new[:2] + new[3:] == old[:2] + old[3:]
        assert new[2].startswith(old[2].rstrip(" ") + " RNN0= ")


def test_segmentation_markers_give_the_same_feature(tiny_model_dir: Path, tmp_path: Path) -> None:
    from_field = run_score_nbest(SEG, tiny_model_dir, tmp_path / "a", "--features-only")
    from_marks = run_score_nbest(MARKS, tiny_model_dir, tmp_path / "b", "--features-only")
    assert from_field == from_marks and len(from_field) == 45
    assert all(re.fullmatch(r"RNN0= -?[0-9.e+-]+", line) for line in from_field)


def test_lists_without_segmentation_or_with_the_wrong_input_are_refused(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    args = ["score-nbest", str(DEV13_NBEST), "-m", str(tiny_model_dir), "--input", str(INPUT)]
    args += ["--phrase-table", str(TABLE)]
    result = CliRunner().invoke(cli, [*args, "-o", str(tmp_path / "x")])
    assert result.exit_code == 1
    assert "en-fr.dev13.nbest.gz:1: no phrase segmentation" in result.output
    assert "-include-segmentation-in-n-best" in result.output
    assert not (tmp_path / "x").exists()  # nothing half-written under the final name
    short = tmp_path / "short.en"
    short.write_text("one\n", encoding="utf-8")
    args = ["score-nbest", str(SEG), "-m", str(tiny_model_dir), "--input", str(short)]
    args += ["--phrase-table", str(TABLE)]
    result = CliRunner().invoke(cli, [*args, "-o", str(tmp_path / "y")])
    assert result.exit_code == 1 and "tiny.test6.nbest-seg:1: source words 0-5" in result.output


needs_moses = pytest.mark.skipif(
    not (MOSES / "bin" / "moses").exists(),
    reason=f"the real Moses toolkit is not at {MOSES} (../shared/tools/moses)",
)


@pytest.mark.slow
@needs_moses
def test_real_moses_list_through_score_nbest_and_moses_extractor(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    """Decode with the real Moses, add the feature, and let Moses' extractor read it."""
    system = tmp_path / "system"
    shutil.copytree(TINY_SYSTEM, system)
    nbest = system / "n.nbest"
    with open(INPUT, "rb") as src:
        subprocess.run(
            [str(MOSES / "bin" / "moses"), "-f", "moses.ini", "-n-best-list", str(nbest), "20",
             "-include-segmentation-in-n-best", "-v", "0"],
            stdin=src, stdout=subprocess.DEVNULL, cwd=system, check=True,
        )  # fmt: skip
    out = tmp_path / "rnn.nbest"
    lines = run_score_nbest(nbest, tiny_model_dir, out)
    ref = system / "ref"
    ref.write_text(
        "".join(line + "\n" for line in (system / "test.fr").read_text().splitlines()[:6])
    )
    feats, scores = tmp_path / "f.dat", tmp_path / "s.dat"
    subprocess.run(
        [str(MOSES / "bin" / "extractor"), "--reference", str(ref), "--nbest", str(out),
         "--ffile", str(feats), "--scfile", str(scores)],
        check=True, capture_output=True,
    )  # fmt: skip
    text = feats.read_text(encoding="utf-8").splitlines()
    header = [line for line in text if line.startswith("FEATURES_TXT_BEGIN")]
    assert len(header) == 6 and all(h.split()[-1] == "RNN0_0" for h in header)
    # extractor's last column is our feature, in n-best order (it prints 6 digits)
    rows = [line.split() for line in text if not line.startswith("FEATURES_TXT")]
    assert [float(r[-1]) for r in rows] == pytest.approx([feature(x) for x in lines], rel=1e-5)


def test_rerank_reads_the_feature_and_keeps_the_decoders_total(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    """With the decoding weights plus RNN0=w, each new total is Moses' total + w * RNN0: the
    feature the decoder never saw counts 0 in --decoded-with."""
    lines = run_score_nbest(SEG, tiny_model_dir, tmp_path / "rnn.nbest")
    ini = str(TINY_SYSTEM / "moses.ini")
    args = ["rerank", str(tmp_path / "rnn.nbest"), "--weights", ini, "--decoded-with", ini]
    result = CliRunner().invoke(cli, [*args, "--weight", "RNN0=0.05", "--nbest-out", "-o", "-"])
    assert result.exit_code == 0, result.output
    totals = {x.split("|||")[1] + x.split("|||")[2]: float(x.split("|||")[3]) for x in lines}
    reranked = [x for x in result.output.splitlines() if x.count("|||") >= 3]
    assert len(reranked) == 45
    for line in reranked:
        f = line.split("|||")
        assert float(f[3]) == pytest.approx(totals[f[1] + f[2]] + 0.05 * feature(line), abs=1e-4)


@pytest.mark.slow
@needs_moses
def test_a_word_moses_passed_through_adds_0_as_in_the_real_decoder(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    """Decode with the table scored by rescorer score: the n-best's fifth TranslationModel0
    value is the feature score-nbest computes from the unscored list, unknown words too
    (they added the model's log p of the word copied through: 103 of 1,523 lines of a real
    100-best list differed)."""
    scored = tmp_path / "phrase-table.rnn.gz"
    args = ["score", str(TABLE), "-m", str(tiny_model_dir), "-o", str(scored)]
    result = CliRunner().invoke(cli, [*args, "--precision", "fp32", "-q"])
    assert result.exit_code == 0, result.output
    ini = tmp_path / "moses.rnn.ini"
    args = ["moses-ini", str(TINY_SYSTEM / "moses.ini"), "--phrase-table", str(scored)]
    result = CliRunner().invoke(cli, [*args, "-o", str(ini)])
    assert result.exit_code == 0, result.output
    # the tiny test sentences with words the table has no entry for
    src = tmp_path / "input.en"
    lines = INPUT.read_text(encoding="utf-8").splitlines()[:4]
    src.write_text(
        "".join(
            f"{line} qwertyuiop\n" if i % 2 else f"zyxw {line}\n" for i, line in enumerate(lines)
        ),
        encoding="utf-8",
    )
    nbest = tmp_path / "rnn.nbest"
    with open(src, "rb") as stdin:
        subprocess.run(
            [str(MOSES / "bin" / "moses"), "-f", str(ini), "-n-best-list", str(nbest), "20",
             "-include-segmentation-in-n-best", "-v", "0", "-threads", "1"],
            stdin=stdin, stdout=subprocess.DEVNULL, cwd=tmp_path, check=True,
        )  # fmt: skip
    # score-nbest on the same list (its fifth column aside) with the unscored table
    decoded = nbest.read_text(encoding="utf-8").splitlines()
    out = run_score_nbest(nbest, tiny_model_dir, tmp_path / "out", "--name", "RNN1", src=src)
    assert len(out) == len(decoded) > 20
    unknown = 0
    for line in out:
        moses_value = float(line.split("|||")[2].split("TranslationModel0=")[1].split()[4])
        assert feature(line, "RNN1") == pytest.approx(moses_value, rel=1e-4, abs=1e-3), line
        unknown += "qwertyuiop" in line or "zyxw" in line
    assert unknown == len(out)  # every hypothesis holds a passed-through word


def test_two_models_give_two_features_the_inverse_one_p_source_given_target(
    tiny_model_dir: Path, tiny_inverse_model_dir: Path, tmp_path: Path
) -> None:
    """-m FWD -m INV: RNN0 as with FWD alone, RNN1 the sum of INV's ln p(source | target),
    which rescorer score computes for the same pairs on its own (issue 24, item 3)."""
    per_line = independent_pairs(SEG)
    pairs = [p for ps in per_line for p in ps]
    inverse = score_with_rescorer_score(pairs, tiny_inverse_model_dir, tmp_path)
    known = table_sources(TABLE)  # a word passed through adds 0 (as in Moses) for every model
    alone = run_score_nbest(SEG, tiny_model_dir, tmp_path / "one.nbest")
    model_args = (str(tiny_model_dir), "-m", str(tiny_inverse_model_dir))
    both = run_score_nbest(SEG, Path(model_args[0]), tmp_path / "two.nbest", *model_args[1:])
    assert len(both) == len(alone) == len(per_line)
    for one, two, line_pairs in zip(alone, both, per_line, strict=True):
        assert two.split("|||")[2].split()[-4::2] == ["RNN0=", "RNN1="]
        assert feature(two) == feature(one)
        expected = sum(max(inverse[p], -100.0) for p in line_pairs if p[0] in known)
        assert feature(two, "RNN1") == pytest.approx(expected, abs=1e-4)
    assert [feature(x, "RNN1") for x in both] != [feature(x) for x in both]
    named = run_score_nbest(
        SEG, tiny_model_dir, tmp_path / "named.nbest", *model_args[1:], "--name", "Fwd",
        "--name", "Inv", "--features-only",
    )  # fmt: skip
    assert named[0].split()[::2] == ["Fwd=", "Inv="]
    for args, message in (
        (("--name", "Fwd"), "1 --name for 2 -m"),
        (("--name", "A", "--name", "A"), "labels must differ"),
    ):
        result = CliRunner().invoke(
            cli,
            ["score-nbest", str(SEG), "-m", *model_args, "--input", str(INPUT), *args,
             "--phrase-table", str(TABLE),
             "-o", str(tmp_path / "never")],
        )  # fmt: skip
        assert result.exit_code == 2 and message in result.output
        assert not (tmp_path / "never").exists()


def test_score_nbest_reports_progress_and_a_readable_summary_or_nothing_with_q(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    """Issue 39, item 7: score-nbest had no progress lines and no -q, and its summary read
    '(3,085 scored, 2,301 passed through untranslated: 0)'."""
    out = tmp_path / "out.nbest"
    args = ["score-nbest", str(SEG), "-m", str(tiny_model_dir), "--input", str(INPUT), "-o",
            str(out), "--phrase-table", str(TABLE), "--precision", "fp32"]  # fmt: skip
    result = CliRunner().invoke(cli, [*args, "--progress-every", "0.0001"])
    assert result.exit_code == 0, result.output
    lines = result.stderr.splitlines()
    assert lines[0].startswith("rescorer score-nbest: cpu, fp32, ") and " thread" in lines[0]
    assert any(ln.startswith(f"rescorer score-nbest {SEG}: 45 hypotheses in ") for ln in lines)
    per_line = independent_pairs(SEG)
    pairs = sum(len(ps) for ps in per_line)
    unknown = sum(p[0] == "faliscan" for ps in per_line for p in ps)
    assert lines[-1] == (
        f"rescorer score-nbest: 45 hypotheses of 6 sentences written to {out}; of their "
        f"{pairs:,} phrase pairs, {pairs - unknown:,} were scored by the model "
        f"({len({p for ps in per_line for p in ps if p[0] != 'faliscan'}):,} distinct) and "
        f"{unknown:,} were words Moses passed through untranslated (no table entry), which add "
        "0 as in Moses"
    )
    quiet = CliRunner().invoke(cli, [*args, "-q", "--progress-every", "0.0001"])
    assert quiet.exit_code == 0 and quiet.stderr == "", quiet.output
