"""The captured update on a CUDA device (skipped without one; ``pytest -m gpu``): 20 updates
replayed from CUDA graphs compute the weights and losses of 20 eager updates.

Bounds: fp32 and TF32 against the same fixed-shape update run eagerly, 1e-5 relative (the same
kernels, replayed); fp32 against today's eager update (train_step: the packed forward pass and
the hand-written recurrence backward), 1e-4; TF32 against it 1e-3 and bf16 (autocast) 2e-2
relative on each loss and 5e-3 absolute on the weights (the products round differently in the
two forward passes; these bounds are stated, not yet measured on a GPU). The same code runs on
the CPU in tests/train/test_capture.py (mode eager), which compares it with train_step to 1e-4.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import SLICE
from test_capture import UPDATES, bucket_plan
from test_step import adadelta, fresh_model, real_pairs

from rescorer.batching import PairArrays
from rescorer.model.encdec import EncoderDecoder
from rescorer.train.capture import StaticUpdate
from rescorer.train.loop import train_step
from rescorer.train.optim import ClippedAdadelta

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]
CUDA = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
BATCH = 32


def run_static(
    pairs: PairArrays, plan: list[tuple[np.ndarray, int]], mode: str, precision: str
) -> tuple[EncoderDecoder, StaticUpdate, list[float]]:
    model = fresh_model().to(CUDA)
    update = StaticUpdate(model, adadelta(model), 1.0, precision, BATCH, mode=mode)
    losses = []
    for index, length in plan:
        update(pairs, index, length)
        losses.append(update.take()[0])  # read back each update here, to compare them
    return model, update, losses


def run_eager(
    pairs: PairArrays, plan: list[tuple[np.ndarray, int]], precision: str
) -> tuple[EncoderDecoder, list[float]]:
    model = fresh_model().to(CUDA)
    optim = ClippedAdadelta(adadelta(model), compiled=False)
    losses = [train_step(model, optim, pairs.batch(i, CUDA), precision, 1.0) for i, _ in plan]
    return model, losses


def assert_weights_close(a: torch.nn.Module, b: torch.nn.Module, rtol: float, atol: float) -> None:
    for (name, p), q in zip(a.named_parameters(), b.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=rtol, atol=atol, msg=name)


@pytest.mark.parametrize("precision", ["fp32", "tf32", "bf16"])
def test_the_captured_update_replays_the_eager_fixed_shape_update(precision: str) -> None:
    pairs = real_pairs(SLICE, n=800)
    plan = bucket_plan(pairs, BATCH)
    assert len(plan) == UPDATES
    graph_model, update, graph_losses = run_static(pairs, plan, "graph", precision)
    assert len(update.graphs) == len({length for _, length in plan}) >= 2  # one per shape
    eager_model, _, eager_losses = run_static(pairs, plan, "eager", precision)
    np.testing.assert_allclose(graph_losses, eager_losses, rtol=1e-5)
    assert_weights_close(graph_model, eager_model, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize(
    ("precision", "loss_rtol", "rtol", "atol"),
    [("fp32", 1e-4, 1e-4, 1e-5), ("tf32", 1e-3, 1e-3, 1e-4), ("bf16", 2e-2, 0.0, 5e-3)],
)
def test_the_captured_update_is_todays_eager_update(
    precision: str, loss_rtol: float, rtol: float, atol: float
) -> None:
    pairs = real_pairs(SLICE, n=800)
    plan = bucket_plan(pairs, BATCH)
    graph_model, _, graph_losses = run_static(pairs, plan, "graph", precision)
    eager_model, eager_losses = run_eager(pairs, plan, precision)
    np.testing.assert_allclose(graph_losses, eager_losses, rtol=loss_rtol)
    assert_weights_close(graph_model, eager_model, rtol=rtol, atol=atol)


def test_reduce_overhead_compile_computes_the_same_update() -> None:
    pairs = real_pairs(SLICE, n=800)
    plan = bucket_plan(pairs, BATCH)
    compiled_model, _, compiled_losses = run_static(pairs, plan, "compile", "fp32")
    eager_model, eager_losses = run_eager(pairs, plan, "fp32")
    np.testing.assert_allclose(compiled_losses, eager_losses, rtol=1e-4)
    assert_weights_close(compiled_model, eager_model, rtol=1e-4, atol=1e-5)


def test_no_host_synchronisation_inside_a_replayed_update_and_the_skip_on_the_device() -> None:
    """After the graphs are captured, updates run under torch's sync debug mode "error" (a
    host synchronisation raises); a non-finite gradient then skips its step, counted."""
    pairs = real_pairs(SLICE, n=800)
    plan = bucket_plan(pairs, BATCH)
    model = fresh_model().to(CUDA)
    update = StaticUpdate(model, adadelta(model), 1.0, "fp32", BATCH, mode="graph")
    for index, length in plan:  # every shape captured
        update(pairs, index, length)
    update.take()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for index, length in plan[:5]:
            update(pairs, index, length)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert update.take()[1:] == (0, 0)
    with torch.no_grad():
        model.out_vocab.bias[5] = float("inf")  # in place: the graphs read the same storage
    before = [p.detach().clone() for p in model.parameters()]
    index, length = plan[0]
    update(pairs, index, length)
    loss, bad, skipped = update.take()
    assert not np.isfinite(loss) and (bad, skipped) == (1, 1)
    for p, q in zip(model.parameters(), before, strict=True):
        assert torch.equal(p.nan_to_num(), q.nan_to_num())
