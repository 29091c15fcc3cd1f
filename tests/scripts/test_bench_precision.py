"""scripts/bench_precision.py's TF32 emulation: the rounding is TF32's, and every matrix product
of the model goes through it."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch
from conftest import ROOT

sys.path.insert(0, str(ROOT / "scripts"))
from bench_precision import TF32Products, round_tf32

from rescorer.model.encdec import EncoderDecoder, ModelConfig, init_weights_


def reference_tf32(x: np.ndarray, rounding: str) -> np.ndarray:
    """Keep 11 significant bits (1 + TF32's 10), by frexp: the rounding as arithmetic."""
    m, e = np.frexp(x.astype(np.float64))  # x = m 2^e, 0.5 <= |m| < 1
    kept = np.rint(m * 2**11) if rounding == "nearest" else np.trunc(m * 2**11)
    return np.ldexp(kept / 2**11, e).astype(np.float32)


@pytest.mark.parametrize("rounding", ["nearest", "truncate"])
def test_round_tf32_keeps_ten_mantissa_bits(rounding: str) -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal(50_000) * 10.0 ** rng.integers(-30, 30, 50_000)
    ties = [1 + 2**-11, 1 + 3 * 2**-11, -(1 + 2**-11), 1024.5, 1025.5]  # halfway cases
    x = np.concatenate([x, ties, [0.0, -0.0, 3.4e38]]).astype(np.float32)
    got = round_tf32(torch.from_numpy(x), rounding).numpy()
    np.testing.assert_array_equal(got, reference_tf32(x, rounding))
    if rounding == "nearest":  # ties to even
        assert got[-8:-3].tolist() == [1.0, 1 + 2**-9, -1.0, 1024.0, 1026.0]
    special = torch.tensor([float("inf"), float("-inf"), float("nan")])
    assert torch.equal(round_tf32(special, rounding)[:2], special[:2])
    assert torch.isnan(round_tf32(special, rounding)[2])


def test_every_matrix_product_of_the_scorer_goes_through_the_emulation() -> None:
    """Inside TF32Products the model's products round their operands (its log-probabilities
    move a little from fp32's), and a product equals one done by hand on rounded operands."""
    torch.manual_seed(0)
    model = EncoderDecoder(ModelConfig(50, 60, hidden_size=32, embed_size=8, maxout_units=16))
    init_weights_(model)
    with torch.no_grad():  # spread the scores: N(0, 0.01) weights give near-uniform outputs
        for p in model.parameters():
            p.add_(0.3 * torch.randn_like(p))
    src = torch.randint(3, 50, (4, 5))
    tgt = torch.randint(3, 60, (4, 6))
    lens_s, lens_t = torch.full((4,), 5), torch.full((4,), 6)
    with torch.no_grad():
        fp32 = model(src, lens_s, tgt, lens_t)
        with TF32Products() as mode:
            tf32 = model(src, lens_s, tgt, lens_t)
    assert mode.products > 10
    assert not torch.equal(tf32, fp32)
    torch.testing.assert_close(tf32, fp32, rtol=0, atol=1e-2)
    a, b = torch.randn(7, 300), torch.randn(300, 5)
    with TF32Products():
        product = a @ b
        linear = torch.nn.functional.linear(a, b.T, torch.ones(5))
    ra, rb = round_tf32(a), round_tf32(b)
    assert torch.equal(product, ra @ rb) and not torch.equal(product, a @ b)
    assert torch.equal(linear, torch.addmm(torch.ones(5), ra, rb))  # the bias stays fp32
