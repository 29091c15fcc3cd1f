"""The ``rescorer`` command line: a thin click layer over the library.

One file per command family (train.py, score.py, extend.py, moses.py, moses_ini.py, analysis.py
for sample, compare.py, plot.py); common.py holds what they share.

Each command parses its flags, builds a config, calls one library function and turns
``RescorerError`` into one line on stderr with exit code 1 (click's usage errors exit with 2).
SIGINT and SIGTERM end every command with one line and exit 130 or 143 (common.Group).
Heavy imports (torch, kenlm) stay inside the commands so ``rescorer --help`` is instant.
"""

from __future__ import annotations

import gc

import click

from rescorer import __version__
from rescorer.cli import analysis as analysis_commands
from rescorer.cli import compare as compare_commands
from rescorer.cli import extend as extend_commands
from rescorer.cli import moses as moses_commands
from rescorer.cli import moses_ini as moses_ini_command
from rescorer.cli import plot as plot_commands
from rescorer.cli import score as score_commands
from rescorer.cli import train as train_commands
from rescorer.cli.common import Group, count_from_process_start, handle_sigterm
from rescorer.io.outputs import use_checked_stdout
from rescorer.train.deadline import process_age


@click.group(
    cls=Group, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100}
)
@click.version_option(__version__, prog_name="rescorer")
def cli() -> None:
    """Score Moses phrase tables with the RNN Encoder-Decoder of Cho et al. (2014)."""


for command in (
    train_commands.vocab,
    train_commands.train,
    train_commands.info,
    score_commands.score,
    score_commands.merge,
    score_commands.check,
    extend_commands.extend,
    moses_ini_command.moses_ini,
    moses_commands.combine,
    moses_commands.filter_,
    moses_commands.rerank,
    moses_commands.score_nbest,
    analysis_commands.sample,
    compare_commands.compare,
    plot_commands.plot,
):
    cli.add_command(command)


def main() -> None:
    """Console entry point."""
    count_from_process_start(process_age())  # train --max-time counts the start-up too
    handle_sigterm()
    use_checked_stdout()  # every write to stdout checked, to its last byte (io/outputs.py)
    try:
        cli(prog_name="rescorer")
    finally:
        skip_the_collections_at_exit()


def skip_the_collections_at_exit() -> None:
    """Leave what is left to the operating system: the interpreter's shutdown walks every
    object still alive, several times (importing torch alone makes hundreds of thousands), which
    took 0.9 s of a command's 3.5 s on a 2-core Zen 3. Frozen, they are not walked. What a
    command must finish runs before that walk and is untouched: threads are joined, atexit and
    weakref.finalize callbacks run (temporary folders, torch's own), stdout and stderr flushed;
    outputs are closed and renamed by the command itself (io/outputs.py)."""
    gc.freeze()
