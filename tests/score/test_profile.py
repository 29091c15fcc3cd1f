"""``score --profile`` and ``--workers auto`` (issue 13, item 3), on the CPU."""

from __future__ import annotations

import gzip
import re
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from click.testing import CliRunner
from conftest import SLICE

from rescorer.cli import cli
from rescorer.score.config import (
    AUTO_WORKERS_MAX,
    COMPILE_MIN_BYTES,
    ScoreConfig,
    batch_tokens_for,
    input_chunks,
    resolve_workers,
    want_compile,
)
from rescorer.score.pipeline import score_table
from rescorer.score.profile import PHASES, STRETCHES


def test_profile_times_every_phase_and_changes_no_byte(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    plain, profiled = tmp_path / "plain.gz", tmp_path / "profiled.gz"
    config = ScoreConfig(device="cpu", chunk_bytes=32768, quiet=True)
    score_table(str(SLICE), str(tiny_model_dir), str(plain), config)
    config = ScoreConfig(device="cpu", chunk_bytes=32768, quiet=True, profile=True)
    stats = score_table(str(SLICE), str(tiny_model_dir), str(profiled), config)
    assert plain.read_bytes() == profiled.read_bytes()
    assert stats.phases is not None
    seconds = stats.phases.seconds
    for name in ("read", "parse", "encoder", "decoder", "readout", "format", "write"):
        assert seconds[name] > 0, name
    assert sum(seconds.values()) <= stats.seconds


def test_cli_prints_the_profile(tiny_model_dir: Path, tmp_path: Path) -> None:
    args = ["score", str(SLICE), "-m", str(tiny_model_dir), "-o", str(tmp_path / "o.gz")]
    result = CliRunner().invoke(cli, [*args, "--profile"])
    assert result.exit_code == 0, result.output
    lines = [line.removeprefix("rescorer score: ") for line in result.output.splitlines()]
    names = [line.split()[0] for line in lines if line.split()]
    assert [n for n in names if n in PHASES] == list(PHASES)
    wall = next(line for line in lines if line.startswith("wall"))
    assert float(wall.split()[1]) > 0


def test_auto_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    assert resolve_workers("auto", SimpleNamespace(type="cpu")) == 0
    assert 1 <= resolve_workers("auto", SimpleNamespace(type="cuda")) <= AUTO_WORKERS_MAX
    assert resolve_workers(3, SimpleNamespace(type="cuda")) == 3
    gpu = SimpleNamespace(type="cuda")
    monkeypatch.setattr("rescorer.cpus.available_cpus", lambda: (16, "affinity"))
    assert resolve_workers("auto", gpu) == 4  # the count measured best on two H100 hosts
    assert resolve_workers("auto", gpu, input_chunks=3) == 3  # no worker without a chunk
    assert resolve_workers("auto", gpu, input_chunks=40) == 4
    monkeypatch.setattr("rescorer.cpus.available_cpus", lambda: (3, "affinity"))
    assert resolve_workers("auto", gpu, input_chunks=40) == 2  # every CPU but the device's feeder
    monkeypatch.setattr("rescorer.cpus.available_cpus", lambda: (1, "affinity"))
    assert resolve_workers("auto", gpu) == 1
    assert resolve_workers(8, gpu, input_chunks=2) == 8  # a count given is a count kept


def test_input_chunks_counts_the_decompressed_text(tmp_path: Path) -> None:
    plain = tmp_path / "t.txt"
    plain.write_bytes(b"x ||| y ||| 1\n" * 100)  # 1,400 bytes
    assert input_chunks(str(plain), 500) == 3 and input_chunks(str(plain), 1400) == 1
    text = gzip.decompress(SLICE.read_bytes())
    assert input_chunks(str(SLICE), 1000) == -(-len(text) // 1000)  # gzip: its text, not its file
    assert input_chunks("-", 1000) is None and input_chunks(str(tmp_path / "none"), 1000) is None


def test_compile_auto_goes_by_the_decompressed_size(tmp_path: Path) -> None:
    """Issue 64, item 6: --compile auto's 4 MiB was the file's size, so a 4.1 MB gzip file of
    17.8 MB was not compiled. Now 4 MiB of text compile, compressed or not."""
    text = gzip.decompress(SLICE.read_bytes())
    sizes = {"big": COMPILE_MIN_BYTES, "small": COMPILE_MIN_BYTES - 1}
    for name, size in sizes.items():
        data = (text * (size // len(text) + 1))[:size]
        (tmp_path / name).write_bytes(data)
        (tmp_path / f"{name}.gz").write_bytes(gzip.compress(data, mtime=0))
    assert (tmp_path / "big.gz").stat().st_size < COMPILE_MIN_BYTES // 4
    assert want_compile("auto", str(tmp_path / "big.gz")) and want_compile(
        "auto", str(tmp_path / "big")
    )
    assert not want_compile("auto", str(tmp_path / "small.gz"))
    assert not want_compile("auto", str(tmp_path / "small")) and not want_compile("auto", "-")
    assert want_compile("yes", str(tmp_path / "small")) and not want_compile(
        "no", str(tmp_path / "big")
    )


@pytest.mark.parametrize("value", ["x", "-1", "1.5"])
def test_workers_usage_errors(value: str) -> None:
    args = ["score", "/nonexistent/pt.gz", "-m", "/nonexistent/m", "-o", "/nonexistent/o"]
    result = CliRunner().invoke(cli, [*args, "--workers", value])
    assert result.exit_code == 2 and "--workers" in result.output


def wall_inside_and_outside(args: list[str]) -> tuple[float, float, list[str]]:
    """A command's wall time as it reports it and as measured around its process."""
    began = time.time()
    done = subprocess.run(args, capture_output=True, text=True, check=True)
    outside = time.time() - began
    said = [line.removeprefix("rescorer score: ") for line in done.stderr.splitlines()]
    wall = next((line for line in said if line.startswith("wall time ")), None)
    return (float(wall.split()[2]) if wall else 0.0), outside, said


@pytest.mark.parametrize("workers", ["0", "2"])
def test_profile_splits_the_whole_wall_time(
    tiny_model_dir: Path, tmp_path: Path, workers: str
) -> None:
    """Issue 57, item 1: --profile's stretches add up to the wall time from the process's
    start, and that is the wall time measured outside the process but for the interpreter's
    exit (measured here as a process that imports torch and exits: 1.3 s on a loaded 2-core
    machine). Tolerance: that exit's cost plus 1 s plus 10%."""
    out = tmp_path / f"o{workers}.gz"
    args = [sys.executable, "-m", "rescorer", "score", str(SLICE), "-m", str(tiny_model_dir),
            "-o", str(out), "--device", "cpu", "--chunk-bytes", "8192", "--workers", workers,
            "--profile"]  # fmt: skip
    wall, outside, said = wall_inside_and_outside(args)
    start = said.index(next(line for line in said if line.startswith("wall time ")))
    rows = [re.match(r"  (\S.*?) +(-?\d+\.\d+) +-?\d+\.\d+%", line) for line in said[start + 1 :]]
    seconds = {row.group(1): float(row.group(2)) for row in rows if row}
    assert list(seconds) == [*STRETCHES, "remainder"], said
    assert abs(sum(v for k, v in seconds.items() if k != "remainder") - wall) <= 0.05
    assert abs(seconds["remainder"]) <= 0.02
    for name in ("start and imports", "first chunk"):
        assert seconds[name] > 0, (name, said)
    # An interpreter's exit with torch loaded, alone: the time from its last line to its end.
    probe = [sys.executable, "-c", "import time, torch; print(time.time(), flush=True)"]
    done = subprocess.run(probe, capture_output=True, text=True, check=True)
    exit_cost = time.time() - float(done.stdout)
    assert 0 < outside - wall <= exit_cost + 1.0 + 0.1 * outside, (wall, outside, exit_cost)


def test_batch_tokens_by_device_memory() -> None:
    """Issue 57, item 3: a GPU's default batch is sized by its memory (an eighth of it for one
    readout block's fp32 logits), between the old 65,536 and 262,144; the CPU's stays 4096,
    and a count given is kept."""
    cpu, gpu = SimpleNamespace(type="cpu"), SimpleNamespace(type="cuda")
    assert batch_tokens_for(None, cpu, None, 15000) == 4096
    assert batch_tokens_for(100, gpu, 80 << 30, 15000) == 100
    assert batch_tokens_for(None, gpu, 80 * 10**9, 15002) == 163840  # an H100, the paper's size
    assert batch_tokens_for(None, gpu, 141 * 10**9, 15002) == 262144  # an H200: the most
    assert batch_tokens_for(None, gpu, 16 * 10**9, 15002) == 65536  # a small GPU: the least
    assert batch_tokens_for(None, gpu, None, 15002) == 65536
    assert batch_tokens_for(None, gpu, 80 * 10**9, 15002) % 4096 == 0
