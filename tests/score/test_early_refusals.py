"""Refusals that need no model come before torch is imported, the table's coverage before the
model is loaded and compiled (issue 59, item 6: on a busy machine the partial-output refusal
came after 60.9 s, the wrong-pair one after 2m05s with the compile started first)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, SLICE, TINY_TRAIN_FLAGS

import rescorer.score.scorer as scorer
from rescorer.errors import RescorerError
from rescorer.job.output import Output
from rescorer.score.config import ScoreConfig
from rescorer.score.pipeline import score_table

GOLDEN = ROOT / "tests" / "data" / "golden" / "model"
SAMPLE = ROOT / "rescorer" / "sample" / "en-fr.sample.gz"  # 24,245 real pairs
# The command line in a fresh interpreter; the last stderr line says whether torch was loaded.
PROBE = """
import atexit, sys
atexit.register(lambda: print("torch imported:", "torch" in sys.modules, file=sys.stderr))
from rescorer.cli import main
sys.argv = ["rescorer", *sys.argv[1:]]
main()
"""


def score_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", PROBE, "score", *args], capture_output=True, text=True, timeout=600
    )


def interrupted_partial(out: Path) -> None:
    """OUT.partial and a valid record, as an interrupted run leaves them: a run stopped as
    Ctrl-C would, right after its first progress record."""
    probe = (
        "import sys\n"
        "import rescorer.job.output as output\n"
        "real = output.Output.checkpoint\n"
        "def stop(self, *a):\n"
        "    real(self, *a)\n"
        "    raise KeyboardInterrupt\n"
        "output.Output.checkpoint = stop\n"
        "from rescorer.cli import main\n"
        f"sys.argv = ['rescorer', 'score', {str(SLICE)!r}, '-m', {str(GOLDEN)!r}, '-o', "
        f"{str(out)!r}, '--device', 'cpu', '--compile', 'no', '-q', '--chunk-bytes', '8192', "
        "'--checkpoint-every', '0']\n"
        "main()\n"
    )
    subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert Path(f"{out}.partial").exists() and Path(f"{out}.partial.json").exists()


def test_an_interrupted_partial_is_refused_before_torch_is_imported(tmp_path: Path) -> None:
    out = tmp_path / "out.gz"
    interrupted_partial(out)
    done = score_cli(str(SLICE), "-m", str(GOLDEN), "-o", str(out), "--device", "cpu",
                     "--chunk-bytes", "8192", "--checkpoint-every", "0")  # fmt: skip
    lines = done.stderr.splitlines()
    assert done.returncode == 1, done.stderr
    assert "holds" in lines[0] and "add --resume to continue it" in lines[0], lines
    assert lines[-1] == "torch imported: False", done.stderr


def test_a_locked_output_is_refused_before_torch_is_imported(tmp_path: Path) -> None:
    out = tmp_path / "out.gz"
    holder = Output(str(out), {}, None)
    holder.lock()  # another run writing OUT (this process)
    try:
        done = score_cli(str(SLICE), "-m", str(GOLDEN), "-o", str(out), "--device", "cpu")
    finally:
        holder.unlock()
    assert done.returncode == 1, done.stderr
    assert "rescorer score: error: " in done.stderr and "pid" in done.stderr, done.stderr
    assert done.stderr.splitlines()[-1] == "torch imported: False", done.stderr


@pytest.fixture(scope="module")
def slice_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny model trained on the real slice, its shortlists' coverage recorded."""
    out = tmp_path_factory.mktemp("early") / "model"
    subprocess.run(
        [sys.executable, "-m", "rescorer", "train", str(SLICE), "-o", str(out), *TINY_TRAIN_FLAGS],
        check=True,
    )
    return out


def test_a_foreign_table_is_refused_before_the_model_loads_and_compiles(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, slice_model: Path
) -> None:
    """The slice model's 200-word shortlists hold 5.3% of the sample's first chunk's pairs
    against 41.9% of its own slice's: refused with the words the run gave before (see
    tests/test_verdict.py), but before any model is loaded or compiled."""

    def never(*args: object, **kwargs: object) -> object:
        raise AssertionError("a model was loaded or compiled before the verdict")

    monkeypatch.setattr(scorer, "compile_kernels", never)
    monkeypatch.setattr("rescorer.model.checkpoint.load_model_dir", never)
    config = ScoreConfig(device="cpu", compile="yes")
    with pytest.raises(RescorerError) as refused:
        score_table(str(SAMPLE), str(slice_model), str(tmp_path / "s.gz"), config)
    message = str(refused.value)
    assert message.startswith(f"{slice_model}: 5.3% of the first 8,908 pairs have"), message
    assert "Refused before scoring them; --ignore-coverage scores it anyway" in message
    assert sorted(p.name for p in tmp_path.iterdir()) == []
