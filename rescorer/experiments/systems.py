"""The systems of Table 1's second edition, and the models they add columns from.

- (a) the baseline;
- (b) +RNN, one system per forward model (the snapshots of one training run: the curve);
- (c) +RNN+WP and (d) the +RNN table pruned to the top K targets per source by (b)'s tuned
  weights (decoded with them, not tuned), both with the best model;
- (e) +RNN p(f|e) and p(e|f): the best model's column and an inverse-direction model's;
- (f) +RNN with the table filled up with the best model's own pairs for the dev and test
  sources (``rescorer extend``: new pairs, a provenance column), tested against (a) and (b);
- (a) and the best (b) tuned again by batch MIRA, a second tuner.

Every tuned system starts from the shipped weights of the system's moses.ini, plus the same
starting weight for each new column, and tunes on the same dev sentences. A system's key names
its steps' folders (``tune-KEY-RUN``); the columns a system adds name the scoring step that
writes its table (``score-COLUMNS``), shared by systems with the same columns; (f) extends
that table in a step of its own (``extend-COLUMNS``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from rescorer.errors import RescorerError
from rescorer.experiments.config import Table1Config

TUNERS = {"mert": "MERT (mert-moses.pl, mert)", "mira": "batch MIRA (mert-moses.pl, kbmira)"}


@dataclass(frozen=True)
class Model:
    """A model directory a system scores with."""

    label: str
    path: Path
    direction: str  # forward: p(target|source), the RNN column; inverse: p(source|target)


@dataclass(frozen=True)
class System:
    """One row of the table: what it adds to the baseline, how it is tuned, how often."""

    key: str  # its steps' folder names: a, b-fwd@3h, c-fwd@6h, a-mira, ...
    letter: str  # the paper's row: a to e, and (f), ours
    name: str
    tuner: str  # a key of TUNERS
    runs: int  # K
    baseline: str | None  # the key of the system it is compared with (None for a baseline)
    models: tuple[str, ...] = ()  # labels of the models whose columns it adds, in order
    word_penalty: bool = False  # and the paper's word penalty column, last
    pruned_from: str | None = None  # (d): the system whose table and tuned weights it prunes
    extended: bool = False  # (f): its scored table filled up by `rescorer extend`
    second_baseline: str | None = None  # (f): (b), the system it is tested against as well

    @property
    def score_step(self) -> str | None:
        """The step that writes this system's table and starting ini (None for the baseline)."""
        if not self.models:
            return None
        return "score-" + "+".join(self.models) + ("-wp" if self.word_penalty else "")

    @property
    def extend_step(self) -> str | None:
        """The step that fills up the scored table and writes the starting ini of (f)."""
        if not self.extended:
            return None
        return "extend-" + "+".join(self.models)

    @property
    def tuned(self) -> bool:
        return self.pruned_from is None


def column_names(system: System, models: dict[str, Model]) -> list[str]:
    """The new columns' names, in the table's order: RNN, RNN inverse, WP, provenance."""
    names = [
        "RNN inverse" if models[label].direction == "inverse" else "RNN" for label in system.models
    ]
    return (
        names
        + (["WP"] if system.word_penalty else [])
        + (["provenance"] if system.extended else [])
    )


def plan(cfg: Table1Config, models: list[Model], best: str) -> list[System]:
    """The systems of ``cfg``, in the order their runs are made (a system before those that
    use its tuned weights), each with its K (``cfg.runs_of`` over the --runs options)."""
    return _with_runs_of(_systems(cfg, models, best), dict(cfg.runs_of))


def _with_runs_of(systems: list[System], runs_of: dict[str, int]) -> list[System]:
    """``systems`` with the K that ``runs_of`` gives single ones; a RescorerError for a key
    that is not planned, or for (d) with more runs than the (b) whose runs it prunes."""
    keys = [s.key for s in systems]
    for key in runs_of:
        if key not in keys:
            raise RescorerError(
                f"--runs-of {key}: no such system in this plan (its systems: {', '.join(keys)})"
            )
    systems = [replace(s, runs=runs_of.get(s.key, s.runs)) for s in systems]
    runs = {s.key: s.runs for s in systems}
    for s in systems:
        if s.pruned_from is not None and s.runs > runs[s.pruned_from]:
            raise RescorerError(
                f"{s.key}: {s.runs} runs, more than the {runs[s.pruned_from]} of "
                f"{s.pruned_from}, whose tuned weights of the same run it decodes with "
                "(--runs-of, --runs-c)"
            )
    return systems


def _systems(cfg: Table1Config, models: list[Model], best: str) -> list[System]:
    """The systems of ``cfg`` with the K of the --runs options."""
    forward = [m for m in models if m.direction == "forward"]
    inverse = [m for m in models if m.direction == "inverse"]
    systems = [System("a", "a", "baseline", "mert", cfg.runs, None)]
    for m in forward:
        name = f"+RNN {m.label}"
        systems.append(System(f"b-{m.label}", "b", name, "mert", cfg.runs, "a", (m.label,)))
    if cfg.cd_runs:
        systems += [
            System(f"c-{best}", "c", f"+RNN+WP {best}", "mert", cfg.cd_runs, "a", (best,), True),
            System(
                f"d-{best}", "d", f"+RNN {best}, top-{cfg.top_k} table", "mert", cfg.cd_runs,
                "a", (best,), pruned_from=f"b-{best}",
            ),
        ]  # fmt: skip
    for m in inverse:
        systems.append(
            System(
                f"e-{best}+{m.label}", "e", f"+RNN p(f|e) {best} and p(e|f) {m.label}", "mert",
                cfg.runs, "a", (best, m.label),
            )
        )  # fmt: skip
    if cfg.runs_f:
        systems.append(
            System(
                f"f-{best}", "f", f"+RNN {best}, filled up with its own pairs", "mert",
                cfg.runs_f, "a", (best,), extended=True, second_baseline=f"b-{best}",
            )
        )  # fmt: skip
    if cfg.runs_mira:
        systems += [
            System("a-mira", "a", "baseline, batch MIRA", "mira", cfg.runs_mira, None),
            System(
                f"b-mira-{best}", "b", f"+RNN {best}, batch MIRA", "mira", cfg.runs_mira,
                "a-mira", (best,),
            ),
        ]  # fmt: skip
    return systems


def chains(systems: list[System]) -> list[tuple[int, list[System]]]:
    """The tuning chains, in the order they start: replica by replica (a cut-short run has
    whole rows); (d)'s run r prunes with (b)'s tuned weights of run r, so it follows that
    tuning in its chain."""
    found: dict[tuple[int, str], list[System]] = {}
    for run in range(1, max(s.runs for s in systems) + 1):
        for system in systems:
            if run <= system.runs:
                found.setdefault((run, system.pruned_from or system.key), []).append(system)
    return [(run, members) for (run, _), members in found.items()]


def tuning_step(system: System, run: int) -> str:
    return f"{'tune' if system.tuned else 'prune'}-{system.key}-{run}"


def decode_step(system: System, run: int) -> str:
    return f"decode-{system.key}-{run}"
