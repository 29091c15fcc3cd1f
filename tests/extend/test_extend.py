"""rescorer extend: the batched beam search is GroundHog's, the output is a Moses table in byte
order (fill-up: the original lines unchanged but for the provenance column), new pairs only,
each model's column as score writes it, lexical weights as Moses computes them; shards merge
into the single run; the real Moses decodes both forms and mert-moses.pl tunes with them."""

from __future__ import annotations

import dataclasses
import gzip
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from conftest import MOSES, TINY_SYSTEM

from rescorer.analysis.generate import beam_search
from rescorer.cli import cli
from rescorer.extend.beam import beam_search_batched
from rescorer.io.table import read_table
from rescorer.model.checkpoint import load_model_dir
from rescorer.model.encdec import EncoderDecoder, ModelConfig
from rescorer.moses.ini import read_ini
from rescorer.moses.lex import LexicalTable, lexical_weights
from rescorer.vocab import Vocab

TABLE = TINY_SYSTEM / "phrase-table.gz"
TEST_EN = TINY_SYSTEM / "test.en"
HAS_MOSES = (MOSES / "bin" / "moses").exists()
needs_moses = pytest.mark.skipif(
    not HAS_MOSES, reason=f"the real Moses toolkit is not at {MOSES} (../shared/tools/moses)"
)


def rescorer(*args: object, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rescorer", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        check=False,
    )


def lines_of(path: Path) -> list[bytes]:
    with gzip.open(path, "rb") as f:
        return f.read().splitlines()


def fields(line: bytes) -> list[str]:
    return line.decode("utf-8").split(" ||| ")


def test_the_batched_beam_is_groundhogs(tiny_model_dir: Path) -> None:
    """Where GroundHog's search finishes a hypothesis at the first try, every source gets the
    same targets with the same log p, whatever else is in the batch."""
    loaded = load_model_dir(str(tiny_model_dir))
    model, src_vocab, tgt_vocab = loaded.model, loaded.src_vocab, loaded.tgt_vocab
    sources = sorted({e.src for e in read_table(str(TABLE))})[::9][:30]
    theirs = beam_search(model, src_vocab, tgt_vocab, sources, beam_size=4, ignore_unk=True)
    ours = beam_search_batched(model, src_vocab, tgt_vocab, [s.split() for s in sources], 4)
    compared = 0
    for i, (expected, found) in enumerate(zip(theirs, ours, strict=True)):
        if i % 5 == 0:  # alone in its batch: the same
            alone = beam_search_batched(model, src_vocab, tgt_vocab, [sources[i].split()], 4)
            assert [(h.ids, round(h.logp, 6)) for h in alone[0]] == [
                (h.ids, round(h.logp, 6)) for h in found
            ]
        if not found:
            continue  # GroundHog retried with a wider beam; extend proposes nothing
        got = [(tuple(tgt_vocab.decode(h.ids)), round(h.logp, 6)) for h in found]
        assert got == [(g.words, round(g.logp, 6)) for g in expected]
        compared += 1
    assert compared >= 20


def test_every_row_or_the_live_rows_only_the_same_hypotheses(tiny_model_dir: Path) -> None:
    """compact=False (a GPU's way: every row runs) finds what compact=True (a CPU's) finds."""
    loaded = load_model_dir(str(tiny_model_dir))
    model, src_vocab, tgt_vocab = loaded.model, loaded.src_vocab, loaded.tgt_vocab
    sources = [s.split() for s in sorted({e.src for e in read_table(str(TABLE))})[::7][:40]]
    found = 0
    for beam in (1, 3, 6):
        runs = [
            beam_search_batched(model, src_vocab, tgt_vocab, sources, beam, compact=compact)
            for compact in (True, False)
        ]
        found += sum(map(len, runs[0]))
        for live_only, every in zip(*runs, strict=True):
            assert [h.ids for h in live_only] == [h.ids for h in every]
            for x, y in zip(live_only, every, strict=True):
                assert math.isclose(x.logp, y.logp, abs_tol=1e-5)
    assert found > len(sources)  # hypotheses to compare, at beams 3 and 6


def test_a_beam_wider_than_the_vocabulary_is_groundhogs_too() -> None:
    """Two target words and EOS, beams of 6 and 9: each row offers all of its words (a top-K of
    K > V raised here once), and the targets are those of GroundHog's search."""
    torch.manual_seed(0)
    config = ModelConfig(
        src_vocab_size=10, tgt_vocab_size=4, hidden_size=4, embed_size=4, maxout_units=6
    )
    model = EncoderDecoder(config).eval()
    src_vocab = Vocab(tuple(f"s{i}" for i in range(8)), 10)
    tgt_vocab = Vocab(("t0", "t1"), 4)  # V = 5: PAD, UNK, t0, t1, EOS
    sources = ["s1", "s2 s3", "s4 s5 s6"]
    for beam in (6, 9):
        theirs = beam_search(model, src_vocab, tgt_vocab, sources, beam_size=beam, ignore_unk=True)
        ours = beam_search_batched(model, src_vocab, tgt_vocab, [s.split() for s in sources], beam)
        assert any(ours)
        for expected, found in zip(theirs, ours, strict=True):
            if found:  # GroundHog retries a source none of whose hypotheses ends
                got = [(tuple(tgt_vocab.decode(h.ids)), round(h.logp, 5)) for h in found]
                assert got == [(g.words, round(g.logp, 5)) for g in expected]


def test_lexical_weights_as_moses_computes_them() -> None:
    """lex(e|f) = prod over e_i of the mean w(e_i|f_j) over its links, w(e_i|NULL) unlinked."""
    f2e = LexicalTable(
        {"das": {"the": 0.7, "that": 0.2}, "haus": {"house": 0.8}, "NULL": {"a": 0.1}}
    )
    e2f = LexicalTable({"the": {"das": 0.5}, "house": {"haus": 0.9}, "NULL": {"ein": 0.3}})
    found = lexical_weights(["das", "haus"], ["the", "house", "a"], f2e, e2f, floor=1e-4)
    assert found.alignment == ((0, 0), (1, 1))
    assert math.isclose(found.direct, 0.7 * 0.8 * 0.1)  # "a" unaligned: w(a|NULL)
    assert math.isclose(found.inverse, 0.5 * 0.9)
    missing = lexical_weights(["das"], ["dog"], f2e, e2f, floor=1e-4)
    assert missing.alignment == () and math.isclose(missing.direct, 1e-4)  # no w(dog|NULL)


def test_fill_up_keeps_the_table_and_adds_new_pairs_in_byte_order(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    out = tmp_path / "ext.gz"
    done = rescorer("extend", TABLE, "-m", tiny_model_dir, "-n", "3", "-o", out, "--device", "cpu")
    assert done.returncode == 0, done.stderr
    original = lines_of(TABLE)
    extended = lines_of(out)
    assert extended == sorted(extended)  # Moses' byte order (LC_ALL=C sort)
    old = [line for line in extended if fields(line)[2].endswith(" 1")]
    new = [line for line in extended if fields(line)[2].endswith(" 2.718")]
    assert len(old) + len(new) == len(extended) and new
    assert [line.replace(b" 1 |||", b" |||", 1) for line in old] == original
    pairs = {tuple(fields(line)[:2]) for line in original}
    per_source: dict[str, int] = {}
    for line in new:
        src, tgt, scores, align, counts, _ = fields(line)
        assert (src, tgt) not in pairs and "<unk>" not in tgt.split()
        assert scores.split() == ["0.0001", "0.0001", "0.0001", "0.0001", "2.718"]
        assert (align, counts) == ("", "0 0 0")
        per_source[src] = per_source.get(src, 0) + 1
    assert max(per_source.values()) <= 3
    assert f"{len(new):,} new pairs" in done.stderr


def test_a_scored_table_extended_gets_the_column_score_gives(
    tmp_path: Path, tiny_model_dir: Path, tiny_inverse_model_dir: Path
) -> None:
    """The new pairs' model columns are what rescorer score writes for them, for a forward and
    an inverse model; --input keeps the new pairs to the input's n-grams."""
    models = ["-m", tiny_model_dir, "-m", tiny_inverse_model_dir]
    scored, out = tmp_path / "scored.gz", tmp_path / "ext.gz"
    assert rescorer("score", TABLE, *models, "-o", scored, "--device", "cpu", "-q").returncode == 0
    done = rescorer(
        "extend", scored, *models, "--input", TEST_EN, "-o", out, "--device", "cpu", "-q"
    )
    assert done.returncode == 0, done.stderr
    new = [line for line in lines_of(out) if fields(line)[2].endswith(" 2.718")]
    assert new
    ngrams = set()
    for sentence in TEST_EN.read_text(encoding="utf-8").splitlines():
        words = sentence.split()
        ngrams |= {" ".join(words[i:j]) for i in range(len(words)) for j in range(i + 1, i + 11)}
    assert all(fields(line)[0] in ngrams for line in new)
    # the new pairs alone, with Moses' four columns, scored by score: the same two columns
    bare = tmp_path / "bare.gz"
    with gzip.open(bare, "wb") as f:
        for line in new:
            src, tgt, scores, *rest = fields(line)
            f.write(" ||| ".join([src, tgt, " ".join(scores.split()[:4]), *rest]).encode() + b"\n")
    again = tmp_path / "again.gz"
    assert rescorer("score", bare, *models, "-o", again, "--device", "cpu", "-q").returncode == 0
    expected = [fields(line)[2].split()[4:6] for line in lines_of(again)]
    assert [fields(line)[2].split()[4:6] for line in new] == expected


def test_a_second_table_with_lexical_weights(tmp_path: Path, tiny_model_dir: Path) -> None:
    f2e, e2f = tmp_path / "lex.f2e", tmp_path / "lex.e2f"
    table = list(read_table(str(TABLE)))
    f2e.write_text("".join(f"{e.tgt_tokens[0]} {e.src_tokens[0]} 0.5\n" for e in table[:300]))
    e2f.write_text("".join(f"{e.src_tokens[0]} {e.tgt_tokens[0]} 0.25\n" for e in table[:300]))
    out = tmp_path / "new.gz"
    flags = ["--form", "second-table", "--lex-f2e", f2e, "--lex-e2f", e2f, "--device", "cpu"]
    done = rescorer("extend", TABLE, "-m", tiny_model_dir, *flags, "-o", out, "-q")
    assert done.returncode == 0, done.stderr
    new = lines_of(out)
    assert new and new == sorted(new)
    known = {(e.src, e.tgt) for e in table}
    for line in new:
        src, tgt, scores, align, _, _ = fields(line)
        assert (src, tgt) not in known
        values = [float(v) for v in scores.split()]
        assert len(values) == 4 and values[-1] == 2.718 and 0 < values[0] <= 1
        for link in align.split():
            j, i = map(int, link.split("-"))
            assert j < len(src.split()) and i < len(tgt.split())


def test_shards_merge_into_the_single_run(tmp_path: Path, tiny_model_dir: Path) -> None:
    # --chunk-bytes takes a size, as score's does (it took only a count of bytes before)
    common = ["-m", tiny_model_dir, "--chunk-bytes", "8K", "--device", "cpu", "-q"]
    single = tmp_path / "single.gz"
    assert rescorer("extend", TABLE, *common, "-o", single).returncode == 0
    parts = []
    for k in (1, 2):
        part = tmp_path / f"part{k}.gz"
        done = rescorer("extend", TABLE, *common, "--shard", f"{k}/2", "-o", part)
        assert done.returncode == 0, done.stderr
        parts.append(part)
    merged = tmp_path / "merged.gz"
    done = rescorer("merge", merged, *parts, "-q")
    assert done.returncode == 0, done.stderr
    assert merged.read_bytes() == single.read_bytes()


def test_samples_add_the_models_draws_whatever_the_chunks(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    """--samples K adds the distinct finished draws the beam did not propose: the beam's pairs
    all stay, new ones come, none the table has or with UNK; each source phrase's draws have a
    stream of their own, so other chunks give the same bytes and another --seed other draws."""
    common = ["-m", tiny_model_dir, "--form", "second-table", "-n", "2", "--device", "cpu"]

    def run(name: str, *flags: object) -> tuple[list[bytes], str]:
        """The command in this process (four runs: no interpreter start-up each)."""
        out = tmp_path / name
        args = ["extend", TABLE, *common, *flags, "-o", out]
        done = CliRunner().invoke(cli, [str(a) for a in args])
        assert done.exit_code == 0, done.output
        return lines_of(out), done.stderr

    beam, _ = run("beam.gz", "-q")
    drawn, said = run("drawn.gz", "--samples", "20", "--seed", "3")
    assert set(beam) < set(drawn) and drawn == sorted(drawn)
    known = {(e.src, e.tgt) for e in read_table(str(TABLE))}
    for line in drawn:
        src, tgt, *_ = fields(line)
        assert (src, tgt) not in known and "<unk>" not in tgt.split() and tgt
    more = len(drawn) - len(beam)
    assert f"{more:,} more new ones sampled, {len(drawn):,} new pairs" in said, said
    again, _ = run("again.gz", "--samples", "20", "--seed", "3", "--chunk-bytes", "8192", "-q")
    assert again == drawn
    other, _ = run("other.gz", "--samples", "20", "--seed", "4", "-q")
    assert set(beam) < set(other) and other != drawn


@pytest.mark.slow
@needs_moses
def test_the_real_moses_decodes_both_forms_and_mert_tunes(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    """Both forms through moses-ini decode test.en; mert-moses.pl runs an iteration on dev
    with the fill-up (one more weight) and with the second table (its own weights)."""
    ini = TINY_SYSTEM / "moses.ini"
    fill, second = tmp_path / "fill.gz", tmp_path / "second.gz"
    model = ["-m", tiny_model_dir, "--device", "cpu", "-q"]
    assert rescorer("extend", TABLE, *model, "-o", fill).returncode == 0
    assert rescorer("extend", TABLE, *model, "--form", "second-table", "-o", second).returncode == 0
    inis = {
        "fill": ("--phrase-table", fill, 5, None),
        "second": ("--second-table", second, 4, 2),
    }
    moses = MOSES / "bin" / "moses"
    for name, (flag, table, first_count, second_count) in inis.items():
        new_ini = tmp_path / f"{name}.ini"
        done = rescorer("moses-ini", ini, flag, table, "-o", new_ini)
        assert done.returncode == 0, done.stderr
        parsed = read_ini(str(new_ini))
        assert parsed.feature("TranslationModel0").num_features == first_count
        if second_count is not None:
            assert parsed.feature("TranslationModel1").num_features == second_count
            assert len(parsed.weights()["TranslationModel1"]) == second_count
        with open(TEST_EN, "rb") as source:
            decoded = subprocess.run(
                [str(moses), "-f", str(new_ini), "-threads", "1", "-v", "0"],
                stdin=source,
                capture_output=True,
                check=False,
            )
        assert decoded.returncode == 0, decoded.stderr[-2000:]
        assert len(decoded.stdout.splitlines()) == len(TEST_EN.read_bytes().splitlines())
        work = tmp_path / f"mert-{name}"
        tuned = subprocess.run(
            [
                "perl", str(MOSES / "scripts" / "training" / "mert-moses.pl"),
                str(TINY_SYSTEM / "dev.en"), str(TINY_SYSTEM / "dev.fr"), str(moses),
                str(new_ini), "--mertdir", str(MOSES / "bin"), "--working-dir", str(work),
                "--maximum-iterations", "1", "--no-filter-phrase-table",
                "--decoder-flags", "-threads 1", "--mertmertargs", "-r 1 ",
            ],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env={**os.environ, "LC_ALL": "C"},
            check=False,
        )  # fmt: skip
        assert tuned.returncode == 0, tuned.stderr[-3000:]
        weights = read_ini(str(work / "moses.ini")).weights()
        assert len(weights["TranslationModel0"]) == first_count
        if second_count is not None:
            assert len(weights["TranslationModel1"]) == second_count


def test_an_interrupted_run_resumes_to_the_single_runs_bytes(
    tmp_path: Path, tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Interrupted after some chunks, OUT.partial and its record stay; --resume finishes it to
    the bytes of an uninterrupted run, and nothing is left beside OUT."""
    from rescorer.extend.config import ExtendConfig
    from rescorer.extend.pipeline import Extending, extend_table

    config = ExtendConfig(device="cpu", chunk_bytes=8192, checkpoint_every=0, quiet=True)
    single, out = tmp_path / "single.gz", tmp_path / "out.gz"
    extend_table(str(TABLE), [str(tiny_model_dir)], str(single), config)
    real = Extending.collect
    calls = []

    def interrupted(self: Extending, *args: object) -> object:
        calls.append(1)
        if len(calls) == 4:
            raise KeyboardInterrupt
        return real(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(Extending, "collect", interrupted)
    with pytest.raises(KeyboardInterrupt):
        extend_table(str(TABLE), [str(tiny_model_dir)], str(out), config)
    monkeypatch.setattr(Extending, "collect", real)
    assert not out.exists() and Path(f"{out}.partial.json").exists()
    resumed = dataclasses.replace(config, resume=True)
    stats = extend_table(str(TABLE), [str(tiny_model_dir)], str(out), resumed)
    assert stats.resumed_from_line > 1
    assert out.read_bytes() == single.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.gz", "single.gz"]


def test_moses_ini_adds_a_second_table_and_its_decoding_path(tmp_path: Path) -> None:
    """A second TranslationModel line, its weights and "1 T 1" after "0 T 0"; an ini without
    [mapping] gets one (Moses' default, 0 T 0, stated), and every other line is kept."""
    from rescorer.moses.ini_tables import write_second_table_ini

    table = tmp_path / "new.txt"
    table.write_text("a ||| b ||| 0.5 0.25 2.718 |||  ||| 0 0 0 ||| |||\n", encoding="utf-8")
    text = (TINY_SYSTEM / "moses.ini").read_text(encoding="utf-8")
    for name, source in (("with", text), ("without", text.replace("[mapping]\n0 T 0\n", ""))):
        ini = tmp_path / f"{name}.ini"
        ini.write_text(source, encoding="utf-8")
        for path in ("phrase-table.gz", "reordering-table.gz", "lm.arpa"):
            (tmp_path / path).symlink_to(TINY_SYSTEM / path) if name == "with" else None
        out = tmp_path / f"{name}.2t.ini"
        added = write_second_table_ini(str(ini), str(table), str(out), weights=(0.1,))
        assert added.name == "TranslationModel1" and added.mapping == ("0 T 0", "1 T 1")
        parsed = read_ini(str(out))
        assert parsed.feature("TranslationModel1").num_features == 3
        assert parsed.weights()["TranslationModel1"] == (0.1, 0.1, 0.1)
        lines = out.read_text(encoding="utf-8").splitlines()
        start = lines.index("[mapping]")
        assert lines[start + 1 : start + 3] == ["0 T 0", "1 T 1"]
        assert len(lines) == len(source.splitlines()) + 3 + (0 if name == "with" else 2)
