#!/usr/bin/env python3
"""Power before spending: how wide Table 1's interval of the mean gain would be, and how often a
true gain would be found, for a test size and a number of tuning runs K.

Thin over rescorer.experiments.power (its docstring gives the variance model): the sampling
variance and the spread between tuning runs come from a finished Table-1 results.json (e.g. the
second edition on en-fr), the test sizes are in source words (a segment count times the mean
words per segment of the new test set).

Example (the third edition's choice, from the second edition's results):

    python scripts/power.py docs/results/table1-2nd/results.json --ref-words 6542 \
        --segments 3000 --segments 5058 --words-per-segment 14.07 --sd 0.22 --sd 0.42 --sd 0.66
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import click

from rescorer.cli.ranges import Float, Int
from rescorer.experiments.power import (
    Components,
    check,
    components,
    interval_df,
    power,
    runs_needed,
    standard_error,
    t_quantile,
)

MAX_WORDS = 10**9  # source words of a test set


@click.command(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.argument("results", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--ref-words",
    type=Int(1, MAX_WORDS),
    required=True,
    help="Source words of RESULTS' test set.",
)
@click.option("--segments", type=Int(1, 10_000_000), multiple=True, help="Test sizes to try.")
@click.option(
    "--words-per-segment",
    type=Float(0, 10_000, low_open=True),
    help="Of the new test set (with --segments).",
)
@click.option(
    "--sd",
    "sds",
    type=Float(0, 100),
    multiple=True,
    help="Between-run sd's to try "
    "(baseline and system alike) [default: the median of RESULTS' systems].",
)
@click.option(
    "--runs", "ks", type=Int(2, 1000), multiple=True, default=(3, 4, 6, 8, 10), show_default=True
)
@click.option(
    "--gain",
    default=0.5,
    type=Float(0, 100, low_open=True),
    show_default=True,
    help="The true gain to find (BLEU).",
)
@click.option(
    "--target",
    default=0.8,
    type=Float(0, 1, low_open=True, high_open=True),
    show_default=True,
    help="The power wanted.",
)
@click.option(
    "--check",
    "outcome",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="A finished experiment's results.json: set its own v_s, spreads and intervals beside "
    "the prediction from RESULTS (the 1/W assumption checked).",
)
@click.option("--check-words", type=Int(1, MAX_WORDS), help="Source words of --check's test set.")
def main(
    results: Path,
    ref_words: int,
    segments: tuple[int, ...],
    words_per_segment: float | None,
    sds: tuple[float, ...],
    ks: tuple[int, ...],
    gain: float,
    target: float,
    outcome: Path | None,
    check_words: int | None,
) -> None:
    """Print the measured variance parts, a table of interval half-widths and power, and the K
    each system's own measured spreads would need; with --check, a finished experiment beside
    that prediction."""
    if bool(segments) != (words_per_segment is not None):
        raise click.UsageError("--segments and --words-per-segment go together")
    if (outcome is None) != (check_words is None):
        raise click.UsageError("--check and --check-words go together")
    if not segments and outcome is None:
        raise click.UsageError("give --segments (the test sizes to try), or --check")
    every = _components(results, ref_words)
    # v_s and the plan's spreads come from MERT's comparisons; the per-system K covers both tuners
    measured = [c for c in every if "mira" not in c.system]
    click.echo("| system | K | sd between runs | sampling variance v_s |")
    click.echo("|---|---:|---:|---:|")
    for c in measured:
        click.echo(f"| {c.system} | {c.runs} | {c.sd_system:.2f} | {c.sampling_var:.3f} |")
    v_s = statistics.median(c.sampling_var for c in measured)
    if segments and words_per_segment is not None:
        _plan(measured, every, v_s, ref_words, segments, words_per_segment, sds, ks, gain, target)
    if outcome is not None and check_words is not None:
        _check(outcome, check_words, v_s, ref_words, gain)


def _plan(
    measured: list[Components],
    every: list[Components],
    v_s: float,
    ref_words: int,
    segments: tuple[int, ...],
    words_per_segment: float,
    sds: tuple[float, ...],
    ks: tuple[int, ...],
    gain: float,
    target: float,
) -> None:
    sds = sds or (statistics.median(c.sd_system for c in measured),)
    click.echo(f"\nv_s = {v_s:.3f} (median) at {ref_words:,} source words\n")
    header = " | ".join(f"K={k}" for k in ks)
    click.echo(f"| sd | segments | words | {header} | K for {target:.0%} |")
    click.echo("|---:|---:|---:|" + "---:|" * (len(ks) + 1))
    for sd in sds:
        for n in segments:
            words = round(n * words_per_segment)
            cells = []
            for k in ks:
                se = standard_error(v_s, ref_words, words, sd, sd, k)
                df = interval_df(v_s * ref_words / words, sd, k, sd, k)
                t = t_quantile(0.975, df)
                cells.append(f"±{t * se:.2f} ({power(gain, se, df):.0%})")
            need = runs_needed(gain, target, v_s, ref_words, words, sd, sd)
            click.echo(f"| {sd:.2f} | {n:,} | {words:,} | {' | '.join(cells)} | {need or '>100'} |")
    click.echo(
        f"\nK for {target:.0%} at each system's own measured spreads and v_s (sd_a: its "
        "baseline's, batch MIRA's for a MIRA system; *: runs that all reached one weight "
        "vector, so that sd is no measure of the tuner's spread)\n"
    )
    click.echo("| system | sd_a | sd_b | v_s | segments | words | K |")
    click.echo("|---|---:|---:|---:|---:|---:|---:|")
    for c in every:
        mark = "*" if c.collapsed else ""
        for n in segments:
            words = round(n * words_per_segment)
            need = runs_needed(
                gain, target, c.sampling_var, ref_words, words, c.sd_baseline, c.sd_system
            )
            click.echo(
                f"| {c.system}{mark} | {c.sd_baseline:.2f} | {c.sd_system:.2f} | "
                f"{c.sampling_var:.3f} | {n:,} | {words:,} | {need or '>100'} |"
            )


def _components(path: Path, words: int) -> list[Components]:
    """The variance parts of a results.json, or a usage error that names the file."""
    try:
        return components(json.loads(path.read_text(encoding="utf-8")), words)
    except json.JSONDecodeError as exc:
        raise click.ClickException(f"{path}: not JSON ({exc})") from None
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        raise click.ClickException(
            f"{path}: not a results.json of scripts/table1.py: {type(exc).__name__} {exc} "
            "(each system needs runs and test_sd; a compared one its baseline among the "
            "systems and test_vs_baseline's interval)"
        ) from None


def _check(outcome: Path, words: int, v_s: float, ref_words: int, gain: float) -> None:
    """The outcome's systems beside the prediction (every comparison with a baseline but MIRA's,
    as above)."""
    got = _components(outcome, words)
    rows = check([c for c in got if "mira" not in c.system], words, v_s, ref_words, gain)
    if not rows:
        click.echo(f"\n{outcome}: no system compared with a baseline, nothing to check")
        return
    click.echo(
        f"\n{outcome} beside the prediction: v_s at its {words:,} source words, measured and "
        f"predicted ({v_s:.3f} x {ref_words:,} / {words:,}, the 1/W assumption); the 95% "
        "interval's half-width, measured and as the same method would have made it with "
        "the predicted v_s (the system's own spreads and K; so the two differ by v_s alone; "
        "the method is the file's own: the t-interval, or before 2026-11-27 the percentile "
        f"bootstrap); the power a true +{gain} would have had with the measured v_s, spreads "
        "and K by the t-interval (t(df) * sqrt(v_s + sd_a^2/K_a + sd_b^2/K_b)). *: runs that "
        "all reached one weight vector (their sd of 0 is no "
        "measure of the tuner); †: one run of a side, no spread measured; ‡: the interval was "
        "narrower than its runs' part, v_s is a floor of 0\n"
    )
    click.echo(
        "| system | K_a | K_b | sd_a | sd_b | v_s | predicted v_s | half-width | predicted | "
        f"power for +{gain} |"
    )
    click.echo("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        mark = "*" * r.collapsed + "†" * r.single_run + "‡" * r.clamped
        click.echo(
            f"| {r.system}{mark} | {r.runs_baseline} | {r.runs} | {r.sd_baseline:.2f} | "
            f"{r.sd_system:.2f} | {r.sampling_var:.4f} | {r.predicted_sampling_var:.4f} | "
            f"±{r.half_width:.2f} | ±{r.predicted_half_width:.2f} | {r.power:.0%} |"
        )


if __name__ == "__main__":
    main()
