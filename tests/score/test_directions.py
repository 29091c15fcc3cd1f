"""``rescorer score -m FWD -m INV`` (issue 24): one column per model in the order given, an
inverse model's p(source | target) equal to a forward scoring of the side-swapped table, one
pass over the table, the word penalty last, shards, resume and the refusals."""

from __future__ import annotations

import gzip
import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from conftest import SLICE

from rescorer.cli import cli
from rescorer.constants import CONFIG_FILE, INVERSE
from rescorer.errors import RescorerError
from rescorer.io.table import read_table
from rescorer.model.checkpoint import load_model_dir, save_model_dir
from rescorer.model.encdec import EncoderDecoder, ModelConfig, init_weights_
from rescorer.score.config import ScoreConfig
from rescorer.score.pairs import encode_inverse
from rescorer.score.pipeline import score_table
from rescorer.score.scorer import Scorer
from rescorer.vocab import build_vocabs

ONE_THREAD = {"OMP_NUM_THREADS": "1"}
LINES = gzip.decompress(SLICE.read_bytes()).decode().splitlines()
PAIRS = [(e.src, e.tgt) for e in read_table(str(SLICE))]
# A progress record per chunk (the kill and interrupt tests count on records being there).
CPU = {
    "device": "cpu", "precision": "fp32", "chunk_bytes": 16384, "quiet": True,
    "checkpoint_every": 0,
}  # fmt: skip


def random_model(folder: Path, pairs: list[tuple[str, str]], seed: int, direction: str) -> Path:
    """A tiny random model over shortlists of ``pairs`` (its own sides), scores spread out."""
    torch.manual_seed(seed)
    src_vocab, tgt_vocab = build_vocabs(pairs, 400, 350)
    model = EncoderDecoder(ModelConfig(400, 350, hidden_size=16, embed_size=8, maxout_units=8))
    init_weights_(model)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.2 * torch.randn_like(p))
    save_model_dir(folder, model, src_vocab, tgt_vocab, {"made_by": __name__}, direction=direction)
    return folder


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("models")
    forward = random_model(root / "fwd", PAIRS, 0, "forward")
    inverse = random_model(root / "inv", [(t, s) for s, t in PAIRS], 1, INVERSE)
    return forward, inverse


def scores_of(path: Path) -> list[list[str]]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [line.split(" ||| ")[2].split(" ") for line in f.read().splitlines()]


def without_scores(path: Path) -> list[list[str]]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [line.split(" ||| ")[:2] + line.split(" ||| ")[3:] for line in f.read().splitlines()]


def test_the_inverse_column_is_the_forward_scoring_of_the_swapped_table(
    tmp_path: Path, models: tuple[Path, Path]
) -> None:
    """Column 2 (the inverse model) equals the column the same weights give as a forward model
    on the table with source and target swapped, line by line, to the last digit; column 1 is
    the forward model's own run; every other field keeps its bytes."""
    forward, inverse = models
    both = tmp_path / "both.gz"
    score_table(
        str(SLICE), [str(forward), str(inverse)], str(both), ScoreConfig(column="logp", **CPU)
    )
    alone = tmp_path / "alone.gz"
    score_table(str(SLICE), str(forward), str(alone), ScoreConfig(column="logp", **CPU))
    # The inverse model relabelled forward, on the swapped table (in the original line order).
    as_forward = tmp_path / "inv-as-fwd"
    shutil.copytree(inverse, as_forward)
    config = json.loads((as_forward / CONFIG_FILE).read_text())
    (as_forward / CONFIG_FILE).write_text(json.dumps({**config, "direction": "forward"}))
    swapped_table = tmp_path / "swapped.gz"
    fields = [line.split(" ||| ") for line in LINES]
    swapped = [" ||| ".join([f[1], f[0], *f[2:]]) for f in fields]
    swapped_table.write_bytes(gzip.compress(("\n".join(swapped) + "\n").encode()))
    swapped_out = tmp_path / "swapped-out.gz"
    score_table(
        str(swapped_table), str(as_forward), str(swapped_out), ScoreConfig(column="logp", **CPU)
    )

    original = [f[2].split(" ") for f in fields]
    got, one, by_swap = scores_of(both), scores_of(alone), scores_of(swapped_out)
    assert len(got) == len(LINES)
    for i, scores in enumerate(got):
        assert scores[:-2] == original[i] and len(scores) == len(original[i]) + 2
        assert scores[-2] == one[i][-1]  # the forward column, as in a run of its own
        assert scores[-1] == by_swap[i][-1], (i, LINES[i])
    assert without_scores(both) == [f[:2] + f[3:] for f in fields]
    # The two directions disagree (they are two models, two features).
    assert sum(s[-1] != s[-2] for s in got) > len(got) // 2


def test_word_penalty_stays_last_and_is_the_forward_model_s(
    tmp_path: Path, models: tuple[Path, Path]
) -> None:
    forward, inverse = models
    one, two = tmp_path / "one.gz", tmp_path / "two.gz"
    score_table(str(SLICE), str(forward), str(one), ScoreConfig(word_penalty=True, **CPU))
    score_table(
        str(SLICE), [str(inverse), str(forward)], str(two), ScoreConfig(word_penalty=True, **CPU)
    )
    for a, b in zip(scores_of(one), scores_of(two), strict=True):
        assert len(b) == len(a) + 1
        assert b[-1] == a[-1] and b[-2] == a[-2]  # WP last; the forward model's column before it


def test_cli_two_models_shards_merge_and_manifest(
    tmp_path: Path, models: tuple[Path, Path]
) -> None:
    forward, inverse = models
    runner = CliRunner()
    base = ["score", str(SLICE), "-m", str(forward), "-m", str(inverse), "--device", "cpu",
            "--precision", "fp32", "--chunk-bytes", "16384", "-q"]  # fmt: skip
    whole = tmp_path / "whole.gz"
    result = runner.invoke(cli, [*base, "-o", str(whole)])
    assert result.exit_code == 0, result.output
    parts = []
    for k in (1, 2, 3):
        part = tmp_path / f"part{k}.gz"
        result = runner.invoke(cli, [*base, "--shard", f"{k}/3", "-o", str(part)])
        assert result.exit_code == 0, result.output
        parts.append(str(part))
    manifest = json.loads(Path(parts[0] + ".manifest.json").read_text())
    hashes = manifest["model"]["sha256"]
    assert isinstance(hashes, list) and len(hashes) == 2 and hashes[0] != hashes[1]
    assert manifest["model_path"] == [str(forward), str(inverse)]
    merged = tmp_path / "merged.gz"
    result = runner.invoke(cli, ["merge", str(merged), *parts, "-q"])
    assert result.exit_code == 0, result.output
    assert merged.read_bytes() == whole.read_bytes()
    # A shard scored with the models the other way round is another run: merge refuses it.
    swapped = tmp_path / "swapped2.gz"
    order = ["-m", str(inverse), "-m", str(forward)]
    args = [a for a in base if a not in ("-m", str(forward), str(inverse))]
    result = runner.invoke(cli, [*args, *order, "--shard", "2/3", "-o", str(swapped)])
    assert result.exit_code == 0, result.output
    bad = runner.invoke(cli, ["merge", str(tmp_path / "m2.gz"), parts[0], str(swapped), parts[2]])
    assert bad.exit_code == 1 and "model" in bad.output


def test_resume_with_other_models_is_refused(tmp_path: Path, models: tuple[Path, Path]) -> None:
    forward, inverse = models
    out = tmp_path / "out.gz"
    # A run stopped after its first chunk leaves OUT.partial and its record.
    config = ScoreConfig(**{**CPU, "chunk_bytes": 4096})
    with pytest.raises(KeyboardInterrupt):
        _interrupt_after_first_chunk(str(out), [str(forward), str(inverse)], config)
    assert Path(str(out) + ".partial.json").exists()
    run = json.loads(Path(str(out) + ".partial.json").read_text())["run"]
    assert run["model_dir"] == [str(forward), str(inverse)] and len(run["model"]) == 2
    resume = ScoreConfig(**{**CPU, "chunk_bytes": 4096, "resume": True})
    for other in ([str(forward)], [str(inverse), str(forward)], [str(forward), str(forward)]):
        with pytest.raises(RescorerError, match="another model directory"):
            score_table(str(SLICE), other, str(out), resume)
    score_table(str(SLICE), [str(forward), str(inverse)], str(out), resume)
    whole = tmp_path / "whole.gz"
    score_table(str(SLICE), [str(forward), str(inverse)], str(whole), config)
    assert out.read_bytes() == whole.read_bytes()


def _interrupt_after_first_chunk(out: str, model_dirs: list[str], config: ScoreConfig) -> None:
    """score_table, interrupted (as by Ctrl-C) once its first chunk is recorded."""
    from rescorer.job import output as output_module

    saved = output_module.Output.checkpoint

    def checkpoint(self: output_module.Output, *args: object, **kwargs: object) -> None:
        saved(self, *args, **kwargs)  # type: ignore[arg-type]
        raise KeyboardInterrupt

    output_module.Output.checkpoint = checkpoint  # type: ignore[method-assign]
    try:
        score_table(str(SLICE), model_dirs, out, config)
    finally:
        output_module.Output.checkpoint = saved  # type: ignore[method-assign]


@pytest.mark.slow
def test_killed_two_model_run_resumes_to_identical_bytes(
    tmp_path: Path, models: tuple[Path, Path]
) -> None:
    """SIGKILL a two-model run part-way through, --resume it: the uninterrupted bytes."""
    import os

    forward, inverse = models
    big = tmp_path / "big.gz"
    lines = [f"{i:02d}{line}" for i in range(6) for line in LINES]
    big.write_bytes(gzip.compress(("\n".join(lines) + "\n").encode()))
    cmd = [sys.executable, "-m", "rescorer", "score", str(big), "-m", str(forward), "-m",
           str(inverse), "--word-penalty", "--device", "cpu", "--precision", "fp32",
           "--chunk-bytes", "8192", "--checkpoint-every", "0.02", "-q"]  # fmt: skip
    env = {**os.environ, **ONE_THREAD}
    whole = tmp_path / "whole.gz"
    subprocess.run([*cmd, "-o", str(whole)], check=True, env=env)
    out = tmp_path / "resumed.gz"
    record = Path(str(out) + ".partial.json")
    proc = subprocess.Popen([*cmd, "-o", str(out)], env=env)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if record.exists() and json.loads(record.read_text() or "{}").get("next_line", 0) > 3000:
            break
        time.sleep(0.01)
    assert proc.poll() is None, "the run ended before it could be killed"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not out.exists() and record.exists()
    done = json.loads(record.read_text())["next_line"]
    assert 1 < done < len(lines)
    subprocess.run([*cmd, "-o", str(out), "--resume"], check=True, env=env)
    assert out.read_bytes() == whole.read_bytes()
    assert len(scores_of(out)[0]) == len(LINES[0].split(" ||| ")[2].split(" ")) + 3


def test_grouping_by_target_saves_the_inverse_model_s_work(models: tuple[Path, Path]) -> None:
    """The slice is sorted by source; grouped by target, the inverse model encodes each target
    once and shares the decoder's prefixes under it. The counts (BENCHMARKS.md, issue 24) and
    the scores do not depend on the grouping."""
    _, inverse = models
    loaded = load_model_dir(inverse)
    src = [s.encode() for s, _ in PAIRS]
    tgt = [t.encode() for _, t in PAIRS]
    work, scores = {}, {}
    for group in (True, False):
        pairs, order = encode_inverse(loaded.src_vocab, loaded.tgt_vocab, src, tgt, group)
        scorer = Scorer(loaded.model, "fp32", 4096)
        logp = scorer.score(pairs)
        in_lines = np.empty_like(logp)
        in_lines[order] = logp
        work[group], scores[group] = scorer.work, in_lines
    np.testing.assert_allclose(scores[True], scores[False], rtol=1e-5, atol=1e-5)
    # The encoder's prefix tree merges equal phrases anyway; the decoder's tree is keyed by
    # (conditioning phrase, prefix): only grouped targets share it (on this random model's
    # 400-word shortlists: 9,432 positions grouped, 9,664 not).
    assert work[True].source_tokens < work[False].source_tokens
    assert work[True].encoder_steps == work[False].encoder_steps
    assert work[True].decoder_positions < work[False].decoder_positions
