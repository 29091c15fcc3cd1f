"""Table 1 of several work folders side by side, beside the paper's rows."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from rescorer.experiments.side_by_side import Edition, check_results, editions_table

ROOT = Path(__file__).resolve().parents[2]


def versus(delta: float, low: float, high: float) -> dict[str, Any]:
    return {
        "delta": delta, "interval": [low, high], "p": 75 / 301, "reached": 74,
        "pooled_delta": delta, "p_shared_coin": 0.5, "reached_shared_coin": 149, "trials": 300,
        "pairs": 2,
    }  # fmt: skip


def system(key: str, tuner: str, models: list[str], test: float, **more: Any) -> dict[str, Any]:
    return {
        "system": key, "letter": key[0], "name": key, "tuner": tuner, "runs": 2,
        "models": models, "test_mean": test, "test_sd": 0.2, **more,
    }  # fmt: skip


def test_check_results_names_what_is_missing() -> None:
    assert check_results(SOFTWARE, "x.json") is SOFTWARE
    with pytest.raises(ValueError, match=r"^x.json: not a JSON object"):
        check_results([], "x.json")
    with pytest.raises(ValueError, match=r"^x.json: no tables.filtered_lines"):
        check_results({**SOFTWARE, "tables": {}}, "x.json")


def results(test_lines: int, systems: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "sentences": {"dev": 400, "test": test_lines, "tune": 400},
        "tables": {"filtered_lines": 1234},
        "tuners": {"mert": "MERT", "mira": "batch MIRA"},
        "best": "fwd@6h",
        "systems": systems,
    }


SOFTWARE = results(800, [
    system("a", "mert", [], 63.72),
    system("b-fwd@6h", "mert", ["fwd@6h"], 63.84, test_vs_baseline=versus(0.12, -0.81, 1.0)),
    system("a-mira", "mira", [], 64.47),
    system("b-mira-fwd@6h", "mira", ["fwd@6h"], 63.63,
           test_vs_baseline=versus(-0.84, -1.62, 0.03)),
    system("d-fwd@6h", "mert", ["fwd@6h"], 63.87, test_vs_baseline=versus(0.16, -0.79, 1.15),
           name="+RNN fwd@6h, top-3 table"),
])  # fmt: skip
PROSE = results(5058, [
    system("a", "mert", [], 57.87),
    system("b-fwd@1h", "mert", ["fwd@1h"], 57.81, test_vs_baseline=versus(-0.06, -0.25, 0.15)),
    system("b-fwd@6h", "mert", ["fwd@6h"], 58.20, test_vs_baseline=versus(0.33, 0.05, 0.61),
           baseline="a"),
    system("f-fwd@1h", "mert", ["fwd@1h"], 57.82, baseline="a",
           test_vs_baseline={**versus(-0.05, -0.2, 0.11), "interval_method": "t",
                             "sampling_var": 0.001},
           second_baseline="b-fwd@1h",
           test_vs_second_baseline={**versus(0.01, -0.3, 0.32), "interval_method": "t",
                                    "sampling_var": 0.004, "p": 0.45}),
])  # fmt: skip


def test_rows_of_one_kind_sit_together_each_against_its_own_baseline() -> None:
    text = editions_table([Edition("en-fr", SOFTWARE), Edition("help", PROSE)])
    rows = [line for line in text.splitlines() if line.startswith(("| (", "|  |", "| ↳"))]
    cells = [[c.strip() for c in row.strip("|").split("|")] for row in rows]
    order = [(c[0], c[1], c[2]) for c in cells]
    assert order == [
        ("(a) baseline", "–", "en-fr"),
        ("", "–", "help"),
        ("(b) +RNN", "fwd@1h", "help"),
        ("", "fwd@6h", "en-fr"),
        ("", "fwd@6h", "help"),
        ("(d) +RNN, top-3 table", "fwd@6h", "en-fr"),
        ("(f) table filled up with generated pairs", "fwd@1h", "help"),
        ("↳ (f) against (b)", "fwd@1h", "help"),
        ("(a) baseline, batch MIRA", "–", "en-fr"),
        ("(b) +RNN, batch MIRA", "fwd@6h", "en-fr"),
    ]
    by_row = {(c[1], c[2], c[0] or "same"): c for c in cells}
    help_b6 = by_row[("fwd@6h", "help", "same")]
    # a file of before 2026-11-27 (no interval_method): v_s = (0.28 / 1.96)^2 - 2 * (1/2 *
    # 0.2^2 / 2) = 0.000408 (its percentile interval less the bootstrap's replicas); the runs'
    # part 2 * 0.2^2 / 2 = 0.04, SE = 0.2010, df = 0.040408^2 / (2 * 0.02^2 / 1) = 2.04, t =
    # 4.25: the interval re-derived, 0.33 +- 0.85, marked; could see (4.25 + 0.84) * 0.2010
    assert help_b6[3:9] == ["2", "58.20 ± 0.20", "+0.33", "[-0.52, +1.18]†", "+1.02", "0.249"]
    # a file of the t-interval: its interval as it is, unmarked
    assert by_row[("fwd@1h", "help", "(f) table filled up with generated pairs")][6] == (
        "[-0.20, +0.11]"
    )
    # (f) against (b) too, from its own variance parts: both sd 0.2 over 2 runs, v_s 0.004:
    # SE^2 = 0.004 + 0.02 + 0.02 = 0.044, df = 0.044^2 / (2 * 0.02^2) = 2.42, t = 3.66; could
    # see (3.66 + 0.84) * 0.2098 and p as the file has it; K: (f)'s runs / (b)'s
    against_b = by_row[("fwd@1h", "help", "↳ (f) against (b)")]
    assert against_b[3:10] == ["2/2", "(as above)", "+0.01", "[-0.30, +0.32]", "+0.94", "0.450",
                               "0.500"]  # fmt: skip
    assert by_row[("fwd@1h", "help", "(b) +RNN")][7] == "–"  # no baseline named: not computed
    # the paper's cell once per kind, none for MIRA or the kinds the paper has no row for
    assert by_row[("–", "en-fr", "(a) baseline")][10] == "30.64 / 33.30"
    assert by_row[("fwd@6h", "en-fr", "same")][10] == ""  # (b)'s paper cell is on its first row
    assert by_row[("fwd@1h", "help", "(b) +RNN")][10] == "31.20 / 33.87"
    assert by_row[("fwd@6h", "en-fr", "(b) +RNN, batch MIRA")][10] == "–"
    assert by_row[("fwd@1h", "help", "(f) table filled up with generated pairs")][10] == "–"
    assert "| help | 400 | 5,058 | 1,234 | mert, mira | fwd@6h |" in text


def test_no_results_is_an_error() -> None:
    with pytest.raises(ValueError, match="no results"):
        editions_table([])


def test_script_writes_the_table_and_names_a_bad_argument(tmp_path: Path) -> None:
    for name, r in (("software", SOFTWARE), ("prose", PROSE)):
        (tmp_path / f"{name}.json").write_text(json.dumps(r), encoding="utf-8")
    out = tmp_path / "side.md"
    script = str(ROOT / "scripts" / "side_by_side.py")
    argv = [sys.executable, script, "--edition", f"en-fr={tmp_path / 'software.json'}",
            "--edition", f"help={tmp_path / 'prose.json'}", "-o", str(out)]  # fmt: skip
    subprocess.run(argv, check=True)
    assert out.read_text(encoding="utf-8") == editions_table(
        [Edition("en-fr", SOFTWARE), Edition("help", PROSE)]
    )
    bad = subprocess.run(
        [sys.executable, script, "--edition", str(tmp_path / "software.json")],
        capture_output=True, text=True,
    )  # fmt: skip
    assert bad.returncode == 2
    assert "NAME=RESULTS.json" in bad.stderr
    missing = subprocess.run(
        [sys.executable, script, "--edition", f"x={tmp_path / 'none.json'}"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert missing.returncode == 2 and "none.json" in missing.stderr
    # not JSON; a first edition's results.json (no tuners, systems without letter and tuner)
    (tmp_path / "cut.json").write_text('{"systems": [', encoding="utf-8")
    old = {k: v for k, v in SOFTWARE.items() if k != "tuners"}
    (tmp_path / "old.json").write_text(json.dumps(old), encoding="utf-8")
    no_letter = {**SOFTWARE, "systems": [{"system": "a", "runs": 5}]}
    (tmp_path / "first.json").write_text(json.dumps(no_letter), encoding="utf-8")
    cases = [
        ("cut", "Expecting"),
        ("old", "no 'tuners'"),
        ("first", "system 1 has no letter, name, tuner, models, test_mean"),
    ]
    for name, said in cases:
        path = tmp_path / f"{name}.json"
        bad = subprocess.run(
            [sys.executable, script, "--edition", f"x={path}"], capture_output=True, text=True
        )
        assert bad.returncode == 2, bad.stderr
        assert f"{path}: " in bad.stderr and said in bad.stderr, bad.stderr
        assert "Traceback" not in bad.stderr
