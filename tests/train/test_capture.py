"""The fixed-shape update of ``train --capture`` (rescorer/train/capture.py) on the CPU: the
same code a CUDA graph captures, run eagerly, computes today's eager update (train_step) on the
same batches, padded rows and a short batch included; a non-finite gradient skips the step
through the device-side mask, as ClippedAdadelta skips it."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from conftest import SLICE
from test_step import adadelta, fresh_model, real_pairs

from rescorer.batching import PairArrays, bucket_of, bucketed_batches, length_bounds
from rescorer.cli import cli
from rescorer.constants import TRAIN_LOG_FILE, TRAIN_STATE_FILE
from rescorer.train.capture import StaticUpdate, capture_mode, describe_mode, padded_batch
from rescorer.train.loop import train_step
from rescorer.train.optim import ClippedAdadelta

UPDATES = 20


def bucket_plan(pairs: PairArrays, batch_size: int) -> list[tuple[np.ndarray, int]]:
    """(pair indices, padded length) of the first UPDATES bucketed batches."""
    lengths = np.maximum(pairs.src_lens, pairs.tgt_lens)
    bounds = length_bounds(lengths)
    batches = bucketed_batches(lengths, batch_size, seed=1, epoch=0, bounds=bounds)
    short = [b for b in batches if len(b) < batch_size]  # a short batch, padded with empty rows
    plan = short[:1] + batches[: UPDATES - 1]
    return [(b, int(bounds[bucket_of(lengths[b[:1]], bounds)[0]])) for b in plan]


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["eager", "compile"])
def test_the_fixed_shape_update_is_the_eager_update(mode: str) -> None:
    pairs = real_pairs(SLICE, n=600)
    plan = bucket_plan(pairs, 24)
    assert len({length for _, length in plan}) >= 2  # several shapes, the short batch first
    if mode == "compile":  # the short batch's shape only: each shape compiles for 40-50 s on a
        # CPU; the eager mode takes every shape through the same buffers
        plan = [(index, length) for index, length in plan if length == plan[0][1]]
        assert len(plan) >= 2  # the short batch, then full ones of its shape
    eager, static = fresh_model(), fresh_model()
    optim = ClippedAdadelta(adadelta(eager), compiled=False)
    update = StaticUpdate(static, adadelta(static), 1.0, "fp32", 24, mode=mode)
    for index, length in plan:
        want = train_step(eager, optim, pairs.batch(index), "fp32", 1.0)
        update(pairs, index, length)
        got, bad, skipped = update.take()
        assert got == pytest.approx(want, rel=1e-5)
        assert (bad, skipped) == (0, 0)
    for (name, a), b in zip(eager.named_parameters(), static.parameters(), strict=True):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-5, msg=name)
    for a, b in zip(optim.optim.state.values(), update.optim.state.values(), strict=True):
        torch.testing.assert_close(b["square_avg"], a["square_avg"], rtol=1e-4, atol=1e-9)
        assert float(b["step"]) == float(a["step"]) == len(plan)


def test_padded_batch_pads_to_the_shape_with_empty_rows() -> None:
    pairs = real_pairs(SLICE, n=50)
    index = np.array([3, 1, 4])
    batch = padded_batch(pairs, index, batch_size=5, length=12)
    assert [tuple(t.shape) for t in batch] == [(5, 12), (5,), (5, 12), (5,)]
    assert batch.src_lens.tolist()[3:] == [1, 1] and batch.tgt_lens.tolist()[3:] == [0, 0]
    plain = pairs.batch(index)
    for padded, ids, lens in ((batch.src_ids, plain.src_ids, plain.src_lens),
                              (batch.tgt_ids, plain.tgt_ids, plain.tgt_lens)):  # fmt: skip
        assert torch.equal(padded[:3, : ids.shape[1]], ids)
        assert not padded[:, ids.shape[1] :].any() and not padded[3:].any()
        assert torch.equal(lens, plain.src_lens if ids is plain.src_ids else plain.tgt_lens)


def test_a_non_finite_gradient_skips_the_step_on_the_device() -> None:
    """ClippedAdadelta reads the norm and returns False; the fixed-shape update never reads it
    on the host and yet changes nothing (weights, Adadelta's state, its step count) and counts
    the skip and the non-finite loss."""
    pairs = real_pairs(SLICE, n=200)
    (index, length), (index2, length2) = bucket_plan(pairs, 16)[:2]
    eager, static = fresh_model(), fresh_model()
    optim = ClippedAdadelta(adadelta(eager), compiled=False)
    update = StaticUpdate(static, adadelta(static), 1.0, "fp32", 16, mode="eager")
    train_step(eager, optim, pairs.batch(index), "fp32", 1.0)  # a normal step first
    update(pairs, index, length)
    update.take()
    for model in (eager, static):
        with torch.no_grad():
            model.out_vocab.bias[5] = float("inf")  # every loss is now inf, its gradient nan
    before = [p.detach().clone() for p in static.parameters()]
    state_before = [
        {k: v.clone() for k, v in s.items()} for s in update.optim.state.values()
    ]  # fmt: skip
    train_step(eager, optim, pairs.batch(index2), "fp32", 1.0)
    update(pairs, index2, length2)
    loss, bad, skipped = update.take()
    assert not np.isfinite(loss) and (bad, skipped) == (1, 1)
    for p, q, r in zip(static.parameters(), before, eager.parameters(), strict=True):
        assert torch.equal(p.nan_to_num(), q.nan_to_num())  # not a weight moved
        torch.testing.assert_close(p.nan_to_num(), r.detach().nan_to_num(), rtol=1e-4, atol=1e-6)
    for s, old in zip(update.optim.state.values(), state_before, strict=True):
        for key in old:
            assert torch.equal(s[key], old[key]), key
    assert float(next(iter(update.optim.state.values()))["step"]) == 1


def test_capture_auto_is_off_until_the_gpu_tests_pass_and_on_opts_in() -> None:
    """Issue 64, item 7: auto chose CUDA graphs on a GPU, where they have never run; now auto is
    the tested path (what off does) on every device, --capture on opts in, and the first line
    says so on a GPU (the choice is made from the device's type: no GPU needed here)."""
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert capture_mode("auto", cpu) == "" and capture_mode("auto", cuda) == ""
    assert capture_mode("on", cuda) == "graph"  # the opt-in
    assert capture_mode("on", cpu) == "eager"  # no graphs on a CPU
    assert capture_mode("compile", cuda) == "compile"
    assert capture_mode("off", cuda) == ""
    said = describe_mode("", "auto", cuda)
    assert said.startswith("the update eager (--capture auto: ") and "--capture on" in said
    assert describe_mode("", "auto", cpu) == "the update eager (--capture auto)"
    assert describe_mode("", "off", cuda) == "the update eager (--capture off)"
    assert describe_mode("graph", "on", cuda).endswith("replayed as a CUDA graph (--capture on)")


def test_train_capture_on_runs_the_fixed_shape_update_end_to_end(tmp_path: Path) -> None:
    """rescorer train --capture on (the CPU: no graph, the same fixed-shape update): the first
    line says the batch and the mode, the batches are bucketed, the losses are read back every
    --log-every updates, and the run resumes with its bucketed order."""
    out = tmp_path / "model"
    argv = ["train", str(SLICE), "-o", str(out), "--device", "cpu", "--precision", "fp32",
            "--hidden-size", "12", "--embed-size", "8", "--maxout-units", "6",
            "--src-vocab-size", "300", "--tgt-vocab-size", "300", "--batch-size", "16",
            "--valid-every", "5", "--log-every", "3", "--compile", "no",
            "--threads", "1"]  # fmt: skip
    result = CliRunner().invoke(cli, [*argv, "--capture", "on", "--max-updates", "6"])
    assert result.exit_code == 0, result.output
    first = result.output.splitlines()[0]
    assert first.startswith("rescorer train: device cpu, ") and "; batch 16;" in first
    assert "the update at fixed shapes (length buckets), run eagerly" in first
    assert "(--capture on)" in first
    assert re.search(
        r"starting the updates; [2-5] shapes \(padded lengths [\d, ]+\)", result.output
    )
    records = [json.loads(line) for line in (out / TRAIN_LOG_FILE).read_text().splitlines()]
    losses = [r["train_loss"] for r in records if "train_loss" in r]
    assert len(losses) == 2 and all(math.isfinite(x) and x > 0 for x in losses)
    state = torch.load(out / TRAIN_STATE_FILE, weights_only=False)
    assert state["run"]["order"] == "buckets"
    # resumed eagerly: the run keeps its bucketed order (the eager update takes any batch)
    resumed = CliRunner().invoke(cli, [*argv, "--resume", "--max-updates", "9", "--capture", "off"])
    assert resumed.exit_code == 0, resumed.output
    assert "the update eager (--capture off)" in resumed.output.splitlines()[0]
    run = torch.load(out / TRAIN_STATE_FILE, weights_only=False)["run"]
    assert (run["update"], run["order"]) == (9, "buckets")


def test_batch_size_auto_is_the_papers_on_a_cpu_and_says_so(tmp_path: Path) -> None:
    out = tmp_path / "model"
    argv = ["train", str(SLICE), "-o", str(out), "--device", "cpu", "--precision", "fp32",
            "--hidden-size", "8", "--embed-size", "6", "--maxout-units", "5",
            "--src-vocab-size", "200", "--tgt-vocab-size", "200", "--max-updates", "1",
            "--compile", "no", "--threads", "1"]  # fmt: skip
    result = CliRunner().invoke(cli, argv)
    assert result.exit_code == 0, result.output
    first = result.output.splitlines()[0]
    assert "; batch 64 (--batch-size auto on a CPU: the paper's; in 20 minutes" in first, first
    assert "the update eager (--capture auto)" in first
    config = json.loads((out / "config.json").read_text())["train"]
    assert config["batch_size"] == 64 and config["batch_auto"] is True
    help_text = CliRunner().invoke(cli, ["train", "--help"]).output
    assert "not yet measured on a GPU" in " ".join(help_text.split())
    assert "64 on a CPU (the paper's, which learns faster there than 256)" in " ".join(
        help_text.split()
    )
    bad = CliRunner().invoke(cli, [*argv[:3], "-o", str(tmp_path / "x"), "--batch-size", "0"])
    assert bad.exit_code == 2 and "0 is not in the range 1<=x<=65536 or auto" in bad.output


def test_the_warm_up_runs_before_a_capture_change_nothing() -> None:
    """StaticUpdate.capture warms up with the mask off: on the CPU, the same body with
    ``enabled`` false leaves the weights, Adadelta's state and the totals as they were."""
    pairs = real_pairs(SLICE, n=200)
    index, length = bucket_plan(pairs, 16)[1]
    model = fresh_model()
    update = StaticUpdate(model, adadelta(model), 1.0, "fp32", 16, mode="eager")
    update(pairs, index, length)  # one real update: the state is not zero
    before = [p.detach().clone() for p in model.parameters()]
    state = [{k: v.clone() for k, v in s.items()} for s in update.optim.state.values()]
    totals = update.totals.clone()
    update.enabled.fill_(False)
    for _ in range(2):
        update.body(update.inputs[length])
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), before, strict=True))
    for s, old in zip(update.optim.state.values(), state, strict=True):
        assert all(torch.equal(s[k], old[k]) for k in old)
    assert torch.equal(update.totals, totals)
