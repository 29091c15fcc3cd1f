"""How a tuned ini's weights are named for results.json (the real tuning runs are in
test_table1.py)."""

from __future__ import annotations

from rescorer.experiments.evaluate import named_weights

TM = "TranslationModel0"


def test_every_weight_gets_a_name_and_the_new_columns_their_own() -> None:
    weights = {"LM0": [0.1], TM: [0.2, 0.3, 0.4, 0.5, 0.01, -0.02], "Distortion0": [0.03]}
    assert named_weights(weights, TM, 4, ["RNN", "WP"]) == {
        "LM0": 0.1,
        f"{TM}[0]": 0.2, f"{TM}[1]": 0.3, f"{TM}[2]": 0.4, f"{TM}[3]": 0.5,
        "RNN": 0.01, "WP": -0.02,
        "Distortion0": 0.03,
    }  # fmt: skip


def test_a_column_past_the_known_names_keeps_its_index() -> None:
    weights = {TM: [0.2, 0.3, 0.01, 0.07]}
    assert named_weights(weights, TM, 2, ["RNN"]) == {
        f"{TM}[0]": 0.2, f"{TM}[1]": 0.3, "RNN": 0.01, f"{TM}[3]": 0.07,
    }  # fmt: skip
