"""The floor of a training update (issue 66): its matrix products at the peak of their
precision, plus the optimiser's memory traffic at the memory's bandwidth (a STREAM triad);
bench_train.py sets each row beside it."""

from __future__ import annotations

from typing import Any

import torch
from benchlib import gemm_peak

#: Bytes the optimiser must move per parameter at the least, fp32 state in every precision:
#: the gradient read twice (the global norm, then the step: the clip needs the norm first),
#: the parameter and Adadelta's two accumulators each read once and written once.
OPTIMIZER_BYTES = 8 * 4
#: A peak is measured at --gemm-size unless one product that size would take over this many
#: seconds at the rate of a 512^3 product (bf16 on a CPU without bf16 instructions: a slow
#: path at about 1 GFLOP/s, where a 2048^3 product takes 17 s); then the 512^3 rate is it.
SLOW_PRODUCT_SECONDS = 1.0


def measured_peak(device: torch.device, dtype: torch.dtype, size: int) -> tuple[float, int]:
    """(FLOP/s, the size it was measured at) of ``dtype``'s matrix products (see
    SLOW_PRODUCT_SECONDS)."""
    small = min(size, 512)
    rate = gemm_peak(device, dtype, small, seconds=0.5)
    if small == size or 2 * size**3 / max(rate, 1.0) > SLOW_PRODUCT_SECONDS:
        return rate, small
    return gemm_peak(device, dtype, size), size


def print_floor(
    rows: list[dict[str, Any]], peaks: dict[str, float], bandwidth: float, code: str | None
) -> None:
    """Each row beside its floor (this run's peaks and bandwidth, for every commit's rows)."""
    print(
        "\nThe floor of each row: its matrix products at the peak of its precision plus the"
        f" optimiser's {OPTIMIZER_BYTES} bytes a parameter at the triad's bandwidth (the two"
        " run one after the other). Bound: the larger of the two.\n"
    )
    extra = " code |" if code else ""
    print(
        f"|{extra} batch | precision | compiled | update | capture | ms/update |"
        " GEMMs at the bf16 peak | at the fp32 peak | optimizer at the triad | floor |"
        " % of the floor | % of its precision's peak | bound |"
    )
    print(
        "|"
        + ("---|" if code else "")
        + "---:|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|"
    )
    for r in rows:
        f = floor(r["flops_per_update"], r["parameters"], peaks, r["precision"], bandwidth)
        ms = r["ms_per_update"]
        lead = f" {r['commit']} |" if code else ""
        print(
            f"|{lead} {r['batch_size']} | {r['precision']} | {r['compiled']} | {r['variant']} |"
            f" {r['capture']} | {ms:.1f} | {f['gemm_ms_bf16']:.1f} ms |"
            f" {f['gemm_ms_fp32']:.1f} ms | {f['optimizer_ms']:.1f} ms | {f['floor_ms']:.1f} ms |"
            f" {f['floor_ms'] / ms:.0%} | {f['gemm_ms'] / ms:.0%} | {f['bound']} |"
        )


def floor(
    flops: float, parameters: int, peaks: dict[str, float], precision: str, bandwidth: float
) -> dict[str, Any]:
    """An update's floor (milliseconds): ``flops`` of matrix products at each peak, the
    optimiser's bytes at ``bandwidth``; the row's own (its precision's peak) and its bound."""
    gemm = {p: 1000 * flops / max(rate, 1.0) for p, rate in peaks.items()}
    optimizer = 1000 * OPTIMIZER_BYTES * parameters / bandwidth
    return {
        "gemm_ms_bf16": gemm["bf16"],
        "gemm_ms_fp32": gemm["fp32"],
        "gemm_ms": gemm[precision],
        "optimizer_bytes": OPTIMIZER_BYTES * parameters,
        "optimizer_ms": optimizer,
        "triad_bytes_per_s": bandwidth,
        "floor_ms": gemm[precision] + optimizer,
        "bound": "GEMMs" if gemm[precision] >= optimizer else "memory",
    }
