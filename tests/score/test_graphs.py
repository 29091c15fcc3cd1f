"""The scorer's bucketed shapes (rescorer/score/graphs.py) on the CPU: ``capture="on"`` forces
the bucketed path there (no CUDA graphs); the scores are the exact path's, the shapes few, and
the CPU's default path is the exact one, as before. The captured graphs are tested on a GPU
(tests/score/test_gpu.py)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from conftest import SLICE

from rescorer.io.table import read_table
from rescorer.model.encdec import EncoderDecoder, ModelConfig, init_weights_
from rescorer.score.graphs import ROW_FLOOR, bucket, bucket_plan, capture_mode, describe_capture
from rescorer.score.pairs import GroupedPairs, encode_pairs
from rescorer.score.plan import plan_chunk
from rescorer.score.scorer import Scorer
from rescorer.vocab import Vocab, build_vocabs


def slice_model(
    tiny_config: ModelConfig,
) -> tuple[EncoderDecoder, list[tuple[str, str]], Vocab, Vocab]:
    """conftest's tiny sizes with the slice's shortlists, weights moved far from the initial
    ones (so that scores differ a lot)."""
    pairs = [(e.src, e.tgt) for e in read_table(str(SLICE))]
    src_vocab, tgt_vocab = build_vocabs(pairs, 300, 300)
    config = ModelConfig(
        300,
        300,
        hidden_size=tiny_config.hidden_size,
        embed_size=tiny_config.embed_size,
        maxout_units=tiny_config.maxout_units,
    )
    torch.manual_seed(0)
    model = EncoderDecoder(config)
    init_weights_(model, torch.Generator().manual_seed(0))
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.2 * torch.randn_like(p))
    return model.eval(), pairs, src_vocab, tgt_vocab


def test_buckets_are_few_multiples_of_8_and_waste_at_most_a_quarter() -> None:
    sizes = [bucket(n) for n in range(1, 262_145)]
    assert all(b >= n for n, b in enumerate(sizes, 1))
    assert all(b % 8 == 0 for b in sizes)
    assert all(b <= 1.25 * n for n, b in enumerate(sizes, 1) if n > ROW_FLOOR)
    assert sizes == sorted(sizes) and bucket(bucket(1000)) == bucket(1000)
    assert len(set(sizes)) == 49  # 64, then four per octave up to 262,144
    assert [bucket(n) for n in (1, 64, 65, 100, 129, 1000)] == [64, 64, 80, 112, 160, 1024]


def test_capture_modes() -> None:
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert [capture_mode(c, cpu) for c in ("auto", "on", "off")] == ["", "bucket", ""]
    # issue 64, item 7: auto is off on a GPU too until the GPU tests pass there; on opts in
    assert [capture_mode(c, cuda) for c in ("auto", "on", "off")] == ["", "graph", ""]
    with pytest.raises(ValueError, match="--capture 'yes'"):
        capture_mode("yes", cpu)
    assert describe_capture("graph", "on", cuda) == (
        "bucketed shapes replayed as CUDA graphs (--capture on)"
    )
    said = describe_capture("", "auto", cuda)  # the first line on a GPU says why and how
    assert said.startswith("exact shapes, eagerly (--capture auto: ") and "--capture on" in said
    assert describe_capture("", "auto", cpu) == "exact shapes, eagerly (--capture auto)"


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_forced_buckets_give_the_exact_paths_scores(
    tiny_config: ModelConfig, precision: str
) -> None:
    """The slice's 2,090 real pairs with several readout blocks per level: the bucketed path's
    scores are the exact path's within 1e-5 nats, and it did run bucketed shapes only."""
    model, pairs, src_vocab, tgt_vocab = slice_model(tiny_config)
    batch = encode_pairs(src_vocab, tgt_vocab, pairs)
    exact = Scorer(model, precision)
    bucketed = Scorer(model, precision, capture="on")
    for scorer in (exact, bucketed):
        scorer.readout_rows = 200  # several blocks per level, the last one shorter
    a, b = exact.score(batch), bucketed.score(batch)
    np.testing.assert_allclose(b, a, rtol=0, atol=1e-5)
    assert np.ptp(a) > 10  # scores that differ, so the comparison means something
    assert bucketed.steps is not None and exact.steps is None
    shapes = bucketed.steps.shapes
    assert {kind for kind, _ in shapes} == {"encoder", "decoder", "readout"}
    assert all(rows == bucket(rows) or rows == 200 for _, rows in shapes)
    assert bucketed.work == exact.work  # the work counted is the real rows', not the padding


def test_a_parse_workers_plan_is_bucketed_too(tiny_config: ModelConfig) -> None:
    """score --workers hands the scorer plans made in a worker (plan_chunk, unbucketed): the
    scorer pads them itself, and bucketing a plan twice changes nothing."""
    model, pairs, src_vocab, tgt_vocab = slice_model(tiny_config)
    batch = encode_pairs(src_vocab, tgt_vocab, pairs[:700])
    scorer = Scorer(model, "fp32", capture="on")
    plan = plan_chunk(batch, model.config.tgt_rows, scorer.readout_rows)
    np.testing.assert_array_equal(scorer.submit(batch, plan).result(), scorer.score(batch))
    once = bucket_plan(plan, scorer.readout_rows)
    twice = bucket_plan(once, scorer.readout_rows)
    assert all(np.array_equal(a, b) for a, b in zip(once.arrays, twice.arrays, strict=True))
    assert any(len(a) != len(b) for a, b in zip(once.arrays, plan.arrays, strict=True))


def spy_rows(model: EncoderDecoder) -> dict[str, set[int]]:
    """The row counts the model's encoder step, decoder step and readout products run at,
    recorded from here on (the eager and the bucketed paths call these three)."""
    seen: dict[str, set[int]] = defaultdict(set)

    def spy(kind: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any) -> Any:
            seen[kind].add(len(args[0]))
            return fn(*args)

        return call

    model.enc_rec.step = spy("encoder", model.enc_rec.step)  # type: ignore[method-assign]
    model.dec_rec.step = spy("decoder", model.dec_rec.step)  # type: ignore[method-assign]
    model._unbiased_logits = spy("readout", model._unbiased_logits)  # type: ignore[method-assign]
    return seen


def chunks_of_many_sizes(
    pairs: list[tuple[str, str]], src: Vocab, tgt: Vocab
) -> list[GroupedPairs]:
    """The slice cut into chunks of 37, 54, 71, ... pairs: levels of many row counts."""
    chunks, start = [], 0
    for size in range(37, 400, 17):
        chunks.append(encode_pairs(src, tgt, pairs[start : start + size]))
        start = (start + size) % (len(pairs) - 400)
    return chunks


def test_distinct_shapes_are_bounded_by_the_buckets(tiny_config: ModelConfig) -> None:
    """Over real chunks of many sizes the bucketed path runs each computation at no more row
    counts than there are buckets up to its largest (on a GPU: no more graphs); the exact path,
    the CPU's default, runs more steps' shapes (a new shape, new kernels, nothing to replay).
    Its readout blocks were already padded to multiples of 64 (encdec.ROW_BUCKET): as many
    shapes as buckets at these sizes, but one per 64 rows up to a GPU's 163,840."""
    model, pairs, src_vocab, tgt_vocab = slice_model(tiny_config)
    chunks = chunks_of_many_sizes(pairs, src_vocab, tgt_vocab)
    counts = {}
    for capture in ("on", "auto"):
        seen = spy_rows(model)
        scorer = Scorer(model, "fp32", capture=capture)
        for chunk in chunks:
            scorer.score(chunk)
        counts[capture] = {kind: len(rows) for kind, rows in seen.items()}
        if capture == "on":
            bounds = {
                kind: len({bucket(n) for n in range(1, max(rows) + 1)})
                for kind, rows in seen.items()
            }
        del model.enc_rec.step, model.dec_rec.step, model._unbiased_logits
    for kind in ("encoder", "decoder", "readout"):
        assert counts["on"][kind] <= bounds[kind], (kind, counts, bounds)
    for kind in ("encoder", "decoder"):
        assert counts["auto"][kind] > bounds[kind], (kind, counts, bounds)  # without buckets


def test_the_cpus_default_path_is_the_exact_one(tiny_config: ModelConfig) -> None:
    """auto on a CPU is today's path: no buckets, the same scores to the bit as --capture off
    (scripts/check_identity.py checks a scored table's bytes against the commit before)."""
    model, pairs, src_vocab, tgt_vocab = slice_model(tiny_config)
    batch = encode_pairs(src_vocab, tgt_vocab, pairs[:500])
    default, off = Scorer(model, "fp32"), Scorer(model, "fp32", capture="off")
    assert default.capture == off.capture == "" and default.steps is None
    np.testing.assert_array_equal(default.score(batch), off.score(batch))


def test_score_capture_option(tmp_path: Any) -> None:
    """``score --capture``: auto, on or off; anything else a usage error naming the choices,
    from the command line and from a ScoreConfig made in code."""
    from faults import run

    from rescorer.errors import RescorerError
    from rescorer.score.config import ScoreConfig

    proc = run(["score", "--capture", "yes", str(SLICE), "-m", str(tmp_path), "-o", "-"])
    assert proc.returncode == 2 and "'yes' is not one of 'auto', 'on', 'off'" in proc.stderr
    assert ScoreConfig().capture == "auto"
    with pytest.raises(RescorerError, match="--capture 'yes': expected auto, on or off"):
        ScoreConfig(capture="yes")


def test_score_runs_the_capture_it_is_given_and_says_so(tmp_path: Any) -> None:
    """``score --capture on`` on a CPU runs the bucketed shapes: its first line says so, a
    shard's manifest records it (parts merged must agree), and the scores are the exact
    path's within 1e-5; the default's first line and manifest are as before."""
    import gzip
    import json

    from faults import run

    from rescorer.job.shards import manifest_path
    from rescorer.model.checkpoint import save_model_dir
    from rescorer.model.encdec import ModelConfig as Config

    model, _, src_vocab, tgt_vocab = slice_model(Config(300, 300, 16, 8, maxout_units=8))
    save_model_dir(tmp_path / "m", model, src_vocab, tgt_vocab, {"made_by": "test_graphs"})
    outs = {}
    for choice in ("auto", "on"):
        out = tmp_path / f"{choice}.gz"
        argv = ["score", str(SLICE), "-m", str(tmp_path / "m"), "-o", str(out), "--shard", "1/1"]
        proc = run([*argv, "--capture", choice, "--device", "cpu", "--precision", "fp32"])
        assert proc.returncode == 0, proc.stderr
        first = proc.stderr.splitlines()[0]
        manifest = json.loads(Path(manifest_path(str(out))).read_text())
        options = json.dumps(manifest)
        if choice == "on":
            assert first.endswith("bucketed shapes, eagerly (--capture on)"), first
            assert '"capture": "bucket"' in options
        else:
            assert "capture" not in first and '"capture"' not in options, first
        lines = gzip.decompress(out.read_bytes()).splitlines()
        outs[choice] = [float(line.split(b" ||| ")[2].split()[-1]) for line in lines]
    np.testing.assert_allclose(outs["on"], outs["auto"], atol=1e-5, rtol=0)
