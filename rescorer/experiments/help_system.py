"""The help-prose system by one command: the corpus from Debian's LibreOffice help packages
(:mod:`help_corpus`), then a tuned Moses baseline from it (:mod:`baseline`), in one work folder:

=================  ==============================================================================
``WORK/corpus``    the corpus step (its ``done.json`` records the corpus settings; the downloads
                   in ``corpus/debs`` are kept and reused when the step runs again)
``WORK/baseline``  the baseline's own work folder and steps; ``WORK/baseline/system`` is the
                   Moses system folder that ``scripts/table1.py`` takes
=================  ==============================================================================

Each step is skipped once done, so the same command after a kill goes on where it stopped. A
work folder whose corpus was built with other settings (by this command, or by
``help_corpus.py`` into ``WORK/corpus``: its ``corpus.json``) is refused: the baseline steps
already done there were built from that corpus.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rescorer.errors import RescorerError
from rescorer.experiments.baseline import BaselineConfig, run_baseline
from rescorer.experiments.help_corpus import CorpusConfig, build
from rescorer.experiments.steps import Step, WorkDir
from rescorer.io.jsonfiles import read_json_object

CORPUS_STEP = "corpus"
BASELINE_FOLDER = "baseline"


def corpus_settings(config: CorpusConfig) -> dict[str, Any]:
    """What the corpus depends on (its folder aside), as its step records it."""
    return {k: v for k, v in dataclasses.asdict(config).items() if k != "out"}


def _built_settings(folder: Path) -> dict[str, Any] | None:
    """The settings of a corpus that ``help_corpus.py`` built into ``folder`` without this
    command (no step record; its ``corpus.json`` says the same), or None if none was built."""
    path = folder / "corpus.json"
    if not path.is_file():
        return None
    record = read_json_object(path, what="a help corpus's record")
    try:
        src, tgt = (p["name"] for p in record["packages"])
        split = record["split"]
        return corpus_settings(
            CorpusConfig(
                folder, src, tgt, record["languages"]["src"], record["languages"]["tgt"],
                split["dev"], split["test"], split["seed"],
            )
        )  # fmt: skip
    except (KeyError, TypeError, ValueError) as exc:
        raise RescorerError(
            f"{path}: not a help corpus's record ({exc!r} is missing or malformed); use "
            "another work folder, or remove it to build the corpus again"
        ) from None


def build_help_system(
    work: Path,
    corpus: CorpusConfig,
    baseline: BaselineConfig,
    *,
    echo: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """The corpus into ``work/corpus``, then the baseline from it in ``work/baseline``
    (``corpus.out``, and ``baseline.corpus``, ``work``, ``src`` and ``tgt`` are set here, the
    last two to the corpus's languages); returns the baseline's evaluate record."""
    wd = WorkDir(work, echo=echo, prog="help-system")
    wd.lock()  # one driver per work folder (the baseline takes its own folder's lock too)
    corpus = dataclasses.replace(corpus, out=work / CORPUS_STEP)
    wanted = corpus_settings(corpus)
    done = wd.done(CORPUS_STEP)
    built = done.get("settings") if done is not None else _built_settings(corpus.out)
    if built is not None and built != wanted:
        raise RescorerError(
            f"{work / CORPUS_STEP} was built with {built}, not {wanted}: the baseline in "
            f"{work / BASELINE_FOLDER} comes from that corpus; use another work folder for "
            "other packages or another split"
        )

    def make_corpus(step: Step) -> dict[str, Any]:
        record = build(corpus, say=step.say_in_log)
        return {"settings": wanted, "pairs": record["kept"], "sets": record["sets"]}

    wd.step(CORPUS_STEP, make_corpus, keep_partial=True)  # keeps corpus/debs after a kill
    baseline = dataclasses.replace(
        baseline, corpus=corpus.out, work=work / BASELINE_FOLDER, src=corpus.src, tgt=corpus.tgt
    )
    return run_baseline(baseline, echo=echo)
