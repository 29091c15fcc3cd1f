"""The learning curve: does the RNN column's gain grow as the model learns?

One point per system (b) tuned by MERT: its model's training hours (to the saved weights, from
the model's own training log) against the mean test-BLEU gain over (a) with its 95%
interval, each point labelled with its model and validation perplexity, the unigram model's in
the title. A line joins the points of one model size only (:func:`model_size`): a paper-size
model trained for minutes on a GPU is a point of its own, not the first step of the hidden-256
models' curve. The hardware is not recorded: models of one size trained on different machines
share a line, though their hours are not comparable (results.md's models table and the
edition's text say where each was trained).
``curve.png`` is drawn with matplotlib's Agg backend, an optional dependency (``pip install
'rescorer[analysis]'``) imported only here; the points themselves are written beside it
(``curve.json``), so what the picture shows can be read and checked.
"""

from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rescorer.experiments.models import model_size
from rescorer.io.jsonfiles import write_json
from rescorer.io.outputs import atomic_path

DPI = 100
MISSING = "no curve.png: drawing it needs matplotlib (pip install 'rescorer[analysis]')"


@dataclass(frozen=True)
class CurvePoint:
    system: str
    model: str
    hours: float  # training time of the model's weights
    gain: float  # mean test BLEU minus (a)'s
    low: float  # the 95% interval of the gain (significance.gain_interval)
    high: float
    p: float  # MultEval's
    valid_ppl: float | None
    unigram_ppl: float | None
    series: str = ""  # the model's size ("hidden 256"); "" when results.json does not say


def curve_points(results: dict[str, Any]) -> list[CurvePoint]:
    """The (b) systems tuned by MERT whose model recorded its training time, by hours."""
    models = {m["label"]: m for m in results["models"]}
    points = []
    for s in results["systems"]:
        sig = s.get("test_vs_baseline")
        if s["letter"] != "b" or s["tuner"] != "mert" or sig is None:
            continue
        model = models[s["models"][0]]
        if model.get("train_hours") is None:
            continue
        points.append(
            CurvePoint(
                s["system"], model["label"], model["train_hours"], sig["delta"],
                sig["interval"][0], sig["interval"][1], sig["p"], model["valid_ppl"],
                model["unigram_ppl"], model_size(model),
            )
        )  # fmt: skip
    return sorted(points, key=lambda p: p.hours)


def draw_curve(points: list[CurvePoint]) -> Any:
    """The figure (matplotlib), or an ImportError without matplotlib."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 4.5), dpi=DPI)
    ax = fig.add_subplot()
    hours = [p.hours for p in points]
    series = list(dict.fromkeys(p.series for p in points))  # in order of their first point
    for name, marker in zip(series, itertools.cycle("osD^v<>p*h")):
        line = [p for p in points if p.series == name]
        errors = [[p.gain - p.low for p in line], [p.high - p.gain for p in line]]
        label = "(b) +RNN" + (f", {name}" if name and len(series) > 1 else "")
        ax.errorbar(
            [p.hours for p in line], [p.gain for p in line], yerr=errors, fmt=f"{marker}-",
            capsize=4, label=label,
        )  # fmt: skip
    if len(series) > 1:
        ax.legend(fontsize=8, loc="best")
    ax.axhline(0.0, color="grey", linestyle="--", linewidth=1)
    for p in points:
        ppl = "–" if p.valid_ppl is None else f"{p.valid_ppl:.1f}"
        ax.annotate(
            f"{p.model}\nppl {ppl}", (p.hours, p.gain), xytext=(6, 6),
            textcoords="offset points", fontsize=8,
        )  # fmt: skip
    unigrams = sorted({round(p.unigram_ppl, 1) for p in points if p.unigram_ppl is not None})
    ax.set_title(
        "Test BLEU gain of +RNN over the baseline, mean and 95% interval\n"
        f"labels: validation perplexity; a unigram model's: {', '.join(map(str, unigrams)) or '–'}",
        fontsize=9,
    )
    ax.set_xlabel("training time of the model (hours)")
    ax.set_ylabel("test BLEU gain over (a)")
    span = max(hours) or 1.0
    ax.set_xlim(left=-0.03 * span, right=1.2 * span)
    fig.tight_layout()
    return fig


def write_curve(results: dict[str, Any], path: Path) -> str | None:
    """curve.png and curve.json from results.json's data; a warning when it cannot draw."""
    points = curve_points(results)
    if not points:
        return None
    write_json(path.with_suffix(".json"), [asdict(p) for p in points])
    try:
        fig = draw_curve(points)
    except ImportError:
        return MISSING
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png")
    return None
