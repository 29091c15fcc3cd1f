"""The ranges of the numeric options: every number a command or a scripts/ driver takes is
checked when its command line is parsed, against a range its --help states, and a number out
of it is a usage error (exit 2) of one line that says the range (issue 65, item 4: unbounded
numbers ended in tracebacks, or failed minutes later somewhere that did not name the option).

Each type here is one of click's number ranges, so click shows its range in --help
(``[1<=x<=64]``) on its own: :class:`Int` and :class:`Float` (which refuses nan too) for plain
numbers, and the options that read a number from text: :class:`CountOrAuto` (``N|auto``),
:class:`ByteSize` (``16M``), :class:`Duration` (``90m``) and :class:`Shard` (``K/N``).
:class:`Arg` and :class:`RangeHelp` give argparse (the benchmark scripts) the same.
tests/cli/test_ranges.py walks every command and script: a numeric option without both
bounds fails it.

The bounds are generous, not tight: the largest value any run could want, well under what
breaks (memory, the clock, a kernel's limits).
"""

from __future__ import annotations

import argparse
import copy
import math
import re
from typing import Any

import click

from rescorer.cpus import available_cpus
from rescorer.durations import MAX_DAYS, MAX_SECONDS, parse_duration
from rescorer.errors import RescorerError

# Bounds several options share.
MAX_SEED = 2**32 - 1  # what numpy, torch and scikit-learn's t-SNE all take
MAX_CHUNK_BYTES = 1 << 30  # a chunk is read, parsed and formatted whole, in each worker
MAX_WEIGHT = 1e6  # a feature weight (features are logs of probabilities, -100 to 0)
MAX_SHARDS = 100_000
MAX_UPDATES = 10**10  # training updates: 58 days at 0.5 ms each
MAX_COLUMN = 999  # a score column of a phrase table, counted from 0
PER_CPU = 4  # worker processes, or a driver's threads, per CPU this process may run on


def per_cpu() -> tuple[int, str]:
    """(the most processes or threads a command takes, its words for --help): PER_CPU per CPU
    this process may run on (its affinity, a cgroup quota or SLURM_CPUS_PER_TASK)."""
    count, _ = available_cpus()
    return PER_CPU * count, f"{PER_CPU} per CPU this process may run on ({count} here)"


class Int(click.IntRange):
    """A whole number from ``low`` to ``high``; ``why``, added to a refusal, says why a bound
    is where it is."""

    def __init__(self, low: int, high: int, why: str = "") -> None:
        super().__init__(low, high)
        self.why = why

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        try:
            return super().convert(value, param, ctx)
        except click.BadParameter as exc:
            if not self.why:
                raise
            self.fail(f"{exc.message.rstrip('.')} {self.why}.", param, ctx)


class Float(click.FloatRange):
    """A number from ``low`` to ``high`` (``low_open``, ``high_open``: the bound itself is
    not); nan is refused too, as no comparison is true of it (click's own range takes it)."""

    def __init__(
        self, low: float, high: float, *, low_open: bool = False, high_open: bool = False
    ) -> None:
        super().__init__(low, high, min_open=low_open, max_open=high_open)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if math.isnan(number):
            self.fail(f"{number} is not in the range {self._describe_range()}.", param, ctx)
        return number


class CountOrAuto(Int):
    """A count from ``low`` to ``high``, or ``auto`` (given back as ``auto``)."""

    name = "count or auto"

    def __init__(self, low: int, high: int, auto: Any = "auto", why: str = "") -> None:
        super().__init__(low, high, why)
        self.auto = auto

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if value is self.auto or (isinstance(value, str) and value.strip().lower() == "auto"):
            return self.auto
        return super().convert(value, param, ctx)

    def _describe_range(self) -> str:
        return f"{super()._describe_range()} or auto"


SIZE_UNITS = {"": 0, "k": 10, "m": 20, "g": 30}


def size_text(size: int) -> str:
    """``1G`` of 1 << 30, ``512K``, ``1000``: the largest unit that divides ``size``."""
    for unit, shift in sorted(SIZE_UNITS.items(), key=lambda item: -item[1]):
        if shift and size % (1 << shift) == 0:
            return f"{size >> shift}{unit.upper()}"
    return str(size)


class ByteSize(click.IntRange):
    """A size in bytes: ``1048576``, ``512K``, ``16M``, ``1G`` (K, M, G: powers of 1024; ``KiB``,
    ``MiB``, ``GiB`` and ``KB``, ``MB``, ``GB`` mean the same), from ``low`` to ``high``."""

    name = "size"

    def __init__(self, low: int = 1, high: int = MAX_CHUNK_BYTES) -> None:
        super().__init__(low, high)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, int):
            number = value
        else:
            found = re.fullmatch(r"(\d+)([kmg]?)(?:i?b)?", str(value).strip().lower())
            if found is None:
                self.fail(f"{value!r}: expected a size, e.g. 1048576, 512K, 16M or 1G", param, ctx)
            number = int(found[1]) << SIZE_UNITS[found[2]]
        if not self.min <= number <= self.max:  # type: ignore[operator]
            self.fail(f"{value} is not in the range {self._describe_range()}.", param, ctx)
        return number

    def _describe_range(self) -> str:
        return f"{size_text(int(self.min or 0))}<=x<={size_text(int(self.max or 0))}"


class Duration(click.FloatRange):
    """A duration of rescorer.durations' grammar (``90m``, ``2h``, ``1h30m``), 0s to MAX_DAYS
    days; the text itself is passed on."""

    name = "duration"

    def __init__(self) -> None:
        super().__init__(0, MAX_SECONDS)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        try:
            parse_duration(str(value))
        except RescorerError as exc:
            self.fail(str(exc), param, ctx)
        return value

    def _describe_range(self) -> str:
        return f"0s<=x<={MAX_DAYS}d"


class Shard(click.IntRange):
    """``K/N``, the K-th of N shards, as (K, N): 1 <= K <= N <= MAX_SHARDS."""

    name = "shard"

    def __init__(self) -> None:
        super().__init__(1, MAX_SHARDS)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, tuple):
            return value
        try:
            k, n = (int(x) for x in str(value).split("/"))
        except ValueError:
            self.fail(f"{value!r}: expected K/N, e.g. 3/16", param, ctx)
        if not 1 <= k <= n <= MAX_SHARDS:
            self.fail(f"{value} is not in the range {self._describe_range()}.", param, ctx)
        return k, n

    def _describe_range(self) -> str:
        return f"1<=K<=N<={MAX_SHARDS}"


# ----------------------------------------------------------------- argparse (benchmarks)
class Arg:
    """An argparse type: a number (``kind``: int or float) from ``low`` to ``high``; else
    argparse's usage error (exit 2), one line that says the range. Give the parser
    ``formatter_class=RangeHelp`` to show the range in --help."""

    def __init__(self, low: float, high: float, kind: type = int) -> None:
        self.low, self.high, self.kind = low, high, kind
        self.__name__ = "whole number" if kind is int else "number"  # argparse's messages

    def __call__(self, text: str) -> Any:
        try:
            number = self.kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a {self.__name__}") from None
        if not self.low <= number <= self.high:  # nan is in no range
            raise argparse.ArgumentTypeError(f"{number} is not in the range {self.describe()}")
        return number

    def describe(self) -> str:
        return f"{self.low}<=x<={self.high}"


class RangeHelp(argparse.HelpFormatter):
    """argparse's --help with each :class:`Arg` option's range after its help, as click
    shows it: ``[1<=x<=64]``."""

    def _format_action(self, action: argparse.Action) -> str:
        kind = action.type
        if isinstance(kind, Arg):
            action = copy.copy(action)
            action.help = f"{action.help or ''} [{kind.describe()}]".lstrip()
        return super()._format_action(action)
