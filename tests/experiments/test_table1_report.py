"""What results.md and the curve show of a results.json (the shape evaluate writes)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from scipy import stats

from rescorer.experiments.curve import curve_points, draw_curve, write_curve
from rescorer.experiments.report import results_markdown


def versus(delta: float, low: float, high: float, reached: int) -> dict[str, Any]:
    return {
        "delta": delta, "interval": [low, high], "p": (reached + 1) / 301, "reached": reached,
        "pooled_delta": delta + 0.05, "p_shared_coin": 0.5, "reached_shared_coin": 149,
        "trials": 300, "pairs": 2,
    }  # fmt: skip


def system(key: str, letter: str, tuner: str, models: list[str], **more: Any) -> dict[str, Any]:
    return {
        "system": key, "letter": letter, "name": key, "tuner": tuner, "runs": 2,
        "models": models, "baseline": None, "dev_mean": 60.0, "dev_sd": 0.1, "test_mean": 61.0,
        "test_sd": 0.2, "new_weight_means": {}, "table_lines": 1000, **more,
    }  # fmt: skip


def model(label: str, hours: float | None, ppl: float) -> dict[str, Any]:
    return {
        "label": label, "direction": "forward", "updates": 1000, "epochs": 0.5,
        "valid_ppl": ppl, "unigram_ppl": 322.9, "train_hours": hours,
        "weights_sha256": label.encode().hex().ljust(64, "0"), "systems": [f"b-{label}"],
    }  # fmt: skip


RESULTS: dict[str, Any] = {
    "tuners": {"mert": "MERT (mert-moses.pl, mert)"},
    "start": "every tuned system starts from the shipped weights",
    "sentences": {"dev": 800, "test": 800, "tune": 400},
    "sacrebleu_signature": "nrefs:1|tok:none",
    "significance": "p: MultEval's",
    "best": "fwd@3h",
    "warnings": ["model fwd@1h: best validation perplexity 200.00 is not clearly below"],
    "curve": "curve.png",
    "models": [
        model("fwd@3h", 3.1, 9.5),
        model("fwd@1h", 1.05, 200.0),
        model("old", None, 50.0),  # a model without a training log: no time, no point
    ],
    "systems": [
        system("a", "a", "mert", []),
        system("b-fwd@3h", "b", "mert", ["fwd@3h"], test_vs_baseline=versus(0.6, 0.1, 1.1, 0)),
        system("b-fwd@1h", "b", "mert", ["fwd@1h"], test_vs_baseline=versus(-0.2, -0.9, 0.4, 80)),
        system("b-old", "b", "mert", ["old"], test_vs_baseline=versus(0.1, -0.5, 0.7, 150)),
        system("b-mira-fwd@3h", "b", "mira", ["fwd@3h"], test_vs_baseline=versus(1, 0, 2, 3)),
    ],
    "runs": [],
}


def test_the_summary_table_shows_both_tests_and_the_interval() -> None:
    text = results_markdown(RESULTS)
    assert text.startswith("**Warning:** model fwd@1h: best validation perplexity 200.00")
    row = next(line for line in text.splitlines() if line.startswith("| (b) b-fwd@3h |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    # the mean gain and its interval, then MultEval's pooled gain and p, then the shared coin's p
    assert cells[5:10] == ["+0.60", "[+0.10, +1.10]", "+0.65", "≤ 1/301", "0.500"]
    row = next(line for line in text.splitlines() if line.startswith("| (b) b-fwd@1h |"))
    assert "| -0.20 | [-0.90, +0.40] | -0.15 | 0.269 | 0.500 |" in row
    models = next(line for line in text.splitlines() if line.startswith("| fwd@3h (best) |"))
    assert "| forward | – | 1,000 | 0.50 | 9.50 | 322.90 | 3.10 |" in models
    assert f"`{RESULTS['models'][0]['weights_sha256']}`" in models
    assert "![test BLEU gain against training hours](curve.png)" in text


def test_runs_that_reached_the_same_weights_are_named() -> None:
    """A system whose replicas collapsed to fewer weight vectors than runs is said to be so;
    results.json files that do not count them (the second edition's) say nothing."""
    assert "reached the same weights" not in results_markdown(RESULTS)
    results = dict(RESULTS)
    results["systems"] = [
        system("a", "a", "mert", [], distinct_weights=1),
        system("b-fwd@3h", "b", "mert", ["fwd@3h"], distinct_weights=2),
        system("f-fwd@3h", "f", "mert", ["fwd@3h"], distinct_weights=1),
    ]
    note = next(line for line in results_markdown(results).splitlines() if "same weights" in line)
    assert "(a) a: 2 runs, 1 distinct; (f) f-fwd@3h: 2 runs, 1 distinct." in note
    assert "b-fwd@3h" not in note
    # one vector: no tuner spread from that system; a few: the spread rests on them
    assert "(a) and (f) reached one weight vector" in note
    assert "rests on" not in note
    results["systems"].append(
        system("c-fwd@3h", "c", "mert", ["fwd@3h"], runs=3, distinct_weights=2)
    )
    note = next(line for line in results_markdown(results).splitlines() if "same weights" in line)
    assert "(c) c-fwd@3h: 3 runs, 2 distinct" in note
    assert "For (c) the spread between runs rests on fewer weight vectors than runs." in note
    assert "sampling error alone" not in note


def test_the_weights_table_has_a_row_per_weight_and_a_column_per_system() -> None:
    results = dict(RESULTS)
    results["systems"] = [
        system("a", "a", "mert", [], weight_means={"LM0": 0.1, "TranslationModel0[0]": 0.05}),
        system(
            "c-fwd@3h", "c", "mert", ["fwd@3h"],
            weight_means={"LM0": 0.08, "TranslationModel0[0]": 0.04, "RNN": 0.012, "WP": -0.01},
        ),
        system("b-old", "b", "mert", ["old"]),  # no weights recorded: no column
    ]  # fmt: skip
    lines = results_markdown(results).splitlines()
    start = lines.index("| weight | a | c-fwd@3h |")
    assert lines[start + 1] == "|---|---:|---:|"
    assert lines[start + 2 : start + 6] == [
        "| LM0 | +0.1000 | +0.0800 |",
        "| TranslationModel0[0] | +0.0500 | +0.0400 |",
        "| RNN | – | +0.0120 |",
        "| WP | – | -0.0100 |",
    ]
    assert "| weight |" not in results_markdown(RESULTS)  # none recorded: no table


def test_the_curve_has_a_point_per_timed_mert_snapshot(tmp_path: Path) -> None:
    points = curve_points(RESULTS)
    expected = [("fwd@1h", 1.05, -0.2), ("fwd@3h", 3.1, 0.6)]  # by hours; no MIRA, no "old"
    assert [(p.model, p.hours, p.gain) for p in points] == expected
    pytest.importorskip("matplotlib")
    ax = draw_curve(points).axes[0]
    (line,) = ax.lines[:1]
    assert list(line.get_xdata()) == [1.05, 3.1]
    assert list(line.get_ydata()) == [-0.2, 0.6]
    assert [t.get_text() for t in ax.texts] == ["fwd@1h\nppl 200.0", "fwd@3h\nppl 9.5"]
    assert "a unigram model's: 322.9" in ax.get_title()
    assert ax.get_xlabel() == "training time of the model (hours)"
    assert ax.get_ylabel() == "test BLEU gain over (a)"
    # the error bars span each point's interval
    bars = ax.collections[0].get_segments()
    ends = [y for seg in bars for y in (seg[0][1], seg[1][1])]
    assert ends == pytest.approx([-0.9, 0.4, 0.1, 1.1])
    assert write_curve(RESULTS, tmp_path / "curve.png") is None
    assert (tmp_path / "curve.png").read_bytes()[:4] == b"\x89PNG"
    assert [p["model"] for p in json.loads((tmp_path / "curve.json").read_text())] == [
        "fwd@1h",
        "fwd@3h",
    ]


def test_the_curve_joins_only_the_points_of_one_model_size() -> None:
    """A paper-size model trained for minutes on a GPU beside hidden-256 snapshots: its own
    point and legend entry, not a step of their line."""
    size = {"embed_size": 100, "maxout_units": 500, "maxout_pool": 2}
    small = {"model_config": {"hidden_size": 256, **size}}
    results = {
        **RESULTS,
        "models": [
            {**model("fwd@1h", 1.05, 7.8), **small},
            {**model("paper-gpu", 0.07, 14.5), "model_config": {"hidden_size": 1000, **size}},
            {**model("fwd@6h", 6.2, 2.2), **small},
        ],
        "systems": [
            system("a", "a", "mert", []),
            *(
                system(f"b-{m}", "b", "mert", [m], test_vs_baseline=versus(g, g - 0.5, g + 0.5, 9))
                for m, g in (("fwd@1h", 0.1), ("paper-gpu", 0.0), ("fwd@6h", 0.2))
            ),
        ],
    }
    points = curve_points(results)
    assert [(p.model, p.series) for p in points] == [
        ("paper-gpu", "hidden 1000"), ("fwd@1h", "hidden 256"), ("fwd@6h", "hidden 256"),
    ]  # fmt: skip
    pytest.importorskip("matplotlib")
    ax = draw_curve(points).axes[0]
    joined = [line for line in ax.lines if line.get_linestyle() == "-"]  # not the caps
    lines = [(list(line.get_xdata()), list(line.get_ydata())) for line in joined]
    assert lines == [([0.07], [0.0]), ([1.05, 6.2], [0.1, 0.2])]
    legend = ax.get_legend()
    assert [t.get_text() for t in legend.get_texts()] == [
        "(b) +RNN, hidden 1000", "(b) +RNN, hidden 256",
    ]  # fmt: skip
    # results.md's models table says each model's size too
    text = results_markdown(results)
    assert "| paper-gpu | forward | hidden 1000 | 1,000 |" in text
    assert "| fwd@1h | forward | hidden 256 | 1,000 |" in text
    assert "| fwd@3h (best) | forward | – | 1,000 |" in results_markdown(RESULTS)
    # a results.json without the models' shapes: one series, one line, no legend, as before
    assert {p.series for p in curve_points(RESULTS)} == {""}
    assert draw_curve(curve_points(RESULTS)).axes[0].get_legend() is None


def test_system_f_is_shown_against_b_with_the_new_pairs_it_used() -> None:
    example = {
        "sentence": 7, "source": "the | pipe *", "reference": "le &#124; tube", "bleu": 50.0,
        "versus_bleu": 20.0, "hypothesis": "le &#124; tuyau", "versus_hypothesis": "la pipe",
        "new_pairs": [["pipe", "tuyau"], ["the", "le"]],
    }  # fmt: skip
    use = {
        "generated_pairs": 1234, "generated_sources": 600, "test_sentences": 800,
        "runs": [{"run": 1, "sentences": 40, "pairs": 52, "distinct": 45},
                 {"run": 2, "sentences": 30, "pairs": 31, "distinct": 30}],
        "mean": {"sentences": 35.0, "pairs": 41.5, "distinct": 37.5},
        "examples": {"helped": [example], "hurt": []},
    }  # fmt: skip
    results = dict(RESULTS)
    results["systems"] = [
        *RESULTS["systems"][:2],
        system(
            "f-fwd@3h", "f", "mert", ["fwd@3h"], name="+RNN fwd@3h, filled up",
            baseline="a", test_vs_baseline=versus(0.3, -0.2, 0.8, 30),
            second_baseline="b-fwd@3h", test_vs_second_baseline=versus(-0.3, -0.7, 0.1, 90),
            new_weight_means={"RNN": 0.01, "provenance": -0.02}, new_pairs=use,
        ),
    ]  # fmt: skip
    lines = results_markdown(results).splitlines()
    assert "| (f) +RNN fwd@3h, filled up | 2 | 1,000 |" in "\n".join(lines)  # the main table
    assert any(
        line.startswith("(f) +RNN fwd@3h, filled up: 1,000 table lines, of which 1,234 pairs")
        and "mean provenance weight -0.0200. Against (b) b-fwd@3h:" in line
        for line in lines
    )
    assert (
        "| (f) +RNN fwd@3h, filled up | (b) b-fwd@3h | -0.30 | [-0.70, +0.10] | -0.25 | 0.302 "
        "| 0.500 | – | – |"
    ) in lines
    start = lines.index("| run | sentences using ≥ 1 | pairs used | distinct pairs |")
    assert lines[start + 2 : start + 5] == [
        "| 1 | 40 | 52 | 45 |", "| 2 | 30 | 31 | 30 |", "| mean | 35.0 | 41.5 | 37.5 |",
    ]  # fmt: skip
    helped = next(i for i, line in enumerate(lines) if "run 1 beat run 1 of (b)" in line)
    assert lines[helped + 2 : helped + 8] == [
        "- sentence 7: sentence BLEU 50.0 against 20.0",
        "  - source: the \\| pipe \\*",  # corpus text as it is, not as Markdown
        "  - reference: le &amp;#124; tube",
        "  - (f): le &amp;#124; tuyau",
        "  - (b): la pipe",
        "  - generated pairs used: pipe → tuyau; the → le",
    ]
    assert any("run 1 lost to run 1 of (b) b-fwd@3h" in ln and ln.endswith("none.") for ln in lines)


def test_the_gain_by_group_table_has_each_baseline_once_and_each_system() -> None:
    def group(name: str, n: int, base: float, delta: float) -> dict[str, Any]:
        return {"group": name, "sentences": n, "baseline": base, "system": base + delta,
                "delta": delta, "interval": [delta - 0.5, delta + 0.5]}  # fmt: skip

    groups = [group("1-5 words", 1200, 61.0, 0.2), group("an unknown word", 600, 47.4, -0.1)]
    results = {
        **RESULTS,
        "systems": [
            system("a", "a", "mert", []),
            system("b-fwd@3h", "b", "mert", ["fwd@3h"], baseline="a",
                   test_vs_baseline=versus(0.6, 0.1, 1.1, 0), test_by_group=groups),
            system("b-fwd@1h", "b", "mert", ["fwd@1h"], baseline="a",
                   test_vs_baseline=versus(-0.2, -0.9, 0.4, 80), test_by_group=groups),
        ],
    }  # fmt: skip
    text = results_markdown(results)
    table = text.split("Where the test gain is")[1].split("\n\n")[1].splitlines()
    assert table[0] == "| system | 1-5 words (1,200) | an unknown word (600) |"
    assert table[2] == "| (a) a: BLEU | 61.00 | 47.40 |"
    assert table[3] == "| (b) b-fwd@3h | +0.20 [-0.30, +0.70] | -0.10 [-0.60, +0.40] |"
    assert len(table) == 5  # the baseline's row once
    assert "Where the test gain is" not in results_markdown(RESULTS)  # no groups: no table


def test_each_comparison_says_the_smallest_gain_it_could_see() -> None:
    """From the interval, minus the old bootstrap's replica part (a file without
    interval_method), plus the runs' sd^2/K: with interval [0.1, 1.1] (SE^2 = 0.0651), sd 0.2
    on both sides and K = 2, v_s = 0.0651 - 2 * 0.01 = 0.0451 and the variance of the mean
    gain 0.0451 + 2 * 0.02 = 0.0851, with df = 0.0851^2 / (2 * 0.02^2 / 1) = 9.05 (Welch):
    (t(9.05) + z(0.8)) * 0.2917 = (2.26 + 0.84) * 0.2917 = 0.90."""
    assert "What each test could see" not in results_markdown(RESULTS)  # no baseline named
    results = dict(RESULTS)
    results["systems"] = [
        system("a", "a", "mert", []),
        system("b-x", "b", "mert", ["x"], baseline="a", test_vs_baseline=versus(0.6, 0.1, 1.1, 0)),
        system(
            "c-x", "c", "mert", ["x"], baseline="a", runs=1, test_sd=None,
            test_vs_baseline=versus(0.6, 0.1, 1.1, 0),
        ),
    ]  # fmt: skip
    line = next(line for line in results_markdown(results).splitlines() if "could see" in line)
    var = (0.5 / 1.959963984540054) ** 2 - 0.02 + 0.04
    df = var**2 / (2 * 0.02**2 / 1)
    gain = (stats.t.ppf(0.975, df) + 0.8416212335729143) * var**0.5
    assert f"(b) b-x +{gain:.2f};" in line
    assert "(c) c-x +" in line and "(one run: no spread)" in line
    assert f"+{gain:.2f}" == "+0.90"


def test_a_test_that_paired_fewer_runs_than_a_system_has_says_so() -> None:
    """Both p's pair the first min(K) runs: (b) with 3 runs against (a)'s 2 is said; (c) with
    2 against 2 is not."""
    results = dict(RESULTS)
    results["systems"] = [
        system("a", "a", "mert", []),
        system("b-x", "b", "mert", ["x"], baseline="a", runs=3,
               test_vs_baseline=versus(0.6, 0.1, 1.1, 0)),
        system("c-x", "c", "mert", ["x"], baseline="a", test_vs_baseline=versus(0.6, 0.1, 1.1, 0)),
    ]  # fmt: skip
    text = results_markdown(results)
    line = next(line for line in text.splitlines() if line.startswith("The p's pair"))
    assert "(b) b-x: 2 pairs of its 3 runs and (a)'s 2." in line
    assert "c-x" not in line
    results["systems"] = [s for s in results["systems"] if s["system"] != "b-x"]
    assert "The p's pair" not in results_markdown(results)


def test_a_collapsed_baseline_gets_the_interval_it_would_have_had_varying() -> None:
    """(a)'s 2 runs reached one weight vector (sd 0): results.md gives (b)'s interval again with
    sd_a = sd_b = 0.2. By hand, from a t-interval file: v_s 0.01, parts 0.02 + 0.02, df =
    0.05^2 / (2 * 0.02^2 / 1) = 3.125, half-width t(3.125) * sqrt(0.05)."""
    results = dict(RESULTS)
    t_versus = {**versus(0.6, 0.1, 1.1, 0), "interval_method": "t", "sampling_var": 0.01}
    results["systems"] = [
        system("a", "a", "mert", [], test_sd=0.0, distinct_weights=1),
        system("b-x", "b", "mert", ["x"], baseline="a", test_vs_baseline=t_versus,
               distinct_weights=2),
    ]  # fmt: skip
    line = next(
        line for line in results_markdown(results).splitlines() if line.startswith("Had the")
    )
    half = stats.t.ppf(0.975, 0.05**2 / (2 * 0.02**2)) * 0.05**0.5
    assert f"(b) b-x [{0.6 - half:+.2f}, {0.6 + half:+.2f}] (sd_a = sd_b = 0.20)" in line
    assert f"{0.6 - half:+.2f}" == "-0.10"  # t(3.125) = 3.13, half-width 0.70
    results["systems"][0]["distinct_weights"] = 2  # a baseline that varied: nothing to add
    assert "Had the" not in results_markdown(results)


def test_a_pipe_in_a_system_name_does_not_split_its_cells() -> None:
    """(e)'s name holds "p(f|e)": every table row with it escapes the pipe, so a Markdown
    reader keeps the row's cells where the header has them."""
    e = system("e-x", "e", "mert", ["fwd@3h"], test_vs_baseline=versus(0.1, -0.5, 0.7, 9))
    e["name"] = "+RNN p(f|e) fwd@3h and p(e|f) inv"
    text = results_markdown({**RESULTS, "systems": [*RESULTS["systems"], e]})
    rows = [line for line in text.splitlines() if "p(f" in line and line.startswith("|")]
    assert rows, text
    header = next(line for line in text.splitlines() if line.startswith("| system | K |"))
    for row in rows:
        assert "p(f\\|e)" in row and "p(e\\|f)" in row
    summary = next(row for row in rows if "| 2 |" in row)
    unescaped = summary.replace("\\|", "")
    assert unescaped.count("|") == header.count("|"), (summary, header)
