"""A Table 1 run's settings, the work folder's record of them, and the systems they make."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import MOSES, TINY_SYSTEM

from rescorer.errors import RescorerError
from rescorer.experiments.config import Table1Config, check_config, check_work_dir
from rescorer.experiments.systems import Model, column_names, plan


def config(tmp_path: Path, **change: object) -> Table1Config:
    base = {
        "system": TINY_SYSTEM,
        "work": tmp_path / "work",
        "moses": MOSES,
        "models": (tmp_path / "fwd@1h", tmp_path / "fwd@3h"),
    }
    return Table1Config(**{**base, **change})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"models": ()}, "give model directories (--model) or --train BUDGET, not both"),
        ({"train_budget": "1h"}, "give model directories (--model) or --train BUDGET, not both"),
        ({"runs": 0}, "--runs 0: expected at least 1"),
        ({"runs_c": 4}, "--runs-c 4: expected 0 to --runs (3)"),
        ({"runs_mira": -1}, "--runs-mira -1: expected 0 or more"),
        ({"runs_f": -1}, "--runs-f -1: expected 0 or more"),
        ({"runs_of": (("a", 0),)}, "--runs-of a=0: expected at least 1 tuning run"),
        ({"runs_of": (("a", 5), ("a", 6))}, "--runs-of a: given twice"),
        ({"jobs": 0}, "--jobs 0: expected a positive count"),
        ({"threads": -2}, "--threads -2: expected a positive count"),
        ({"trials": 0}, "--trials 0: expected a positive count"),
        ({"src": "de"}, "no dev.de"),
        ({"best": "fwd@2h"}, "--best fwd@2h: expected one of the models' labels"),
        ({"models": (Path("a/fwd@1h"), Path("b/fwd@1h"))}, "two models labelled fwd@1h"),
        ({"models": (Path("a/my model"),)}, "a model folder's name labels its steps"),
        ({"inverse_model": Path("c/fwd@3h")}, "two models labelled fwd@3h"),
    ],
)
def test_config_errors(tmp_path: Path, change: dict, message: str) -> None:
    with pytest.raises(RescorerError, match=re.escape(message)):
        check_config(config(tmp_path, **change))


def test_the_work_folder_refuses_other_settings_and_other_weights(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    check_work_dir(cfg, {"fwd@1h": "a" * 64})
    check_work_dir(cfg, {"fwd@3h": "b" * 64})  # a snapshot added later
    record = json.loads((cfg.work / "config.json").read_text())
    assert record["models"] == {"fwd@1h": "a" * 64, "fwd@3h": "b" * 64}
    check_work_dir(replace(cfg, runs=6, runs_mira=3, trials=5, jobs=2), {"fwd@1h": "a" * 64})
    with pytest.raises(RescorerError, match=r"other settings \(dev_lines, top_k\)"):
        check_work_dir(replace(cfg, top_k=3, dev_lines=400), {})
    with pytest.raises(RescorerError, match="model fwd@3h of weights sha256 bbbbbbbbbbbb; this"):
        check_work_dir(cfg, {"fwd@3h": "c" * 64})


def test_a_folder_made_before_extend_args_existed_goes_on_without_them(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    cfg.work.mkdir()
    older = {k: v for k, v in cfg.recorded().items() if k != "extend_args"}
    (cfg.work / "config.json").write_text(json.dumps({**older, "layout": 2, "models": {}}))
    check_work_dir(replace(cfg, runs_f=2), {})  # (f) added to it, with extend's defaults
    assert json.loads((cfg.work / "config.json").read_text())["extend_args"] == []
    with pytest.raises(RescorerError, match=r"other settings \(extend_args\)"):
        check_work_dir(replace(cfg, extend_args=("-n", "10")), {})


def test_a_folder_made_before_start_weights_existed_goes_on_from_the_tuned_weights(
    tmp_path: Path,
) -> None:
    cfg = config(tmp_path)
    cfg.work.mkdir()
    older = {k: v for k, v in cfg.recorded().items() if k != "start_weights"}
    (cfg.work / "config.json").write_text(json.dumps({**older, "layout": 2, "models": {}}))
    check_work_dir(cfg, {})  # its tunings started from the system's weights, as these do
    assert json.loads((cfg.work / "config.json").read_text())["start_weights"] is None
    with pytest.raises(RescorerError, match=r"other settings \(start_weights\)"):
        check_work_dir(replace(cfg, start_weights=tmp_path / "untuned.ini"), {})


def test_a_first_edition_work_folder_is_refused(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    cfg.work.mkdir()
    first = {**cfg.recorded(), "model": "/runs/h256-60m", "tuner": "mert"}
    (cfg.work / "config.json").write_text(json.dumps(first))
    with pytest.raises(RescorerError, match="made by the first edition's driver"):
        check_work_dir(cfg, {})


def test_the_systems_of_the_second_edition(tmp_path: Path) -> None:
    models = [
        Model("fwd@1h", tmp_path, "forward"),
        Model("fwd@3h", tmp_path, "forward"),
        Model("inv@2h", tmp_path, "inverse"),
    ]
    cfg = config(tmp_path, runs=6, runs_c=4, runs_mira=3, runs_f=4, top_k=5)
    systems = plan(cfg, models, "fwd@3h")
    by_key = {s.key: s for s in systems}
    assert [(s.key, s.runs, s.tuner, s.baseline) for s in systems] == [
        ("a", 6, "mert", None),
        ("b-fwd@1h", 6, "mert", "a"),
        ("b-fwd@3h", 6, "mert", "a"),
        ("c-fwd@3h", 4, "mert", "a"),
        ("d-fwd@3h", 4, "mert", "a"),
        ("e-fwd@3h+inv@2h", 6, "mert", "a"),
        ("f-fwd@3h", 4, "mert", "a"),
        ("a-mira", 3, "mira", None),
        ("b-mira-fwd@3h", 3, "mira", "a-mira"),
    ]
    named = {m.label: m for m in models}
    # (f): the scored table of the best (b), filled up in a step of its own; tested against both
    f = by_key["f-fwd@3h"]
    assert (f.score_step, f.extend_step) == ("score-fwd@3h", "extend-fwd@3h")
    assert (f.baseline, f.second_baseline, f.tuned) == ("a", "b-fwd@3h", True)
    assert column_names(f, named) == ["RNN", "provenance"]
    assert by_key["b-fwd@3h"].extend_step is None
    assert column_names(by_key["c-fwd@3h"], named) == ["RNN", "WP"]
    assert column_names(by_key["e-fwd@3h+inv@2h"], named) == ["RNN", "RNN inverse"]
    # systems with the same columns share one scored table
    assert by_key["b-fwd@3h"].score_step == by_key["b-mira-fwd@3h"].score_step == "score-fwd@3h"
    assert by_key["d-fwd@3h"].pruned_from == "b-fwd@3h" and not by_key["d-fwd@3h"].tuned
    assert by_key["d-fwd@3h"].name == "+RNN fwd@3h, top-5 table"
    # more runs of single systems (a rule that asks for them after the first K)
    more = replace(cfg, runs_of=(("a", 8), ("b-fwd@3h", 7), ("d-fwd@3h", 5)))
    runs = {s.key: s.runs for s in plan(more, models, "fwd@3h")}
    assert runs == {**{s.key: s.runs for s in systems}, "a": 8, "b-fwd@3h": 7, "d-fwd@3h": 5}
    with pytest.raises(RescorerError, match=r"--runs-of b-fwd@6h: no such system in this plan "
                       r"\(its systems: a, b-fwd@1h, b-fwd@3h, c-fwd@3h, "):  # fmt: skip
        plan(replace(cfg, runs_of=(("b-fwd@6h", 5),)), models, "fwd@3h")
    with pytest.raises(RescorerError, match=r"d-fwd@3h: 7 runs, more than the 6 of b-fwd@3h"):
        plan(replace(cfg, runs_of=(("d-fwd@3h", 7),)), models, "fwd@3h")
    assert [
        s.key for s in plan(replace(cfg, runs_c=0, runs_mira=0, runs_f=0), models[:2], "fwd@1h")
    ] == [
        "a",
        "b-fwd@1h",
        "b-fwd@3h",
    ]
