"""Shard manifests and ``rescorer merge``: a verified merge equal to the single run, or a refusal
naming the shard."""

from __future__ import annotations

import gzip
import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from conftest import SLICE

from rescorer.cli import cli
from rescorer.errors import RescorerError
from rescorer.io.table import read_table
from rescorer.job.merge import merge
from rescorer.job.shards import file_sha256, manifest_path
from rescorer.model.checkpoint import save_model_dir
from rescorer.model.encdec import EncoderDecoder, ModelConfig, init_weights_
from rescorer.score.config import ScoreConfig
from rescorer.score.pipeline import score_table
from rescorer.vocab import build_vocabs

PAIRS = [(e.src, e.tgt) for e in read_table(str(SLICE))]
CHUNK = 16384  # the slice is some 230 kB: a dozen chunks


def make_model(folder: Path, seed: int) -> Path:
    torch.manual_seed(seed)
    src_vocab, tgt_vocab = build_vocabs(PAIRS, 300, 300)
    model = EncoderDecoder(ModelConfig(300, 300, hidden_size=16, embed_size=8, maxout_units=8))
    init_weights_(model)
    save_model_dir(folder, model, src_vocab, tgt_vocab, {"made_by": "tests/test_shards.py"})
    return folder


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("models")
    return make_model(base / "a", 0), make_model(base / "b", 1)


def run(
    out: Path, model: Path, shard: tuple[int, int] | None = None, **opts: object
) -> ScoreConfig:
    settings: dict[str, object] = {"device": "cpu", "precision": "fp32", "chunk_bytes": CHUNK}
    settings.update(opts)
    config = ScoreConfig(shard=shard, quiet=True, **settings)  # type: ignore[arg-type]
    score_table(str(SLICE), str(model), str(out), config)
    return config


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory, models: tuple[Path, Path]) -> Path:
    """whole.gz (one run) and part1..3.gz (3 shards) of the slice, model a."""
    folder = tmp_path_factory.mktemp("shards")
    run(folder / "whole.gz", models[0])
    for k in (1, 2, 3):
        run(folder / f"part{k}.gz", models[0], (k, 3))
    return folder


def parts(folder: Path, n: int = 3) -> list[str]:
    return [str(folder / f"part{k}.gz") for k in range(1, n + 1)]


def test_merge_equals_the_single_run_byte_for_byte(shards: Path, tmp_path: Path) -> None:
    stats = merge(str(tmp_path / "merged.gz"), parts(shards)[::-1])  # any order given
    assert (tmp_path / "merged.gz").read_bytes() == (shards / "whole.gz").read_bytes()
    lines = gzip.decompress((shards / "whole.gz").read_bytes()).count(b"\n")
    assert (stats.shards, stats.lines_in, stats.lines_out, stats.bad) == (3, lines, lines, 0)
    assert stats.bytes == (shards / "whole.gz").stat().st_size


def test_the_manifest_describes_the_shard(shards: Path) -> None:
    data = SLICE.read_bytes()
    text = gzip.decompress(data)
    ends = []
    for k in (1, 2, 3):
        m = json.loads(Path(manifest_path(parts(shards)[k - 1])).read_text())
        assert m["shard"] == {"k": k, "n": 3}
        assert m["input"]["bytes"] == len(data) and m["input_path"] == str(SLICE.resolve())
        assert m["range"]["input_bytes"] == len(text)
        piece = text[m["range"]["start"] : m["range"]["end"]]
        assert m["range"]["first_line"] == text[: m["range"]["start"]].count(b"\n") + 1
        assert m["lines"] == {"in": piece.count(b"\n"), "out": piece.count(b"\n"), "bad": 0}
        assert (m["output"]["bytes"], m["output"]["sha256"]) == file_sha256(parts(shards)[k - 1])
        assert m["options"]["precision"] == "fp32" and m["options"]["chunk_bytes"] == CHUNK
        assert m["model"]["sha256"] and m["versions"]["torch"] == torch.__version__
        assert m["device"] == "cpu" and m["seconds"] >= 0 and m["host"]
        ends.append((m["range"]["start"], m["range"]["end"]))
    assert ends[0][0] == 0 and ends[1][0] == ends[0][1] and ends[2][1] == len(text)


def copy_parts(src: Path, dst: Path, ks: list[int], rename: dict[int, int] | None = None) -> None:
    for k in ks:
        name = f"part{(rename or {}).get(k, k)}.gz"
        shutil.copy(src / f"part{k}.gz", dst / name)
        shutil.copy(manifest_path(str(src / f"part{k}.gz")), manifest_path(str(dst / name)))


def refusal(out: Path, paths: list[str]) -> str:
    with pytest.raises(RescorerError) as exc:
        merge(str(out), paths)
    assert not out.exists() and not list(out.parent.glob(f".{out.name}.*"))
    return str(exc.value)


def test_merge_refuses_a_missing_or_duplicate_shard(shards: Path, tmp_path: Path) -> None:
    out = tmp_path / "merged.gz"
    assert "missing shard(s) 2/3" in refusal(out, [parts(shards)[0], parts(shards)[2]])
    copy_parts(shards, tmp_path, [2], {2: 9})
    message = refusal(out, [*parts(shards), str(tmp_path / "part9.gz")])
    assert "shard 2/3 given twice" in message and "part9.gz" in message


def test_merge_refuses_a_part_whose_bytes_changed(shards: Path, tmp_path: Path) -> None:
    copy_parts(shards, tmp_path, [1, 2, 3])
    with open(tmp_path / "part2.gz", "ab") as f:
        f.write(gzip.compress(b"x ||| y ||| 1 1 1 1 ||| |||\n"))
    message = refusal(tmp_path / "merged.gz", parts(tmp_path))
    assert "shard 2/3" in message and "part2.gz" in message and "no longer match" in message
    copy_parts(shards, tmp_path, [2])
    data = bytearray((tmp_path / "part2.gz").read_bytes())
    data[100] ^= 1  # same size, other bytes
    (tmp_path / "part2.gz").write_bytes(bytes(data))
    assert "sha256 differs" in refusal(tmp_path / "merged.gz", parts(tmp_path))


def test_merge_refuses_parts_without_a_manifest(shards: Path, tmp_path: Path) -> None:
    copy_parts(shards, tmp_path, [1, 2, 3])
    os.remove(manifest_path(str(tmp_path / "part3.gz")))
    message = refusal(tmp_path / "merged.gz", parts(tmp_path))
    assert "part3.gz: has no manifest" in message


def test_merge_refuses_mismatched_shards(
    shards: Path, models: tuple[Path, Path], tmp_path: Path
) -> None:
    out = tmp_path / "merged.gz"
    run(tmp_path / "model-b.gz", models[1], (2, 3))
    message = refusal(out, [parts(shards)[0], str(tmp_path / "model-b.gz"), parts(shards)[2]])
    assert "shard 2/3" in message and "model-b.gz" in message and "another model" in message
    run(tmp_path / "logp.gz", models[0], (2, 3), column="logp")
    message = refusal(out, [parts(shards)[0], str(tmp_path / "logp.gz"), parts(shards)[2]])
    assert "another options" in message and "column 'logp'" in message
    run(tmp_path / "of4.gz", models[0], (2, 4))
    message = refusal(out, [parts(shards)[0], str(tmp_path / "of4.gz"), parts(shards)[2]])
    assert "shard 2/4" in message and "one of 4 shards" in message
    run(tmp_path / "bigchunks.gz", models[0], (2, 3), chunk_bytes=CHUNK * 2)
    message = refusal(out, [parts(shards)[0], str(tmp_path / "bigchunks.gz"), parts(shards)[2]])
    assert "chunk_bytes" in message


def test_merge_refuses_a_shard_of_another_input(
    shards: Path, models: tuple[Path, Path], tmp_path: Path
) -> None:
    other = tmp_path / "other.gz"
    lines = gzip.decompress(SLICE.read_bytes()).splitlines(keepends=True)
    other.write_bytes(gzip.compress(b"".join(lines[:-1])))  # one line fewer
    config = ScoreConfig(shard=(3, 3), device="cpu", precision="fp32", chunk_bytes=CHUNK)
    score_table(str(other), str(models[0]), str(tmp_path / "p3.gz"), config)
    message = refusal(tmp_path / "m.gz", [*parts(shards)[:2], str(tmp_path / "p3.gz")])
    assert "shard 3/3" in message and "another input table" in message


def test_merge_refuses_to_overwrite_a_part(shards: Path, tmp_path: Path) -> None:
    copy_parts(shards, tmp_path, [1, 2, 3])
    before = (tmp_path / "part1.gz").read_bytes()
    with pytest.raises(RescorerError, match="is one of the parts"):
        merge(str(tmp_path / "part1.gz"), parts(tmp_path))
    assert (tmp_path / "part1.gz").read_bytes() == before


def test_more_shards_than_chunks_merge_to_the_single_run(
    models: tuple[Path, Path], tmp_path: Path
) -> None:
    """Empty shards (their ranges hold no chunk) write an empty gzip member that the merge
    leaves out, as a single run writes none."""
    big = 1 << 17  # two chunks
    run(tmp_path / "whole.gz", models[0], chunk_bytes=big)
    for k in range(1, 6):
        run(tmp_path / f"part{k}.gz", models[0], (k, 5), chunk_bytes=big)
    empty = [
        k
        for k in range(1, 6)
        if json.loads(Path(manifest_path(parts(tmp_path, 5)[k - 1])).read_text())["lines"]["in"]
        == 0
    ]
    assert empty, "the test needs empty shards"
    merge(str(tmp_path / "merged.gz"), parts(tmp_path, 5))
    assert (tmp_path / "merged.gz").read_bytes() == (tmp_path / "whole.gz").read_bytes()


def test_plain_text_shards_merge_too(models: tuple[Path, Path], tmp_path: Path) -> None:
    run(tmp_path / "whole.txt", models[0])
    paths = [str(tmp_path / f"p{k}.txt") for k in (1, 2)]
    for k, path in enumerate(paths, start=1):
        run(Path(path), models[0], (k, 2))
    merge(str(tmp_path / "merged.txt"), paths)
    assert (tmp_path / "merged.txt").read_bytes() == (tmp_path / "whole.txt").read_bytes()


def test_resume_leaves_a_finished_shard_as_it_is(models: tuple[Path, Path], tmp_path: Path) -> None:
    """A requeued task that had finished: --resume finds OUT as its manifest says and redoes
    nothing (OUT not rewritten); with OUT changed since, it scores the range again."""
    out = tmp_path / "p2.gz"
    run(out, models[0], (2, 3), resume=True)
    before = (out.stat().st_mtime_ns, out.read_bytes())
    config = ScoreConfig(
        shard=(2, 3), resume=True, device="cpu", precision="fp32", chunk_bytes=CHUNK
    )
    stats = score_table(str(SLICE), str(models[0]), str(out), config)
    assert stats.already_done and stats.pairs_scored == 0 and stats.lines_out > 0
    assert (out.stat().st_mtime_ns, out.read_bytes()) == before
    out.write_bytes(before[1][:-10])  # damaged since: scored again, as before
    stats = score_table(str(SLICE), str(models[0]), str(out), config)
    assert not stats.already_done and out.read_bytes() == before[1]


def test_merge_command_with_a_manifest_glob(shards: Path, tmp_path: Path) -> None:
    copy_parts(shards, tmp_path, [1, 2, 3])
    out = tmp_path / "merged.gz"
    result = CliRunner().invoke(
        cli, ["merge", str(out), "--manifest-glob", str(tmp_path / "part*.gz.manifest.json")]
    )
    assert result.exit_code == 0, result.output
    assert "merged 3 shards" in result.output and "scored on cpu" in result.output
    assert out.read_bytes() == (shards / "whole.gz").read_bytes()
    result = CliRunner().invoke(cli, ["merge", str(tmp_path / "m2.gz")])
    assert result.exit_code == 1 and "give the PART files or --manifest-glob" in result.output


def test_merge_takes_its_output_as_every_command_does(shards: Path, tmp_path: Path) -> None:
    """Issue 39, item 7: merge took OUT as its first argument where every other command takes
    -o. Now -o OUT (anywhere), the older form still working for existing scripts."""
    copy_parts(shards, tmp_path, [1, 2, 3])
    parts = [str(tmp_path / f"part{k}.gz") for k in (1, 2, 3)]
    whole = (shards / "whole.gz").read_bytes()
    for args in (["-o", str(tmp_path / "a.gz"), *parts], [*parts, "-o", str(tmp_path / "b.gz")],
                 [str(tmp_path / "c.gz"), *parts]):  # fmt: skip
        result = CliRunner().invoke(cli, ["merge", *args])
        assert result.exit_code == 0, result.output
    assert [(tmp_path / f"{x}.gz").read_bytes() == whole for x in "abc"] == [True] * 3
    glob = str(tmp_path / "part*.gz.manifest.json")
    result = CliRunner().invoke(
        cli, ["merge", "--manifest-glob", glob, "-o", str(tmp_path / "d.gz")]
    )
    assert result.exit_code == 0 and (tmp_path / "d.gz").read_bytes() == whole, result.output
    result = CliRunner().invoke(cli, ["merge", "--manifest-glob", glob])
    assert result.exit_code == 2 and "rescorer merge: error: give the output: -o OUT" in (
        result.stderr
    ), result.output


def test_a_manifest_left_half_written_by_a_killed_run_is_cleaned_up(
    models: tuple[Path, Path], tmp_path: Path
) -> None:
    """A run killed while writing its manifest leaves the temporary file; the next run on the
    same output (it holds the lock, so that run is gone) removes it."""
    out = tmp_path / "p1.gz"
    leftover = tmp_path / ".p1.gz.manifest.json.k1ll3d.tmp"
    leftover.write_text("{")
    run(out, models[0], (1, 3), resume=True)
    assert not leftover.exists() and Path(manifest_path(str(out))).exists()


def test_merge_counts_the_lines_it_writes(shards: Path, tmp_path: Path) -> None:
    """Merge reported the line counts its manifests claimed (issue 29 item 4): a manifest
    whose lines.out was edited is now refused, and the counts reported are the lines written."""
    copy_parts(shards, tmp_path, [1, 2, 3])
    stats = merge(str(tmp_path / "ok.gz"), parts(tmp_path))
    assert stats.lines_out == len(gzip.decompress((tmp_path / "ok.gz").read_bytes()).splitlines())
    path = Path(manifest_path(str(tmp_path / "part2.gz")))
    manifest = json.loads(path.read_text())
    manifest["lines"]["out"] += 1
    path.write_text(json.dumps(manifest))  # in != out + bad: the manifest's own check
    assert "part2.gz" in refusal(tmp_path / "m.gz", parts(tmp_path))
    manifest["lines"]["in"] += 1
    path.write_text(json.dumps(manifest))  # consistent, but not what the parts hold
    message = refusal(tmp_path / "m.gz", parts(tmp_path))
    assert "part3.gz" in message and "line 1464" in message  # the next part's start disagrees


def test_shards_are_cut_at_the_chunk_boundaries_nearest_an_even_split() -> None:
    """Issue 39, item 9: shards by bytes came out 21,710 / 10,392 / 4,559 lines: a chunk went
    to the shard of its first byte, so on a table a few chunks long the first shard took two.
    Now a chunk goes where its middle lies (each boundary the one nearest k T / N), and a shard
    far from its share says why (whole chunks)."""
    from rescorer.io.chunks import shard_bounds, shard_note

    ranges = [shard_bounds(str(SLICE), 65536, (k, 3)) for k in (1, 2, 3)]
    sizes = [r.end - r.start for r in ranges]
    assert sum(sizes) == ranges[0].input_bytes and ranges[0].start == 0
    assert ranges[0].end == ranges[1].start and ranges[1].end == ranges[2].start
    assert max(sizes) < 2 * min(sizes), sizes  # by first byte: 131,028 / 65,578 / 41,608
    notes = [shard_note(r, 65536, (k, 3)) for k, r in enumerate(ranges, start=1)]
    assert notes[:2] == [None, None]
    assert notes[2] is not None and notes[2].startswith("shard 3/3 holds 0.10 MiB of the 0.23")
    assert "a smaller --chunk-bytes evens them" in notes[2]
