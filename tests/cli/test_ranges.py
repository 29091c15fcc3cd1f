"""Every numeric option of every command and of every scripts/*.py has a range, checked when
the command line is parsed and shown in --help (issue 65, item 4: --workers 500, --chunk-bytes
100G, --max-time 300000d, a huge --batch-size or baseline.py --threads ended in tracebacks, or
failed minutes later where nothing named the option).

The walk finds the options from click's command trees and the scripts' argparse parsers: a new
numeric option without both bounds fails it."""

from __future__ import annotations

import argparse
import importlib.util
import math
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner
from conftest import ROOT

from rescorer.cli import cli

SCRIPTS = ROOT / "scripts"
HUGE = "99999999999999999999"


def script(path: Path) -> Any:
    """scripts/NAME.py as a module (its folder on sys.path, as when it runs)."""
    if str(SCRIPTS) not in sys.path:
        sys.path.insert(0, str(SCRIPTS))
    spec = importlib.util.spec_from_file_location(f"script_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def commands(command: click.Command, path: str) -> Iterator[tuple[str, click.Command]]:
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            yield from commands(sub, f"{path} {name}")
    else:
        yield path, command


def click_commands() -> Iterator[tuple[str, click.Command]]:
    yield from commands(cli, "rescorer")
    for path in sorted(SCRIPTS.glob("*.py")):
        main = getattr(script(path), "main", None)
        if isinstance(main, click.Command):
            yield from commands(main, path.name)


class CaughtParserError(Exception):
    """An argparse script's parser, caught as it would parse."""


def argparse_parsers() -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """The parser of every script whose main() builds one with argparse: main() runs up to its
    parse_args, which raises it here."""

    def caught(self: argparse.ArgumentParser, *args: object, **kwargs: object) -> None:
        raise CaughtParserError(self)

    for path in sorted(SCRIPTS.glob("*.py")):
        main = getattr(script(path), "main", None)
        if main is None or isinstance(main, click.Command):
            continue
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(argparse.ArgumentParser, "parse_args", caught)
            patch.setattr(sys, "argv", [str(path)])
            with pytest.raises(CaughtParserError) as found:
                main()
        yield path.name, found.value.args[0]


def numeric(param: click.Parameter) -> bool:
    """Whether an option takes numbers: a number type, or a callback that makes text one."""
    if isinstance(param.type, click.types._NumberParamTypeBase):
        return True
    if param.callback is None or getattr(param, "is_flag", False):
        return False
    try:
        value = param.process_value(click.Context(click.Command("x")), "1")
    except click.BadParameter:
        return False
    values = value if isinstance(value, tuple) else (value,)
    return any(isinstance(v, int | float) and not isinstance(v, bool) for v in values)


def name(where: str, param: click.Parameter) -> str:
    return f"{where} {max(param.opts, key=len) if param.opts else param.name}"


WALKED = [
    (where, command, param) for where, command in click_commands() for param in command.params
]
CLICK = [
    pytest.param(command, param, id=name(where, param))
    for where, command, param in WALKED
    if numeric(param)
]
PARSERS = list(argparse_parsers())


def test_the_walk_finds_the_numeric_options_and_only_them() -> None:
    """What the tests below are given: every command's and script's numeric options (some
    taken as text, N|auto, K/N, 16M, 90m: issue 65's), none of the text ones."""
    found = {name(where, param) for where, _, param in WALKED if numeric(param)}
    for option in [
        "rescorer score --workers",
        "rescorer score --chunk-bytes",
        "rescorer score --shard",
        "rescorer train --batch-size",
        "rescorer train --max-time",
        "rescorer plot words --seed",
        "rescorer moses-ini --new-weight",
        "baseline.py --threads",
        "baseline.py --mert-seed",
        "table1.py --train",
        "power.py --gain",
    ]:
        assert option in found
    assert not found & {
        "rescorer score --device",
        "rescorer filter --min-score",
        "table1.py --work",
    }
    assert len(found) > 90
    numbers = {f"{where} {action.option_strings[-1]}" for where, parser in PARSERS
               for action in parser._actions if numeric_action(action)}  # fmt: skip
    assert {"bench_score.py --workers", "bench_train.py --batch-size"} <= numbers
    assert len(numbers) > 50


@pytest.mark.parametrize(("command", "param"), CLICK)
def test_every_numeric_click_option_has_a_range_shown_in_its_help(
    command: click.Command, param: click.Parameter
) -> None:
    kind = param.type
    assert isinstance(kind, click.types._NumberRangeBase), f"{param.name}: no range ({kind!r})"
    assert kind.min is not None and kind.max is not None, f"{param.name}: {kind!r}"
    if isinstance(param, click.Option):
        help_line = param.get_help_record(click.Context(command))
        assert help_line is not None and kind._describe_range() in help_line[1]
    for text in (HUGE, f"-{HUGE}", "nan", "inf"):
        with pytest.raises(click.BadParameter) as refused:
            kind.convert(text, param, None)
        assert "\n" not in refused.value.format_message()


def numeric_action(action: argparse.Action) -> bool:
    """Whether an argparse option takes numbers: a number type (ranged or not), or none but a
    number for its default."""
    if action.type in (int, float) or hasattr(action.type, "describe"):
        return True
    default = action.default
    return (
        action.type is None and isinstance(default, int | float) and not isinstance(default, bool)
    )


ARGPARSE = [
    pytest.param(parser, action, id=f"{where} {action.option_strings[-1]}")
    for where, parser in PARSERS
    for action in parser._actions
    if numeric_action(action)
]


@pytest.mark.parametrize(("parser", "action"), ARGPARSE)
def test_every_numeric_argparse_option_has_a_range_shown_in_its_help(
    parser: argparse.ArgumentParser, action: argparse.Action
) -> None:
    from rescorer.cli.ranges import Arg, RangeHelp

    kind = action.type
    assert isinstance(kind, Arg), f"{action.option_strings}: a number without a range"
    assert issubclass(parser.formatter_class, RangeHelp)
    assert kind.describe() in parser.format_help()
    default = action.default
    for value in default if isinstance(default, list) else [default]:
        assert value is None or kind.low <= value <= kind.high, value
    for text in (HUGE, f"-{HUGE}", "nan"):
        with pytest.raises(argparse.ArgumentTypeError, match=r"is not (in the range|a )"):
            kind(text)


def refused(args: list[str]) -> str:
    """The error line of a command line refused as it is parsed (exit 2)."""
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2, (args, result.output)
    return result.stderr.splitlines()[-1]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (
            ["score", "t", "-m", "m", "-o", "o", "--workers", "500"],
            "500 is not in the range 0<=x<=",
        ),
        (["score", "t", "-m", "m", "-o", "o", "--workers", HUGE], f"{HUGE} is not in the range"),
        (["extend", "t", "-m", "m", "-o", "o", "--workers", "100000"], "is not in the range 0<=x"),
        (
            ["score", "t", "-m", "m", "-o", "o", "--chunk-bytes", "100G"],
            "100G is not in the range 1<=x<=1G",
        ),
        (["score", "t", "-m", "m", "-o", "o", "--shard", f"1/{HUGE}"], "1<=K<=N<=100000"),
        (["train", "t", "-o", "o", "--max-time", "300000d"], "expected 0s to 365d"),
        (
            ["train", "t", "-o", "o", "--batch-size", HUGE],
            "is not in the range 1<=x<=65536 or auto",
        ),
        (["train", "t", "-o", "o", "--seed", "-1"], "-1 is not in the range 0<=x<=4294967295"),
        (
            ["moses-ini", "i", "--phrase-table", "t", "-o", "o", "--new-weight", "nan"],
            "nan is not in the range -1000000.0<=x<=1000000.0",
        ),
        (["extend", "t", "-m", "m", "-o", "o", "--floor", "0"], "0.0 is not in the range 0<x<=1"),
    ],
)
def test_the_numbers_of_the_issue_are_usage_errors_saying_the_range(
    args: list[str], says: str
) -> None:
    line = refused(args)
    assert line.startswith(f"rescorer {args[0]}: error: Invalid value for '"), line
    assert says in line, line


def test_a_driver_refuses_a_thread_count_at_parse_time() -> None:
    """baseline.py --threads 99999999999999999999 was accepted, and train-model.perl failed
    three minutes later with a message that did not name --threads."""
    proc = subprocess.run(
        [sys.executable, str(SCRIPTS / "baseline.py"), str(ROOT / "tests" / "data" / "tiny-bitext"),
         "--work", "never", "--threads", HUGE],
        capture_output=True, text=True, cwd=ROOT, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    last = proc.stderr.splitlines()[-1]
    assert f"Invalid value for '--threads': {HUGE} is not in the range 1<=x<=" in last
    assert not (ROOT / "never").exists()


def test_the_float_range_refuses_nan_that_clicks_own_takes() -> None:
    assert math.isnan(click.FloatRange(0, 1).convert("nan", None, None))  # why Float exists
