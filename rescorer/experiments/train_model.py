"""The baseline's ``train`` step: Moses' ``train-model.perl``, its nine steps one command each,
each shown with its elapsed time, and a killed training resumed inside the step.

``train-model.perl`` runs nine steps (``--first-step N --last-step N`` runs step N alone):

= ==========================================  ===========================================
1 prepare the corpus (mkcls, vocabularies)     ``corpus/``: ``S.vcb``, ``T.vcb``, their
                                               ``.classes``, ``S-T-int-train.snt``, ``T-S-...``
2 word alignment, MGIZA++ both ways            ``giza.S-T/S-T.A3.final.gz``, ``giza.T-S/...``
3 symmetrise (grow-diag-final-and)             ``model/aligned.grow-diag-final-and``
4 lexical translation tables                   ``model/lex.f2e``, ``model/lex.e2f``
5 extract phrases                              ``model/extract.sorted.gz``, ``.inv``, ``.o``
6 score phrases                                ``model/phrase-table.gz``
7 lexicalised reordering model                 ``model/reordering-table.*.gz``
8 generation model (none for one factor)       (nothing)
9 moses.ini                                    ``model/moses.ini``
= ==========================================  ===========================================

A step counts as finished when its command exited 0 and its outputs are there: the driver then
records it in ``train/steps.json`` (atomically). A re-run after a kill starts from the first
step not recorded (or whose outputs a later step reads and which are gone), with
``--first-step N``; what that step and every later one would write is removed first, because
``train-model.perl`` reuses a file it finds in place ("already in place, reusing", "seems
finished, reusing"), the half-written output of a killed step included.

During step 2, the hours of a big corpus, a line for every MGIZA++ iteration finished in both
directions says which model it is at and, at the pace so far, roughly how long is left.
"""

from __future__ import annotations

import re
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rescorer.errors import RescorerError
from rescorer.experiments.steps import Step, StepError
from rescorer.io.jsonfiles import read_json_object, write_json

STEPS = {
    1: "prepare the corpus",
    2: "word alignment (MGIZA++)",
    3: "symmetrised alignment",
    4: "lexical tables",
    5: "extract phrases",
    6: "score phrases",
    7: "reordering model",
    8: "generation model",
    9: "moses.ini",
}
RECORD = "steps.json"  # the train-model.perl steps finished, in the train step's folder


@dataclass(frozen=True)
class Layout:
    """Where train-model.perl writes, in its -root-dir, for source ``src`` and target ``tgt``."""

    root: Path
    src: str
    tgt: str

    def outputs(self, n: int) -> list[Path]:
        """What step ``n`` leaves for the later steps and the system (a glob's matches for
        the reordering table, whose name has the model's type in it)."""
        s, t, corpus, model = self.src, self.tgt, self.root / "corpus", self.root / "model"
        if n == 1:
            names = [f"{s}.vcb", f"{t}.vcb", f"{s}.vcb.classes", f"{t}.vcb.classes"]
            return [
                corpus / name
                for name in (*names, f"{s}-{t}-int-train.snt", f"{t}-{s}-int-train.snt")
            ]
        if n == 2:
            return [
                self.root / f"giza.{a}-{b}" / f"{a}-{b}.A3.final.gz" for a, b in ((s, t), (t, s))
            ]
        if n == 7:
            return sorted(model.glob("reordering-table.*.gz"))[:1] or [model / "reordering-table"]
        return {
            3: [model / "aligned.grow-diag-final-and"],
            4: [model / "lex.f2e", model / "lex.e2f"],
            5: [model / f"extract{x}.sorted.gz" for x in ("", ".inv", ".o")],
            6: [model / "phrase-table.gz"],
            8: [],
            9: [model / "moses.ini"],
        }[n]

    def scratch(self, n: int) -> list[Path]:
        """What step ``n`` writes, finished or not: removed before it runs."""
        model = self.root / "model"
        if n == 1:
            return [self.root / "corpus"]
        if n == 2:
            return [
                self.root / f"giza.{self.src}-{self.tgt}",
                self.root / f"giza.{self.tgt}-{self.src}",
            ]
        patterns = {3: "aligned.*", 4: "lex.*", 5: "extract.*", 6: "phrase-table*"}
        patterns |= {7: "reordering-table*", 8: "generation*", 9: "moses.ini"}
        return sorted(model.glob(patterns[n])) if model.is_dir() else []

    def complete(self, n: int) -> bool:
        return all(p.is_file() and p.stat().st_size > 0 for p in self.outputs(n))


def needed_before(first: int) -> list[int]:
    """The finished steps whose outputs the steps from ``first`` on read: step 2 reads step 1's
    corpus files, step 3 step 2's alignments; from step 4 on, the model files of steps 3 on
    (the corpus and alignments are removed once the training is done)."""
    if first in (2, 3):
        return [first - 1]
    return list(range(3, min(first, 10)))


def first_to_run(layout: Layout, finished: dict[str, float]) -> int:
    """The first step to run (10: none): the first not recorded finished, or earlier when the
    outputs of a recorded step that a later one reads are gone."""
    first = next((n for n in STEPS if str(n) not in finished), 10)
    while (
        gone := next((n for n in needed_before(first) if not layout.complete(n)), None)
    ) is not None:
        first = gone
    return first


def read_record(folder: Path) -> dict[str, float]:
    """{step: seconds} of the train-model.perl steps finished ({} for none, or a record that
    is damaged: the training then starts again, as a killed one with no record does)."""
    path = folder / RECORD
    if not path.is_file():
        return {}
    try:
        record = read_json_object(path, what="the record of train-model.perl's steps")
    except RescorerError:
        return {}
    finished = record.get("finished")
    if not isinstance(finished, dict):
        return {}
    return {
        k: float(v)
        for k, v in finished.items()
        if k in map(str, STEPS) and isinstance(v, (int, float))
    }


def run_steps(
    step: Step,
    argv: list[str],
    layout: Layout,
    say: Callable[[str], None],
    prog: str = "baseline",
) -> dict[str, Any]:
    """Run train-model.perl's steps not finished yet, one command each (``argv`` plus
    ``--first-step N --last-step N``), a line before and after each; returns what ran."""
    finished = read_record(step.folder)
    first = first_to_run(layout, finished)
    finished = {k: v for k, v in finished.items() if int(k) < first}
    if 1 < first <= 9:
        say(f"{prog}: train: steps 1-{first - 1} done before; going on from step {first}")
    for n in range(first, 10):
        for path in layout.scratch(n):
            shutil.rmtree(path) if path.is_dir() else path.unlink(missing_ok=True)
    start = time.monotonic()
    for n in range(first, 10):
        say(f"{prog}: train: {n}/9 {STEPS[n]} ...")
        began = time.monotonic()
        watch = GizaProgress(step.log, say, prog) if n == 2 else None
        step.run(
            [*argv, "--first-step", str(n), "--last-step", str(n)], cwd=layout.root, watch=watch
        )
        missing = [p for p in layout.outputs(n) if not (p.is_file() and p.stat().st_size > 0)]
        if missing:
            raise StepError(
                f"step train: train-model.perl step {n} ({STEPS[n]}) exited 0 but left no "
                f"{missing[0]} (see {step.log})"
            )
        finished[str(n)] = round(time.monotonic() - began, 1)
        write_json(step.folder / RECORD, {"finished": finished}, fsync=True)
        say(
            f"{prog}: train: {n}/9 {STEPS[n]}: done in {duration(finished[str(n)])} "
            f"(training {duration(time.monotonic() - start)} so far)"
        )
    return {"train_model_steps": finished, "resumed_from_step": first if first > 1 else None}


def duration(seconds: float) -> str:
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


# One line per MGIZA++ iteration and direction ("Hmm Iteration: 3 took: 41 seconds"), and the
# plan of each direction ("hmmiterations = 5  (mh)")
ITERATION = re.compile(
    rb"^(Model 1|Hmm|THTo3 Viterbi|Model[3-6] Viterbi|T3To4 Viterbi) Iteration\s*:\s*\d+ took:",
    re.M,
)
PLANNED = re.compile(rb"^(hmm|model[1-6])iterations = (\d+)", re.M)
SAY_EVERY = 60.0  # seconds between two progress lines of the same model
MODELS = {b"Model 1": "Model 1", b"Hmm": "HMM", b"THTo3 Viterbi": "Model 3"}
MODELS |= {b"Model3 Viterbi": "Model 3", b"T3To4 Viterbi": "Model 4", b"Model4 Viterbi": "Model 4"}
MODELS |= {b"Model5 Viterbi": "Model 5", b"Model6 Viterbi": "Model 6"}


class GizaProgress:
    """Called while step 2 runs: reads what MGIZA++ has appended to the log since, and says a
    line each time two more iterations have finished (a minute apart at least, unless MGIZA has
    gone on to another model) (MGIZA prints a line per iteration and
    direction, ``Hmm Iteration: 3 took: 41 seconds``; the two directions run at once with
    --threads 2 or more), with the model, the elapsed time and, at the pace so far, how long
    is left (a rough figure: a Model 3 or 4 iteration takes longer than a Model 1 one)."""

    def __init__(self, log: Path, say: Callable[[str], None], prog: str) -> None:
        self.log, self.say, self.prog = log, say, prog
        self.offset = log.stat().st_size if log.exists() else 0
        self.partial = b""  # the last line, not ended yet
        self.start = time.monotonic()
        self.done = 0
        self.planned: dict[bytes, int] = {}
        self.model = ""
        self.said = (0.0, "")  # when the last line was said, and at which model

    def __call__(self) -> None:
        try:
            with open(self.log, "rb") as f:
                f.seek(self.offset)
                more = f.read()
        except OSError:
            return
        self.offset += len(more)
        lines, _, self.partial = (self.partial + more).rpartition(b"\n")
        before = self.done
        for match in ITERATION.finditer(lines):
            self.done += 1
            name = match.group(1)
            self.model = MODELS.get(
                name, name.decode().replace(" Viterbi", "").replace("l", "l ", 1)
            )
        for name, count in PLANNED.findall(lines):
            self.planned.setdefault(name, int(count))  # each direction prints the same plan
        total = 2 * sum(self.planned.values())
        elapsed = time.monotonic() - self.start
        if not total or self.done // 2 == before // 2:
            return
        if self.model == self.said[1] and elapsed - self.said[0] < SAY_EVERY:
            return  # a line a minute at most, but at every new model
        self.said = (elapsed, self.model)
        left = elapsed * max(total - self.done, 0) / self.done
        self.say(
            f"{self.prog}: train: 2/9 word alignment: MGIZA++ iteration {self.done} of "
            f"{total} (both directions; {self.model}), {duration(elapsed)}; about "
            f"{duration(left)} left at this pace"
        )
