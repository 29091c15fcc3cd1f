"""``train --precision auto`` on a CPU: the precision whose updates of this model run faster on
this machine, where its matrix products alone would say bf16 (issue 66).

The matrix products are where bf16 can win (rescorer.device.measured_training_precision
measures them, once). Where they favour bf16, an update still does its elementwise work in
fp32 and casts every weight and activation to bf16 and back: on an Intel Xeon with AMX the
products ran 7x faster in bf16, while the whole update of the paper's model ran 0.8x as fast
as fp32's (143 against 179 pairs/s compiled, 2026-11-28). So there a few real updates of this
model are timed in each precision (:func:`time_updates`: a fresh model of the run's sizes,
the run's batch size, phrase-pair lengths), and the faster wins; bf16 must win by
UPDATE_MARGIN (at equal speed fp32's exact products are the better buy). Where the products
do not favour bf16 nothing more is timed: its updates, the same products and more, cannot
be faster (on a CPU without bf16 instructions one bf16 update of the paper's model takes
about a minute).

The update speeds are cached beside the products' in rescorer.io.precision_cache's file, one
entry per CPU model, torch version, thread count, model sizes and batch size, with the load
average of the moment (a busy machine's figures are measured again once it is idle).
Eager updates are timed, compiled or not: compiling each precision once would cost minutes.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from rescorer.batching import PairArraysBuilder, PairBatch
from rescorer.device import PrecisionChoice, choose_precision, cpu_model
from rescorer.io.precision_cache import (
    idle,
    measured_busy,
    precision_cache_path,
    read_cache,
    write_cache,
)
from rescorer.model.encdec import EncoderDecoder, ModelConfig

#: bf16's updates must be this much faster than fp32's for auto to train in bf16.
UPDATE_MARGIN = 1.05
PROBE_UPDATES = 3  # timed per precision, after one warm-up update
#: Words per phrase of the probe's pairs, EOS not counted: the en-fr table's phrases are 3.9
#: (source) and 4.4 (target) words long on average.
PROBE_LENGTHS = (1, 2, 3, 4, 5, 6, 7)

#: (model sizes, batch size, precision) -> pairs/s of that precision's updates.
UpdateTimer = Callable[[ModelConfig, int, str], float]


def probe_batch(model_cfg: ModelConfig, batch_size: int) -> PairBatch:
    """``batch_size`` pairs of made-up words (fixed seed), of phrase-pair lengths."""
    gen = torch.Generator().manual_seed(0)
    builder = PairArraysBuilder()
    for i in range(batch_size):
        src_len = PROBE_LENGTHS[i % len(PROBE_LENGTHS)]
        tgt_len = PROBE_LENGTHS[(3 * i + 1) % len(PROBE_LENGTHS)]
        src_vocab, tgt_vocab = model_cfg.src_vocab_size, model_cfg.tgt_vocab_size
        src = torch.randint(1, src_vocab, (src_len,), generator=gen)  # UNK and the words
        tgt = torch.randint(1, tgt_vocab, (tgt_len,), generator=gen)
        builder.add([*src.tolist(), src_vocab], [*tgt.tolist(), tgt_vocab])  # EOS = size
    pairs = builder.build()
    return pairs.batch(torch.arange(len(pairs)).numpy())


def time_updates(model_cfg: ModelConfig, batch_size: int, precision: str) -> float:
    """pairs/s of ``rescorer train``'s eager update (forward, backward, clip, Adadelta) of a
    model of ``model_cfg``'s sizes in ``precision``, on this CPU with torch's threads: the
    best of PROBE_UPDATES, after one that builds the kernels and the memory."""
    from rescorer.train.optim import ClippedAdadelta
    from rescorer.train.step import train_step

    model = EncoderDecoder(model_cfg).train()
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for param in model.parameters():  # the speed is the sizes': no SVD needed
            param.copy_(torch.randn(param.shape, generator=gen) * 0.01)
    adadelta = torch.optim.Adadelta(model.parameters(), lr=1.0, rho=0.95, eps=1e-6)
    update = ClippedAdadelta(adadelta, compiled=False)
    batch = probe_batch(model_cfg, batch_size)
    train_step(model, update, batch, precision, 1.0)
    best = float("inf")
    for _ in range(PROBE_UPDATES):
        start = time.perf_counter()
        train_step(model, update, batch, precision, 1.0)
        best = min(best, time.perf_counter() - start)
    return batch_size / best


def choose_training_precision(
    name: str,
    device: torch.device,
    model_cfg: ModelConfig,
    batch_size: int,
    shapes: Sequence[tuple[int, int, int]] | None = None,
    timer: UpdateTimer | None = None,
) -> PrecisionChoice:
    """rescorer.device.choose_precision's choice for training, and on a CPU where ``auto``'s
    matrix products favour bf16, the faster of bf16's and fp32's updates of this model at
    ``batch_size`` (timed by ``timer``, default :func:`time_updates`; cached); see the
    module docstring."""
    products = choose_precision(name, device, "train", shapes)
    if name != "auto" or device.type != "cpu" or products.precision != "bf16":
        return products
    rates, where = _update_rates(model_cfg, batch_size, timer or time_updates)
    bf16, fp32 = rates["bf16"], rates["fp32"]
    precision = "bf16" if bf16 > UPDATE_MARGIN * fp32 else "fp32"
    favour = products.reason.partition(": ")[2]  # "bf16 979 vs fp32 141 GFLOP/s at ..."
    return PrecisionChoice(
        precision,
        f"precision auto -> {precision}: this model's updates bf16 {bf16:,.0f} vs fp32"
        f" {fp32:,.0f} pairs/s ({where}); its matrix products alone favour bf16: {favour}",
    )


def _update_rates(
    model_cfg: ModelConfig, batch_size: int, timer: UpdateTimer
) -> tuple[dict[str, float], str]:
    """The cached (or now measured) pairs/s of bf16's and fp32's updates, and where from."""
    path = precision_cache_path()
    threads = torch.get_num_threads()
    sizes = " ".join(f"{k}={v}" for k, v in model_cfg.to_dict().items())
    key = (
        f"{cpu_model()} | torch {torch.__version__} | {threads} threads | updates of"
        f" {sizes} | batch {batch_size}"
    )
    cached = read_cache(path)
    load, cpus = _load(), os.cpu_count()
    entry = cached.entries.get(key)
    if entry is not None and not (measured_busy(entry) and idle(load, cpus)):
        where = f"timed earlier, cached in {path}{_at(entry)}"
    else:
        entry = {
            "fp32": timer(model_cfg, batch_size, "fp32"),
            "bf16": timer(model_cfg, batch_size, "bf16"),
            "unit": "pairs/s",
            "date": time.strftime("%Y-%m-%d"),
            "load": load,
            "cpus": cpus,
        }
        problem = write_cache(path, {**cached.entries, key: entry})
        stored = f"cached in {path}" if problem is None else f"not cached: {problem}"
        where = f"timed now, {stored}{_at(entry)}"
    return {"fp32": float(entry["fp32"]), "bf16": float(entry["bf16"])}, where


def _at(entry: dict[str, Any]) -> str:
    load, cpus = entry.get("load"), entry.get("cpus")
    return f", at load {load:.1f} on {cpus} CPUs" if isinstance(load, (int, float)) else ""


def _load() -> float | None:
    try:
        return os.getloadavg()[0]
    except OSError:
        return None
