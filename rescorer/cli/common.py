"""What the commands share: the click group, the error wrapper, signals, message prefixes and
the options that several commands declare."""

from __future__ import annotations

import functools
import os
import re
import signal
import sys
import time
from collections.abc import Callable
from typing import IO, TYPE_CHECKING, Any, TypeVar

import click

if TYPE_CHECKING:
    from rescorer.moses.combine import WeightSpec

from rescorer.cli.ranges import MAX_CHUNK_BYTES, ByteSize, Float, Int
from rescorer.cpus import MAX_THREADS, THREADS_PER_CPU, refused_thread
from rescorer.durations import MAX_SECONDS
from rescorer.errors import RescorerError
from rescorer.io.outputs import drop_stdout, finish_stdout
from rescorer.io.progress import DEFAULT_EVERY
from rescorer.model.config import ModelConfig

F = TypeVar("F", bound=Callable[..., Any])


def command_name(ctx: click.Context | None = None) -> str:
    """``rescorer CMD`` of the running command (``rescorer plot words``): every message a
    command writes on stderr starts with it and a colon."""
    ctx = ctx if ctx is not None else click.get_current_context(silent=True)
    names: list[str] = []
    while ctx is not None and ctx.parent is not None:  # the root's own name is not used
        names.append(ctx.info_name or "")
        ctx = ctx.parent
    return " ".join(["rescorer", *reversed(names)])


def say(message: str) -> None:
    """``rescorer CMD: message`` on stderr."""
    click.echo(f"{command_name()}: {message}", err=True)


# ------------------------------------------------------------------------------- signals
class Terminated(KeyboardInterrupt):
    """SIGTERM, raised as Ctrl-C raises KeyboardInterrupt: the same clean-up runs (temporary
    files removed, ``score``'s OUT.partial kept for --resume) and the command ends the same way,
    with one line and exit 143."""


def _terminate(signum: int, frame: object) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM kills at once
    raise Terminated


_process_start: float | None = None  # time.monotonic() of the process's start, set by main()


def count_from_process_start(age: float) -> None:
    """The console entry point (:func:`rescorer.cli.main`) runs in a process ``age`` seconds
    old: :func:`command_start` is that process's start."""
    global _process_start
    _process_start = time.monotonic() - age


def command_start() -> float:
    """Where ``--max-time`` counts from (time.monotonic()): the process's start where the
    console entry point runs the command (the interpreter's start and imports count, as a Slurm
    limit counts them), else now (a command invoked in a longer-lived process)."""
    return time.monotonic() if _process_start is None else _process_start


def handle_sigterm() -> None:
    """Make SIGTERM raise Terminated in the main thread, unless it was set to be ignored (a
    parent's choice). SIGINT needs nothing: Python raises KeyboardInterrupt (and leaves an
    ignored SIGINT, as nohup sets it, ignored)."""
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _terminate)


def interrupt_status(exc: BaseException) -> int:
    """The exit status of a command stopped by ``exc``, as a shell reports a signal: 130 for
    SIGINT (Ctrl-C), 143 for SIGTERM."""
    return 128 + (signal.SIGTERM if isinstance(exc, Terminated) else signal.SIGINT)


class Group(click.Group):
    """The click group of the commands: a command interrupted by SIGINT or SIGTERM ends with
    ``rescorer CMD: interrupted by SIGINT`` and exit 130 (143 for SIGTERM), where click says
    ``Aborted!`` and exits 1. Commands that save state on a signal (train, score) print their
    own line and exit with the same status."""

    def invoke(self, ctx: click.Context) -> Any:
        from rescorer.cpus import cap_environment

        cap_environment()  # before any command loads torch (libgomp reads it then)
        try:
            return super().invoke(ctx)
        except click.UsageError as exc:  # its last line as every error line: rescorer CMD: error:
            exc.show = functools.partial(show_usage_error, exc)  # type: ignore[method-assign]
            raise
        except KeyboardInterrupt as exc:
            name = command_name(ctx)
            if ctx.invoked_subcommand:
                name += f" {ctx.invoked_subcommand}"
            which = "SIGTERM" if isinstance(exc, Terminated) else "SIGINT"
            click.echo(f"{name}: interrupted by {which}", err=True)
            sys.exit(interrupt_status(exc))


def show_usage_error(exc: click.UsageError, file: IO[Any] | None = None) -> None:
    """click's usage error (the usage, the hint, the error, exit 2) with the error line
    prefixed as every error line is: ``rescorer CMD: error: ...``, not ``Error: ...``."""
    file = file if file is not None else sys.stderr
    ctx = exc.ctx
    if ctx is not None:
        hint = ""
        if ctx.command.get_help_option(ctx) is not None:
            option = max(ctx.command.get_help_option_names(ctx), key=len)
            hint = f"Try '{ctx.command_path} {option}' for help.\n"
        click.echo(f"{ctx.get_usage()}\n{hint}", file=file, color=ctx.color)
    click.echo(f"{command_name(ctx)}: error: {exc.format_message()}", file=file)


def user_errors(func: F) -> F:
    """Turn a RescorerError into ``rescorer CMD: error: ...`` on stderr and exit code 1."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            result = func(*args, **kwargs)
            finish_stdout()  # the last flush, checked: a full disk is an error, not exit 0
            return result
        except RescorerError as exc:
            from rescorer.job.output import release_locks

            click.echo(f"{command_name()}: error: {exc}", err=True)
            drop_stdout()
            release_locks()  # a job that failed before it ran leaves no lock file
            sys.exit(1)
        except RuntimeError as exc:  # Python's own for a thread the system refused
            if (refused := refused_thread(exc)) is None:
                raise
            click.echo(f"{command_name()}: error: {refused}", err=True)
            sys.exit(1)
        except BrokenPipeError:
            # The reader of our stdout went away (``| head``): the output is incomplete, so
            # exit 1 with one line, never a summary that says everything was written. stdout
            # goes to /dev/null so the interpreter's last flush cannot fail a second time;
            # stderr may be the same broken pipe (2>&1).
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            try:
                click.echo(
                    f"{command_name()}: error: the reader of the output closed it (a pipe such "
                    "as '| head'); the output is incomplete",
                    err=True,
                )
            except BrokenPipeError:
                os.dup2(devnull, sys.stderr.fileno())
            sys.exit(1)

    return wrapper  # type: ignore[return-value]


def check_device(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """A usage error (exit 2, before any model loads) for a device name that is not one of
    auto, cpu, cuda, cuda:N. Whether a CUDA device is there is checked when it is used."""
    if value in ("auto", "cpu", "cuda") or re.fullmatch(r"cuda:\d+", value):
        return value
    raise click.BadParameter(f"{value!r}: expected auto, cpu, cuda or cuda:N")


device_option = click.option(
    "--device",
    default="auto",
    show_default=True,
    callback=check_device,
    help="auto, cpu, cuda or cuda:N.",
)


progress_option = click.option(
    "--progress-every",
    default=DEFAULT_EVERY,
    type=Float(0, MAX_SECONDS),
    show_default=True,
    metavar="SECONDS",
    help="Off a terminal (nohup, Slurm): a progress line this often; 0: none.",
)


quiet_option = click.option(
    "-q", "--quiet", is_flag=True, help="No progress lines and no summary (errors still show)."
)


model_option = click.option(
    "-m", "--model", "model_dir", required=True, help="Model folder from rescorer train."
)


precision_option = click.option(
    "--precision",
    type=click.Choice(["auto", "bf16", "fp32"]),
    default="auto",
    show_default=True,
    help="auto: bf16 autocast on GPUs; on a CPU whichever of bf16 and fp32 multiplies this "
    "model's matrices faster here (measured once, cached in ~/.cache/rescorer/precision.json; "
    "a measurement taken on a busy machine is taken again once it is idle; delete the file, "
    "or set RESCORER_CACHE_DIR to an empty folder, to measure again).",
)


threads_option = click.option(
    "--threads",
    type=click.IntRange(min=1, max=MAX_THREADS),
    metavar="N",
    help="Threads that compute [default: OMP_NUM_THREADS if set, else the CPUs this process "
    "may run on (its affinity, a cgroup CPU quota or SLURM_CPUS_PER_TASK), fewer while the "
    "machine is busier than its CPUs (load average above them: their fair share, 1 on 2 "
    f"CPUs)]. At most {THREADS_PER_CPU} per CPU this process may run on (more are capped).",
)


def use_threads(threads: int | None) -> str:
    """Set torch's thread count for ``--threads`` (None: the default rule, rescorer/cpus.py) and
    return the choice as the first line of a command says it (``2 threads (...)``)."""
    from rescorer.cpus import choose_threads
    from rescorer.device import set_threads

    return set_threads(choose_threads(threads)).describe()


def compile_option(auto: str) -> Callable[[F], F]:
    """``--compile auto|yes|no`` (default auto): torch.compile the recurrence and softmax;
    ``auto`` says when auto compiles."""
    return click.option(
        "--compile",
        type=click.Choice(["auto", "yes", "no"]),
        default="auto",
        show_default=True,
        help=f"torch.compile the recurrence and softmax (auto: {auto}).",
    )


score_precision_option = click.option(
    "--precision",
    type=click.Choice(["auto", "bf16", "tf32", "fp32"]),
    default="auto",
    show_default=True,
    help="auto: tf32 on GPUs with TF32 (Ampere or newer: fp32 with TF32 matrix products), "
    "else fp32 (no TF32 anywhere). bf16 autocast is faster but moves log p by ~0.12 at the "
    "99th percentile (docs/score.md, Precision).",
)


MODEL = ModelConfig()  # the defaults, written once there (a torch-free module)
MAX_VOCAB = 1_000_000  # a shortlist: far more words than any phrase table's side needs


def vocab_size_options(func: F) -> F:
    """``--src-vocab-size`` and ``--tgt-vocab-size``: the shortlists of ``vocab`` and ``train``
    (ids 0 and 1 are reserved, so at least 2; at most MAX_VOCAB)."""
    for side, default in (("tgt", MODEL.tgt_vocab_size), ("src", MODEL.src_vocab_size)):
        func = click.option(
            f"--{side}-vocab-size",
            default=default,
            type=Int(2, MAX_VOCAB),
            show_default=True,
            help=f"{'Source' if side == 'src' else 'Target'} shortlist size, ids 0 (padding) "
            "and 1 (UNK) included.",
        )(func)
    return func


def weight_options(func: F) -> F:
    """The options that say how to weight features: an ini, overrides, the LM."""
    options = [
        click.option("--weights", "ini", metavar="INI", help="moses.ini: features and weights."),
        click.option(
            "--weight",
            "overrides",
            multiple=True,
            metavar="NAME=V1,V2,..",
            help="Set a feature's weights (repeatable), e.g. TranslationModel0=0.2,0.2,0.2,0.2.",
        ),
        click.option("--feature-name", help="The table's feature when the ini has several."),
        click.option(
            "--lm", "lm_path", metavar="FILE", help="KenLM file instead of the ini's path."
        ),
        click.option("--no-lm", is_flag=True, help="Leave the language model out of the score."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def weight_spec(
    ini: str | None,
    overrides: tuple[str, ...],
    feature_name: str | None = None,
    lm_path: str | None = None,
    no_lm: bool = False,
) -> WeightSpec:
    """The one WeightSpec of a command, from weight_options' values (built once, here)."""
    from rescorer.moses.combine import WeightSpec, parse_weight_option
    from rescorer.moses.ini import read_ini

    return WeightSpec(
        ini=read_ini(ini) if ini is not None else None,
        overrides=tuple(parse_weight_option(text) for text in overrides),
        feature_name=feature_name,
        lm_path=lm_path,
        use_lm=not no_lm,
    )


chunk_bytes_option = click.option(
    "--chunk-bytes",
    type=ByteSize(1, MAX_CHUNK_BYTES),
    metavar="SIZE",
    help="Input bytes per chunk, e.g. 1M, 256K [default: 1 MiB on a CPU, 16 MiB on a GPU, where "
    "a chunk must hold enough work to hide the kernel launches].",
)
