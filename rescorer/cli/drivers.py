"""What the experiment drivers share (scripts/baseline.py, help_corpus.py, help_system.py and
table1.py): how a driver ends on an error or a signal, the ranges of their counts (checked at
parse time), and the options of the Moses tools (``--moses``, ``--mert-seed``, ``--threads``).

Every driver runs its commands as :mod:`rescorer.experiments.steps` does (a command the driver
is interrupted in is ended with every process it started, ``dpkg -x``'s and mert-moses.pl's
decoder included); :func:`drive` makes SIGTERM interrupt the driver as Ctrl-C does and ends it
with one line and exit 130 (SIGINT) or 143 (SIGTERM), or ``PROG: error: ...`` and exit 1.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import click

from rescorer.cli.common import Terminated, handle_sigterm, interrupt_status
from rescorer.cli.ranges import Int, per_cpu
from rescorer.errors import RescorerError

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])


def fail(prog: str, message: str) -> NoReturn:
    """``PROG: error: MESSAGE`` on stderr, exit 1."""
    click.echo(f"{prog}: error: {message}", err=True)
    sys.exit(1)


def drive(prog: str, work: Path, action: Callable[[], T]) -> T:
    """Run ``action``: a RescorerError ends the driver with one error line and exit 1; Ctrl-C
    or SIGTERM (the command running then has been ended, with what it started) with one line
    saying that WORK keeps the finished steps, and exit 130 or 143."""
    handle_sigterm()  # SIGTERM raises as Ctrl-C does: the clean-up is the same
    try:
        return action()
    except RescorerError as exc:
        fail(prog, str(exc))
    except KeyboardInterrupt as exc:
        which = "SIGTERM" if isinstance(exc, Terminated) else "SIGINT"
        click.echo(
            f"{prog}: interrupted by {which}; the finished steps in {work} are kept: "
            "run the same command again to go on",
            err=True,
        )
        sys.exit(interrupt_status(exc))


# The drivers' counts, each with its range (rescorer/cli/ranges.py): a count no run could use is
# a usage error at parse time (issue 58.8: --threads 0 failed only at tuning, after the
# training; issue 65.4: --threads 99999999999999999999 three minutes later in train-model.perl).
MAX_RUNS = 100  # tuning runs of one system
MAX_LINES = 10_000_000  # lines or segments of a corpus, a dev or a test set
MAX_MERT_ITERATIONS = 100
THREADS, THREADS_WHY = per_cpu()
# mert-moses.pl --maximum-iterations 0 is no limit at all: a tuning that never stops by count
MERT_ITERATIONS = Int(1, MAX_MERT_ITERATIONS, "(mert-moses.pl reads 0 as no limit)")
RUNS = Int(1, MAX_RUNS)
RUNS_OR_NONE = Int(0, MAX_RUNS)
LINES = Int(1, MAX_LINES)
MAX_MERT_SEED = 2**31 - 1  # mert reads its seed as a C int


def threads_option(default: int, shown: str, what: str = "") -> Callable[[F], F]:
    """``--threads N`` of a driver (the Moses tools' threads, ``what`` says which), 1 to
    PER_CPU per CPU this process may run on."""
    return click.option(
        "--threads",
        default=min(default, THREADS),
        type=Int(1, THREADS),
        show_default=shown,
        help=f"{what}At most {THREADS_WHY}.".strip(),
    )


def moses_option(default: str | os.PathLike[str], what: str) -> Callable[[F], F]:
    """``--moses``: the Moses toolkit folder, ``default`` shown as ../shared/tools/moses (the
    scripts pass the one beside the repository); ``what`` names the sub-folders used."""
    return click.option(
        "--moses",
        type=click.Path(file_okay=False, path_type=Path),
        default=default,
        show_default="../shared/tools/moses",
        help=f"The Moses toolkit ({what}).",
    )


class MertSeed(Int):
    """MERT's random seed: an integer from 0 to MAX_MERT_SEED, or ``clock`` for mert's own
    seed from the system clock (None)."""

    name = "SEED|clock"

    def __init__(self) -> None:
        super().__init__(0, MAX_MERT_SEED)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if value is None or str(value).strip().lower() == "clock":
            return None
        try:
            int(value)
        except ValueError:
            self.fail(f"{value!r}: expected an integer or 'clock'", param, ctx)
        return super().convert(value, param, ctx)

    def _describe_range(self) -> str:
        return f"{super()._describe_range()} or clock"


def mert_seed_option(default: int) -> Callable[[F], F]:
    """``--mert-seed``: MERT's seed, ``default`` unless given; ``clock`` gives mert's own seed
    from the system clock, so that two builds of one bitext tune differently."""
    return click.option(
        "--mert-seed",
        type=MertSeed(),
        default=default,
        show_default=True,
        help="MERT's random seed: the same seed, table and dev set tune the same weights; "
        "'clock' seeds from the system clock (mert-moses.pl's own default).",
    )


def max_iterations_option(default: int) -> Callable[[F], F]:
    """``--max-iterations``: MERT's iterations at most, 1 to MAX_MERT_ITERATIONS (0 would be
    no limit)."""
    return click.option(
        "--max-iterations",
        default=default,
        type=MERT_ITERATIONS,
        show_default=True,
        help="MERT iterations at most.",
    )
