"""``rescorer score-nbest`` (issue 14, item 6): the RNN feature of n-best hypotheses equals the
sum of ``score``'s log p of their phrase pairs, read from real Moses n-best lists."""

from __future__ import annotations

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


def run_score_nbest(nbest: Path, model: Path, out: Path, *extra: str) -> list[str]:
    args = ["score-nbest", str(nbest), "-m", str(model), "--input", str(INPUT), "-o", str(out)]
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
    for line, before, pairs in zip(out, original, per_line, strict=True):
        expected = sum(max(logp[p], -100.0) for p in pairs)
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
    result = CliRunner().invoke(cli, [*args, "-o", str(tmp_path / "x")])
    assert result.exit_code == 1
    assert "en-fr.dev13.nbest.gz:1: no phrase segmentation" in result.output
    assert "-include-segmentation-in-n-best" in result.output
    assert not (tmp_path / "x").exists()  # nothing half-written under the final name
    short = tmp_path / "short.en"
    short.write_text("one\n", encoding="utf-8")
    args = ["score-nbest", str(SEG), "-m", str(tiny_model_dir), "--input", str(short)]
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
