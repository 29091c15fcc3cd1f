"""--max-time in the training loop (rescorer/train/deadline.py says what it counts): the share
of the budget in the progress lines, a warning when the setup took most of it, the stop that
keeps the final checkpoint's time in reserve, and the first update's compile under a deadline.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable

import numpy as np

from rescorer.io.progress import COMPILE_TYPICAL
from rescorer.train.deadline import (
    EXIT_RESERVE,
    SETUP_WARN_SHARE,
    Deadline,
    OutOfTime,
    checkpoint_reserve,
    compile_give_up,
)
from rescorer.train.optim import ClippedAdadelta
from rescorer.train.setup import RunSetup
from rescorer.train.stop import fmt_time as _fmt_time


class BudgetedRun(RunSetup):
    """The time budget of a training run (the loop: loop.py's _Trainer)."""

    loop_start = 0.0  # when the updates started (time.monotonic())
    first_update = 0  # the update this invocation started at
    # (time, update, pairs seen) when this invocation's first update ended: the rates that
    # price the reserve start there, leaving out the first update's compile (issue 64)
    steady: tuple[float, int, int] | None = None
    checkpoint_cost: float | None = None  # the last validation and save, seconds (measured)
    checkpointed = 0  # the update of the last checkpoint
    gave_up = False  # --max-time ran out in the first update's compile

    # one update on the pairs of ``index`` (the loop's, loop.py): pairs, tokens, loss or None
    step: Callable[[np.ndarray], tuple[int, int, float | None]]

    def budget(self) -> str:
        """How much of --max-updates/--max-time is used, and the time left by the nearer one
        (a run may stop earlier on --patience)."""
        cfg, run = self.cfg, self.run_state
        shares: list[tuple[float, float | None]] = []  # (share used, seconds left)
        if cfg.max_time:
            used = self.budget_elapsed() / cfg.max_time
            shares.append((used, max(cfg.max_time - self.budget_elapsed(), 0.0)))
        if cfg.max_updates:
            done_here = run.update - self.first_update
            rate = done_here / max(time.monotonic() - self.loop_start, 1e-9)
            left = (cfg.max_updates - run.update) / rate if done_here else None
            shares.append((run.update / cfg.max_updates, left))
        if not shares:
            return ""
        used, left = max(shares, key=lambda s: s[0])
        text = f" | {100 * min(used, 1.0):.0f}% of the budget"
        return text + (f", ETA {_fmt_time(left)}" if left is not None else "")

    def setup_warning(self) -> None:
        """A warning when the setup took most of --max-time (issue 59: 87% went on reading)."""
        used = self.budget_elapsed()
        if self.cfg.max_time and used > SETUP_WARN_SHARE * self.cfg.max_time:
            self.tell(
                f"rescorer train: warning: the setup (reading, counting, encoding, building) took"
                f" {_fmt_time(used)}, {100 * min(used / self.cfg.max_time, 1):.0f}% of --max-time"
                f" {_fmt_time(self.cfg.max_time)}: {_fmt_time(self.cfg.max_time - used)} are left"
                " for training (--vocab DIR, from rescorer vocab, skips the counting pass)"
            )

    def steady_from_here(self) -> None:
        """The first update of this invocation is done: the rates start now."""
        self.steady = (time.monotonic(), self.run_state.update, self.run_state.pairs_seen)

    def leave_out(self, seconds: float) -> None:
        """Leave ``seconds`` (a validation's) out of the steady rates."""
        if self.steady is not None:
            self.steady = (self.steady[0] + seconds, *self.steady[1:])

    def reserve(self) -> float | None:
        """Seconds to keep before the next update: that update, the final checkpoint (its last
        measured cost, else an estimate), both priced at the rate of the updates after this
        invocation's first (None before the second: no rate yet without the compile), and the
        process's exit."""
        if self.steady is None or self.run_state.update == self.steady[1]:
            return None
        since, update, pairs = self.steady
        seconds = max(time.monotonic() - since, 1e-9)
        rate = (self.run_state.pairs_seen - pairs) / seconds  # pairs/s
        per_update = seconds / (self.run_state.update - update)
        checkpoint = checkpoint_reserve(self.checkpoint_cost, len(self.data.valid), rate)
        return checkpoint + per_update + EXIT_RESERVE

    def out_of_time(self) -> bool:
        """Whether --max-time is spent, the next update and the final checkpoint kept in
        reserve."""
        if self.gave_up:  # the first update ran into the deadline
            return True
        left = self.budget_left()
        assert left is not None
        reserve = self.reserve()
        return left <= (reserve or 0.0)

    def reserve_to_measure(self) -> bool:
        """Whether to validate now, so that the reserve is the final checkpoint's measured cost:
        the estimate says stop and no checkpoint was timed yet (issue 64: a reserve priced at
        the first update's rate, its compile included, stopped every run after one update).
        A right estimate costs at most one validation more (this one is then the final one,
        or nearly), a wrong one no longer ends a run with most of its budget left."""
        return (
            self.cfg.max_time is not None
            and self.checkpoint_cost is None
            and self.run_state.update > self.checkpointed
            and self.out_of_time()
        )

    def first_compiled_step(self, index: np.ndarray) -> tuple[int, int, float | None] | None:
        """The first update, which compiles, under a deadline: --compile auto gives up compiling
        past compile_give_up and does it eagerly; any compile stops at the --max-time budget's
        end (None: the update not done, the run stops). The weights and the optimiser come back
        as they were before either redo. Not under torchrun (the ranks would part ways)."""
        cfg = self.cfg
        left = self.budget_left()
        give_up = cfg.compile == "auto"
        seconds = compile_give_up(left) if give_up else left
        if seconds is None or self.world.distributed:
            return self.step(index)
        before = copy.deepcopy((self.model.state_dict(), self.optim.state_dict()))
        try:
            with Deadline(seconds, "compiling"):
                return self.step(index)
        except OutOfTime:
            pass
        self.model.load_state_dict(before[0])
        self.optim.load_state_dict(before[1])
        if not give_up:
            self.gave_up = True
            return None
        self.tell(
            f"rescorer train: warning: compiling the first update ran past {_fmt_time(seconds)}"
            f" (announced: {COMPILE_TYPICAL}); continuing without compiling, as --compile no"
        )
        self.kernels = None
        self.update = ClippedAdadelta(self.optim, compiled=False)
        self.static = self.make_static()
        return self.step(index)
