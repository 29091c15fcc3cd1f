"""Shared fixtures: tiny real data (tests/data) and tiny seeded models."""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch

from rescorer.model.encdec import EncoderDecoder, ModelConfig, init_weights_

# Tests must not change the machine: what rescorer caches (train's measured precision) goes to
# a folder of this session, which every child process inherits, removed at the end.
CACHE_DIR = tempfile.mkdtemp(prefix="rescorer-test-cache-")
os.environ["RESCORER_CACHE_DIR"] = CACHE_DIR
atexit.register(shutil.rmtree, CACHE_DIR, True)

# One compute thread for every run of the session, in process and in the children (which
# inherit it), unless the caller chose: two threads on two cores stall badly while anything
# else runs (rescorer/cpus.py, issue 39); an in-process score of the 2,090-line slice took 50 s
# instead of 1 s on this 2-core machine with one other job. Tests of the thread choice itself
# pass their own environment (tests/test_cpus.py). OMP_NUM_THREADS=2 python3 -m pytest runs
# the suite with two.
os.environ.setdefault("OMP_NUM_THREADS", "1")


# A shell that starts pytest as a background job (`cmd &` in a script, nohup) leaves SIGINT
# ignored, and every child inherits that: the Ctrl-C tests, in process and in their children,
# would wait for an interrupt that never comes. pytest's process and each worker take Python's
# own handler here, before any child starts (a child then starts with the default, and a Python
# child raises KeyboardInterrupt as at a terminal).
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def default_sigint() -> None:
    """``preexec_fn`` for a child a test interrupts with SIGINT: the default disposition, as
    at a terminal. A shell that starts pytest as a background job (``cmd &`` in a script, nohup)
    ignores SIGINT, children inherit that, and Python then leaves SIGINT ignored, so the child
    would never see the test's Ctrl-C."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


# Every test data path (tests/data/README.md says where each file came from).
TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
DATA_DIR = TESTS / "data"
SAMPLE_TABLE = DATA_DIR / "en-fr.sample.phrase-table"  # 200 real lines, 20 blocks of 10
SLICE = DATA_DIR / "pt.en-fr.slice.gz"  # 2,090 real lines in Moses' order
FILTER_SLICE = DATA_DIR / "en-fr.filter-slice.pt.gz"  # the lines around TEST6's n-grams
TEST6 = DATA_DIR / "en-fr.test6.en"  # the first 6 lines of the real test.en
REAL_INI = DATA_DIR / "en-fr.moses.ini"  # mert-moses.pl's tuned ini
DEV13_NBEST = DATA_DIR / "en-fr.dev13.nbest.gz"  # Moses' 100-best lists of 13 dev sentences
DEV13_HYP = DATA_DIR / "en-fr.dev13.hyp.fr"  # and its 1-best output
TINY_ARPA = DATA_DIR / "tiny.arpa"  # hand-made trigram model over a b c
TINY_SYSTEM = DATA_DIR / "tiny-system"  # a tiny real Moses system (its build.py)
GOLDEN = DATA_DIR / "golden"  # a 0.1.0 model directory and its scores
# The shared material beside a checkout (absent on a fresh machine: tests using it skip).
SHARED = ROOT.parent / "shared"
REAL_LM = SHARED / "data" / "en-fr" / "lm.fr.binary"
MOSES = SHARED / "tools" / "moses"


@pytest.fixture
def sample_table() -> Path:
    """200 real en-fr phrase-table lines (see tests/data/README.md)."""
    return SAMPLE_TABLE


@pytest.fixture
def tiny_config() -> ModelConfig:
    """A model small enough to run in milliseconds, with distinct sizes to catch shape mix-ups."""
    return ModelConfig(
        src_vocab_size=30, tgt_vocab_size=40, hidden_size=8, embed_size=6, maxout_units=5
    )


@pytest.fixture
def tiny_model(tiny_config: ModelConfig) -> EncoderDecoder:
    """The tiny model with GroundHog's initialisation, seed 0."""
    torch.manual_seed(0)
    model = EncoderDecoder(tiny_config)
    init_weights_(model, torch.Generator().manual_seed(0))
    return model


# A model directory trained in seconds by the real `rescorer train` (tiny sizes, 20 updates).
TINY_TRAIN_FLAGS = [
    "--hidden-size", "8", "--embed-size", "6", "--maxout-units", "5", "--src-vocab-size", "200",
    "--tgt-vocab-size", "200", "--batch-size", "16", "--max-updates", "20", "--valid-every", "10",
    "--valid-fraction", "0.05", "-q",
]  # fmt: skip


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """TINY_TRAIN_FLAGS on the tiny Moses system's table, once per test session."""
    out = tmp_path_factory.mktemp("tiny-model") / "model"
    table = TINY_SYSTEM / "phrase-table.gz"
    subprocess.run(
        [sys.executable, "-m", "rescorer", "train", str(table), "-o", str(out), *TINY_TRAIN_FLAGS],
        check=True,
    )
    return out


@pytest.fixture(scope="session")
def tiny_inverse_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """As tiny_model_dir, trained in the inverse direction: p(source | target)."""
    out = tmp_path_factory.mktemp("tiny-inverse-model") / "model"
    table = TINY_SYSTEM / "phrase-table.gz"
    flags = [*TINY_TRAIN_FLAGS, "--direction", "inverse"]
    subprocess.run(
        [sys.executable, "-m", "rescorer", "train", str(table), "-o", str(out), *flags],
        check=True,
    )
    return out


# --------------------------------------------------- scripts/table1.py on the tiny system
TABLE1 = ROOT / "scripts" / "table1.py"


def table1_argv(system: Path, models: list[Path], work: Path, *more: str) -> list[str]:
    """scripts/table1.py on ``system`` as the tests run it: one MERT iteration, 300 trials, and
    (f)'s extend flags (a floor of 0.5, so that the 1-best takes some new pairs). Every run
    with these settings may go on in another's work folder (table1 refuses other settings)."""
    return [
        sys.executable, str(TABLE1), str(system), *(a for m in models for a in ("--model", str(m))),
        "--work", str(work), "--moses", str(MOSES), "--max-iterations", "1", "--trials", "300",
        "--threads", "2", "--score-args", "--compile no", "--extend-args", "-n 2 --floor 0.5",
        *more,
    ]  # fmt: skip


def relocated_copy(work: Path, to: Path, moves: dict[Path, Path] | None = None) -> Path:
    """A copy of table1's work folder ``work`` at ``to``, as if it had been made there: every
    text file (inis, records, logs, MERT's files) names ``to`` where it named ``work``, and
    each path of ``moves`` (a system folder, say) its new place."""
    shutil.copytree(work, to)
    renames = {str(work): str(to), **{str(a): str(b) for a, b in (moves or {}).items()}}
    for path in to.rglob("*"):
        if not path.is_file() or path.suffix == ".gz":
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        new = text
        for old, now in renames.items():
            new = new.replace(old, now)
        if new != text:
            path.write_text(new, encoding="utf-8")
    return to


@pytest.fixture(scope="session")
def tiny_table1_work(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path) -> Path:
    """Systems (a) and (b) of tiny_model_dir on the tiny system, one tuning run each: the
    finished work folder that tests of what comes after copy (relocated_copy), instead of each
    tuning and decoding (a) and (b) again. Needs ../shared/tools/moses: skip before using it."""
    work = tmp_path_factory.mktemp("table1") / "work"
    argv = table1_argv(TINY_SYSTEM, [tiny_model_dir], work, "--runs", "1", "--runs-c", "0")
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    return work


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The files with a test marked slow first, each file's tests in their order: pytest-xdist
    (setup.cfg: --dist loadfile) hands out files in this order, so the long ones start first and
    the many quick ones fill both workers at the end (collected by name, tests/train came last
    and one worker ran its compile tests alone for minutes)."""
    slow = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow)  # stable: the order within a file stays
