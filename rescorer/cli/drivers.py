"""What the experiment drivers share (scripts/baseline.py, help_corpus.py, help_system.py and
table1.py): how a driver ends on an error or a signal, the checks of counts at parse time, and
the options of the Moses tools (``--moses``, ``--mert-seed``).

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


def at_least(
    low: int, why: str = ""
) -> Callable[[click.Context, click.Parameter, int | None], int | None]:
    """A click callback refusing a count below ``low`` at parse time (None passes: unset)."""

    def check(ctx: click.Context, param: click.Parameter, value: int | None) -> int | None:
        if value is not None and value < low:
            raise click.BadParameter(f"{value}: expected {low} or more{why}", ctx, param)
        return value

    return check


# mert-moses.pl --maximum-iterations 0 is no limit at all: a tuning that never stops by count
MERT_ITERATIONS = at_least(1, " (mert-moses.pl reads 0 as no limit)")
COUNT = at_least(1)
NONE_OR_MORE = at_least(0)


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


class MertSeed(click.ParamType):
    """MERT's random seed: an integer, or ``clock`` for mert's own seed from the system clock
    (None)."""

    name = "SEED|clock"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if value is None or isinstance(value, int):
            return value
        if str(value).strip().lower() == "clock":
            return None
        try:
            return int(value)
        except ValueError:
            self.fail(f"{value!r}: expected an integer or 'clock'", param, ctx)


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
    """``--max-iterations``: MERT's iterations at most, 1 or more (0 would be no limit)."""
    return click.option(
        "--max-iterations",
        default=default,
        show_default=True,
        callback=MERT_ITERATIONS,
        help="MERT iterations at most (1 or more).",
    )
