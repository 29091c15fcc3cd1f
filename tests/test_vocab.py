"""Shortlist vocabularies: ids, frequency order, ties, UNK/EOS, JSON round trip, the command."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import ROOT, SLICE

from rescorer.cli import cli
from rescorer.constants import UNK_ID
from rescorer.errors import RescorerError
from rescorer.io.table import read_table
from rescorer.vocab import Vocab, build_vocabs


def test_ids_follow_design() -> None:
    pairs = [("a b", "x"), ("a c", "x y"), ("a", "y"), ("d", "z")]
    src, tgt = build_vocabs(pairs, src_size=4, tgt_size=5)
    # src counts: a=3, b=1, c=1, d=1 -> shortlist of 4 ids holds 2 words: a, then b (tie -> order)
    assert src.words == ("a", "b")
    assert src.encode(["a", "b", "c", "d"]) == [2, 3, UNK_ID, UNK_ID]
    assert src.eos_id == 4 and src.num_rows == 5
    assert src.encode_eos(["b"]) == [3, 4]
    assert src.unk_count(["a", "c", "d"]) == 2
    # tgt counts: x=2, y=2, z=1 -> x, y, z
    assert tgt.words == ("x", "y", "z")
    assert tgt.decode(tgt.encode_eos(["z", "q"])) == ["z", "<unk>", "</s>"]


def test_consecutive_duplicate_pairs_count_once() -> None:
    src, _ = build_vocabs([("a", "x"), ("a", "x"), ("b", "x"), ("b", "y")], 3, 3)
    assert src.words == ("b",)  # b: 2 unique pairs, a: 1


def test_ties_are_deterministic_whatever_the_input_order() -> None:
    one, _ = build_vocabs([("b", "x"), ("a", "x"), ("c", "x")], 4, 3)
    two, _ = build_vocabs([("c", "x"), ("a", "x"), ("b", "x")], 4, 3)
    assert one.words == two.words == ("a", "b")


def test_real_slice_and_json_round_trip(tmp_path: Path) -> None:
    pairs = [(e.src, e.tgt) for e in read_table(str(SLICE))]
    src, tgt = build_vocabs(pairs, 500, 600)
    assert len(src.words) == 498 and len(tgt.words) == 598
    assert "&apos;" in tgt  # escaped tokens are kept as they are
    src.save(str(tmp_path / "v.json"))
    again = Vocab.load(str(tmp_path / "v.json"))
    assert again == src and again.eos_id == 500


def test_load_rejects_foreign_json(tmp_path: Path) -> None:
    path = tmp_path / "v.json"
    path.write_text(json.dumps({"a": 1}))
    with pytest.raises(RescorerError, match="not a rescorer vocabulary"):
        Vocab.load(str(path))


def test_vocab_command(tmp_path: Path) -> None:
    out = tmp_path / "vocab"
    result = CliRunner().invoke(
        cli, ["vocab", str(SLICE), "-o", str(out), "--src-vocab-size", "100"]
    )
    assert result.exit_code == 0, result.output
    src = Vocab.load(str(out / "vocab.src.json"))
    tgt = Vocab.load(str(out / "vocab.tgt.json"))
    assert src.size == 100 and len(src.words) == 98
    assert tgt.size == 15000 and len(tgt.words) < 15000 - 2  # the slice has fewer target words
    assert "source and" in result.output and "--valid-fraction 0.01" in result.output


SAMPLE = ROOT / "rescorer" / "sample" / "en-fr.sample.gz"  # 24,245 real pairs
TRAIN = ["--hidden-size", "8", "--embed-size", "6", "--maxout-units", "5", "--batch-size", "16",
         "--max-updates", "1", "--valid-every", "1", "-q"]  # fmt: skip


def words(folder: Path) -> tuple[tuple[str, ...], tuple[str, ...]]:
    return tuple(Vocab.load(str(folder / f"vocab.{side}.json")).words for side in ("src", "tgt"))


def test_vocab_builds_trains_shortlists_and_train_takes_them(tmp_path: Path) -> None:
    """Issue 39, item 6: from the same table vocab's shortlists differed from train's in 66
    source and 91 target words (vocab counted the held-out sources too), and nothing read
    vocab's output. One rule now (train/data.py build_training_vocabs), and train --vocab
    DIR takes the shortlists and their sizes."""
    sizes = ["--src-vocab-size", "4000", "--tgt-vocab-size", "3000"]
    made = CliRunner().invoke(cli, ["vocab", str(SAMPLE), "-o", str(tmp_path / "v"), *sizes])
    assert made.exit_code == 0, made.output
    trained = CliRunner().invoke(
        cli, ["train", str(SAMPLE), "-o", str(tmp_path / "m"), *sizes, *TRAIN]
    )
    assert trained.exit_code == 0, trained.output
    assert words(tmp_path / "v") == words(tmp_path / "m")
    assert [len(w) for w in words(tmp_path / "v")] == [3998, 2998]
    # train --vocab: the same shortlists, their sizes taken from the folder
    given = CliRunner().invoke(
        cli, ["train", str(SAMPLE), "-o", str(tmp_path / "g"), "--vocab", str(tmp_path / "v"),
              *TRAIN]
    )  # fmt: skip
    assert given.exit_code == 0, given.output
    assert words(tmp_path / "g") == words(tmp_path / "v")
    config = json.loads((tmp_path / "g" / "config.json").read_text())
    assert (config["model"]["src_vocab_size"], config["model"]["tgt_vocab_size"]) == (4000, 3000)
    clash = CliRunner().invoke(
        cli, ["train", str(SAMPLE), "-o", str(tmp_path / "c"), "--vocab", str(tmp_path / "v"),
              "--src-vocab-size", "100", *TRAIN]
    )  # fmt: skip
    assert clash.exit_code == 1 and "differs from --vocab" in clash.stderr, clash.output
    # another split: said when train starts
    other = CliRunner().invoke(
        cli, ["train", str(SAMPLE), "-o", str(tmp_path / "o"), "--vocab", str(tmp_path / "v"),
              "--valid-fraction", "0.05", *TRAIN[:-1]]
    )  # fmt: skip
    assert other.exit_code == 0, other.output
    assert "warning: they were built with --valid-fraction 0.01 (this run: 0.05)" in other.stderr
