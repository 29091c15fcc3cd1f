"""scripts/power.py on the second edition's committed results: its per-system table gives the K
that each system's own measured spreads need."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from click.testing import CliRunner
from conftest import ROOT

sys.path.insert(0, str(ROOT / "scripts"))
from power import main as power_main

from rescorer.experiments.power import components, runs_needed

SECOND = ROOT / "docs" / "results" / "table1-2nd" / "results.json"


def test_each_system_gets_the_k_its_own_spreads_need() -> None:
    args = [str(SECOND), "--ref-words", "6542", "--segments", "5058"]
    result = CliRunner().invoke(power_main, [*args, "--words-per-segment", "14.07"])
    assert result.exit_code == 0, result.output
    own = result.output.split("own measured spreads")[1]
    rows = {
        cells[0]: cells
        for line in own.splitlines()
        if line.startswith("| ") and not line.startswith("| system")
        for cells in [[c.strip() for c in line.strip("|").split("|")]]
    }
    measured = components(json.loads(SECOND.read_text(encoding="utf-8")), 6542)
    assert set(rows) == {c.system for c in measured}  # batch MIRA's (b) too, against its (a)
    assert any("mira" in c.system for c in measured)
    for c in measured:
        words = round(5058 * 14.07)
        need = runs_needed(0.5, 0.8, c.sampling_var, 6542, words, c.sd_baseline, c.sd_system)
        assert rows[c.system][-1] == str(need)
        assert rows[c.system][3] == f"{c.sampling_var:.3f}"
    # the spreads differ, and so do the K they need (1h: 0.22 needs 4; 6h: 0.66 needs 30)
    assert rows["b-fwd@1h"][-1] == "4"
    assert int(rows["b-fwd@6h"][-1]) > 20


def test_a_system_whose_runs_collapsed_is_marked() -> None:
    """The help pilot's (a) runs all reached one weight vector: (b)'s row says so."""
    pilot = ROOT / "docs" / "results" / "table1-3rd" / "pilot" / "results.json"
    args = [str(pilot), "--ref-words", "71168", "--segments", "5058"]
    result = CliRunner().invoke(power_main, [*args, "--words-per-segment", "14.07"])
    assert result.exit_code == 0, result.output
    own = result.output.split("own measured spreads")[1]
    assert "| b-fwd@1h* |" in own


def test_check_prints_an_outcome_beside_the_prediction() -> None:
    """--check alone (no --segments): the help edition's fwd@1h runs beside en-fr's prediction."""
    outcome = ROOT / "docs" / "results" / "table1-3rd" / "fwd@1h-k4" / "results.json"
    args = [str(SECOND), "--ref-words", "6542", "--check", str(outcome), "--check-words", "71168"]
    result = CliRunner().invoke(power_main, args)
    assert result.exit_code == 0, result.output
    assert "K for 80%" not in result.output  # no plan without --segments
    rows = [line for line in result.output.splitlines() if line.startswith("| b-fwd@1h* | 4 |")]
    assert len(rows) == 1, result.output
    cells = [c.strip() for c in rows[0].strip("|").split("|")]
    assert cells[5:7] == ["0.0040", "0.0172"] and cells[7:9] == ["±0.17", "±0.28"], cells


def test_power_asks_for_what_it_needs() -> None:
    for args, said in (
        ([], "give --segments"),
        (["--segments", "3000"], "--segments and --words-per-segment go together"),
        (["--words-per-segment", "14"], "--segments and --words-per-segment go together"),
        (["--check", str(SECOND)], "--check and --check-words go together"),
        (["--check", str(SECOND), "--check-words", "0"], "0 is not in the range 1<=x<=1000000000"),
    ):
        result = CliRunner().invoke(power_main, [str(SECOND), "--ref-words", "6542", *args])
        assert result.exit_code == 2 and said in result.output, result.output


def test_a_file_that_is_not_a_results_json_is_named(tmp_path: Path) -> None:
    broken = tmp_path / "broken.json"
    broken.write_text("not json\n")
    foreign = tmp_path / "foreign.json"
    versus = {"interval": [-0.1, 0.1]}  # against a baseline "a" that is not there
    system = {"system": "b", "baseline": "a", "runs": 2, "test_vs_baseline": versus}
    foreign.write_text(json.dumps({"systems": [system]}))
    for bad, said in ((broken, "not JSON"), (foreign, "not a results.json of scripts/table1.py")):
        args = [str(SECOND), "--ref-words", "6542", "--check", str(bad), "--check-words", "99"]
        result = CliRunner().invoke(power_main, args)
        assert result.exit_code == 1 and f"{bad}: {said}" in result.output, result.output
        assert result.exception is None or isinstance(result.exception, SystemExit)
