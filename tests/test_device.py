"""rescorer/device.py: a compile error falls back to eager code (issue 25, item 4), in the
function itself, in scoring and in training."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import faults
import numpy as np
import pytest
import torch
from conftest import SAMPLE_TABLE, SLICE, TINY_SYSTEM, TINY_TRAIN_FLAGS

from rescorer.device import CompileGuard, soft_compile
from rescorer.io.table import read_table
from rescorer.model.checkpoint import save_model_dir
from rescorer.model.encdec import EncoderDecoder, ModelConfig, init_weights_
from rescorer.score.pairs import encode_pairs
from rescorer.score.pipeline import ScoreConfig, score_table
from rescorer.score.scorer import Scorer
from rescorer.train.config import TrainConfig
from rescorer.train.loop import train
from rescorer.vocab import build_vocabs

WARNING = "rescorer: warning: torch.compile"
BROKEN = "test: this inductor cannot compile"


@pytest.fixture
def inductor(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """The inductor backend that torch.compile calls (dynamo's real path), made to compile its
    first ``ok[0]`` graphs to themselves with 0.25 added to their float outputs (results
    that tell compiled from eager) and to raise from then on. Yields ``ok`` (set it in the
    test; default 0) with the count of graphs asked for appended."""
    import torch._inductor.compile_fx as compile_fx

    torch._dynamo.reset()  # graphs compiled by earlier tests would not reach the backend
    ok = [0, 0]

    def backend(gm: torch.fx.GraphModule, example_inputs: Any, *args: Any, **kwargs: Any) -> Any:
        ok[1] += 1
        if ok[1] > ok[0]:
            raise RuntimeError(BROKEN)

        def compiled(*inputs: Any) -> Any:
            out = gm.forward(*inputs)
            return type(out)(t + 0.25 if isinstance(t, torch.Tensor) and t.is_floating_point()
                             else t for t in out)  # fmt: skip

        return compiled

    monkeypatch.setattr(compile_fx, "compile_fx", backend)
    yield ok
    torch._dynamo.reset()


def test_a_compile_error_warns_once_and_runs_the_function_eagerly(
    inductor: list[int], capsys: pytest.CaptureFixture[str]
) -> None:
    guard = CompileGuard()
    f = soft_compile(lambda x: torch.sin(x) + 1, guard, dynamic=True)
    g = soft_compile(lambda x: torch.cos(x), guard, dynamic=True)
    x = torch.linspace(0, 1, 5)
    assert torch.equal(f(x), torch.sin(x) + 1)
    assert guard.failed and BROKEN in guard.error
    assert torch.equal(f(x[:3]), torch.sin(x[:3]) + 1)
    assert torch.equal(g(x), torch.cos(x))  # the group's other function: eager at once
    assert inductor[1] == 1  # nothing compiled after the failure
    err = capsys.readouterr().err
    assert err.count(WARNING) == 1 and f"RuntimeError: {BROKEN}" in err, err


def test_an_error_of_the_inputs_is_not_taken_for_a_compile_error(
    inductor: list[int], capsys: pytest.CaptureFixture[str]
) -> None:
    inductor[0] = 10  # compiling works
    guard = CompileGuard()
    f = soft_compile(lambda x: x.view(7), guard, dynamic=True)
    assert torch.equal(f(torch.zeros(7)), torch.full((7,), 0.25))  # compiled
    with pytest.raises(RuntimeError, match="invalid for input of size 3"):
        f(torch.ones(3))
    assert not guard.failed and WARNING not in capsys.readouterr().err


def test_torch_compile_itself_failing_falls_back(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def unsupported(*args: object, **kwargs: object) -> None:
        raise RuntimeError("torch.compile is not supported on this Python")

    monkeypatch.setattr(torch, "compile", unsupported)
    guard = CompileGuard()
    f = soft_compile(torch.tanh, guard)
    assert f is torch.tanh and guard.failed
    assert "not supported on this Python" in capsys.readouterr().err


def test_a_backward_compile_error_is_caught_in_the_forward_call(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """AOTAutograd would compile the backward graph at the first backward(), outside any
    fall-back; soft_compile has it compiled with the forward, where the fall-back catches it."""
    from torch._dynamo.backends.common import aot_autograd

    def no_backward(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        raise RuntimeError("test: the backward graph cannot compile")

    torch._dynamo.reset()
    backend = aot_autograd(fw_compiler=lambda gm, _: gm.forward, bw_compiler=no_backward)
    guard = CompileGuard()
    w = torch.linspace(-1, 1, 6, requires_grad=True)
    f: Callable[[torch.Tensor], torch.Tensor] = soft_compile(
        lambda x: (torch.tanh(x * w) ** 2).sum(), guard, backend=backend
    )
    f(torch.ones(6)).backward()
    assert guard.failed and "backward graph cannot compile" in guard.error
    expected = torch.autograd.grad((torch.tanh(torch.ones(6) * w) ** 2).sum(), w)[0]
    assert w.grad is not None and torch.equal(w.grad, expected)
    assert capsys.readouterr().err.count(WARNING) == 1
    torch._dynamo.reset()


def perturbed_model_dir(folder: Path) -> Path:
    pairs = [(e.src, e.tgt) for e in read_table(str(SLICE))]
    src_vocab, tgt_vocab = build_vocabs(pairs, 300, 300)
    torch.manual_seed(0)
    model = EncoderDecoder(ModelConfig(300, 300, hidden_size=16, embed_size=8, maxout_units=8))
    init_weights_(model)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.2 * torch.randn_like(p))
    save_model_dir(folder, model, src_vocab, tgt_vocab, {"made_by": "tests/test_device.py"})
    return folder


@pytest.mark.parametrize("compiled_before", [0, 2], ids=["first-call", "part-way"])
def test_score_goes_on_eagerly_with_the_eager_bytes(
    tmp_path: Path,
    inductor: list[int],
    capsys: pytest.CaptureFixture[str],
    compiled_before: int,
) -> None:
    """--compile yes with a compiler that fails at once, or after compiling some kernels
    (part-way through a chunk: the chunk is scored again), gives the bytes of --compile no."""
    model_dir = perturbed_model_dir(tmp_path / "model")
    inductor[0] = compiled_before
    outs = {}
    for choice in ("no", "yes"):
        outs[choice] = tmp_path / f"{choice}.gz"
        config = ScoreConfig(
            device="cpu", precision="fp32", chunk_bytes=16384, compile=choice, quiet=True
        )
        score_table(str(SLICE), str(model_dir), str(outs[choice]), config)
    assert outs["yes"].read_bytes() == outs["no"].read_bytes()
    assert inductor[1] == compiled_before + 1  # it was tried, and not again after failing
    err = capsys.readouterr().err
    assert err.count(WARNING) == 1 and BROKEN in err, err


def test_a_chunk_with_a_compile_error_counts_its_work_once(inductor: list[int]) -> None:
    inductor[0] = 2  # two kernels compile, the third fails inside the chunk
    pairs = [(e.src, e.tgt) for e in read_table(str(SLICE))][:300]
    src_vocab, tgt_vocab = build_vocabs(pairs, 300, 300)
    torch.manual_seed(0)
    model = EncoderDecoder(ModelConfig(300, 300, hidden_size=16, embed_size=8, maxout_units=8))
    batch = encode_pairs(src_vocab, tgt_vocab, pairs)
    eager, soft = Scorer(model, "fp32"), Scorer(model, "fp32", compile=True)
    np.testing.assert_array_equal(soft.score(batch), eager.score(batch))
    assert soft.compile_guard.failed and soft.kernels is None
    assert soft.work == eager.work


def test_training_goes_on_eagerly_with_the_eager_weights(
    tmp_path: Path, inductor: list[int], capsys: pytest.CaptureFixture[str]
) -> None:
    """--compile yes with a compiler that fails (forward and backward compile at the first
    update) trains exactly as --compile no: the same weights, bit for bit."""
    from rescorer.constants import TRAIN_STATE_FILE

    config = ModelConfig(300, 300, hidden_size=12, embed_size=8, maxout_units=6)
    weights = {}
    for choice in ("no", "yes"):
        cfg = TrainConfig(
            batch_size=16, device="cpu", precision="fp32", quiet=True, valid_fraction=0.1,
            valid_every=5, max_updates=6, compile=choice,
        )  # fmt: skip
        result = train(str(SAMPLE_TABLE), tmp_path / choice, config, cfg)
        assert result.updates == 6
        weights[choice] = torch.load(tmp_path / choice / TRAIN_STATE_FILE, weights_only=True)
    for key, eager in weights["no"]["model"].items():
        assert torch.equal(weights["yes"]["model"][key], eager), key
    assert inductor[1] == 1
    err = capsys.readouterr().err
    assert err.count(WARNING) == 1 and BROKEN in err, err


def test_tf32_is_fp32_where_there_is_no_tf32() -> None:
    from rescorer.device import resolve_precision

    cpu = torch.device("cpu")
    assert resolve_precision("tf32", cpu, "score") == "fp32"
    assert resolve_precision("auto", cpu, "score") == "fp32"
    assert resolve_precision("fp32", cpu, "score") == "fp32"


@pytest.fixture
def gemm_speeds(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[torch.dtype, float]:
    """Matrix-product speeds (GFLOP/s) the measurement finds, set by the test, on a CPU that
    lists AVX512-BF16 (as the Xeon of issue 37 does), with a cache of the test's own; the
    dtypes measured are counted under the key None."""
    import rescorer.device as device

    monkeypatch.setenv("RESCORER_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(device, "cpu_has_fast_bf16", lambda: True, raising=False)
    speeds: dict[Any, float] = {None: 0}

    def measured(shapes: Any, dtype: torch.dtype, seconds: float = 0.1) -> float:
        speeds[None] += 1
        return speeds[dtype]

    monkeypatch.setattr(device, "gemm_gflops", measured, raising=False)
    monkeypatch.setattr(device, "_load", lambda: 0.0, raising=False)  # an idle machine
    return speeds


def test_auto_trains_in_fp32_where_bf16_products_measure_slower(
    gemm_speeds: dict[Any, float], tmp_path: Path
) -> None:
    """Issue 37, item 1: on a Xeon with AVX512-BF16 and no AMX bf16 ran at 170 GFLOP/s against
    fp32's 334; auto trained in bf16 there. It measures now, once, and says why."""
    from rescorer.device import choose_precision, precision_cache_path, resolve_precision

    gemm_speeds.update({torch.float32: 334.0, torch.bfloat16: 170.0})
    cpu = torch.device("cpu")
    assert resolve_precision("auto", cpu, "train") == "fp32"
    assert gemm_speeds[None] == 2  # fp32 and bf16, measured once
    again = choose_precision("auto", cpu, "train")
    assert gemm_speeds[None] == 2  # from the cache
    assert again.precision == "fp32"
    assert again.reason.startswith("precision auto -> fp32: bf16 170 vs fp32 334 GFLOP/s")
    assert f"measured earlier, cached in {precision_cache_path()}" in again.reason
    assert precision_cache_path() == tmp_path / "cache" / "precision.json"
    cache = json.loads(precision_cache_path().read_text())
    (entry,) = cache["entries"].values()
    assert (entry["fp32"], entry["bf16"]) == (334.0, 170.0)
    (key,) = cache["entries"]
    assert f"torch {torch.__version__}" in key and f"{torch.get_num_threads()} threads" in key
    # other shapes are measured on their own; scoring's auto never measures
    assert resolve_precision("auto", cpu, "train", [(64, 8, 24)]) == "fp32"
    assert gemm_speeds[None] == 4
    assert resolve_precision("auto", cpu, "score") == "fp32" and gemm_speeds[None] == 4


def test_auto_trains_in_bf16_where_bf16_products_measure_faster(
    gemm_speeds: dict[Any, float], tmp_path: Path
) -> None:
    from rescorer.device import choose_precision

    gemm_speeds.update({torch.float32: 220.0, torch.bfloat16: 910.0})
    choice = choose_precision("auto", torch.device("cpu"), "train")
    assert choice.precision == "bf16"
    assert choice.reason.startswith("precision auto -> bf16: bf16 910 vs fp32 220 GFLOP/s")
    assert "measured now, cached in" in choice.reason
    # a damaged cache is measured again, and rewritten
    (tmp_path / "cache" / "precision.json").write_text("{not json")
    assert choose_precision("auto", torch.device("cpu"), "train").precision == "bf16"
    assert gemm_speeds[None] == 4
    # an explicit precision is taken as it is
    assert choose_precision("fp32", torch.device("cpu"), "train").reason == ""


@pytest.mark.parametrize("updates, chosen", [((250.0, 100.0), "bf16"), ((90.0, 100.0), "fp32")])
def test_train_says_the_measured_choice_and_trains_in_it(
    gemm_speeds: dict[Any, float],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    updates: tuple[float, float],
    chosen: str,
) -> None:
    """The products favour bf16 (300 against 100 GFLOP/s), so this model's updates are timed
    in both (issue 66; injected here: bf16, fp32 pairs/s) and the faster one trains."""
    import rescorer.train.precision as precision

    timed = dict(zip(("bf16", "fp32"), updates, strict=True))
    monkeypatch.setattr(precision, "time_updates", lambda cfg, batch, name: timed[name])
    monkeypatch.setattr(precision, "_load", lambda: 0.0)
    gemm_speeds.update({torch.float32: 100.0, torch.bfloat16: 300.0})
    config = ModelConfig(300, 300, hidden_size=12, embed_size=8, maxout_units=6)
    cfg = TrainConfig(batch_size=16, device="cpu", valid_fraction=0.1, max_updates=2)
    lines: list[str] = []
    train(str(SAMPLE_TABLE), tmp_path / "m", config, cfg, echo=lines.append)
    assert lines[0].startswith("rescorer train: device cpu, ") and " thread" in lines[0]
    assert lines[1].startswith(
        f"rescorer train: precision auto -> {chosen}: this model's updates"
        f" bf16 {updates[0]:.0f} vs fp32 {updates[1]:.0f} pairs/s"
    )
    assert "its matrix products alone favour bf16: bf16 300 vs fp32 100" in lines[1]
    assert any(f"precision {chosen}" in line for line in lines), lines


def test_a_real_measurement_gives_positive_speeds() -> None:
    from rescorer.device import gemm_gflops

    for dtype in (torch.float32, torch.bfloat16):
        assert gemm_gflops([(16, 8, 24), (16, 6, 40)], dtype, seconds=0.01) > 0


# ------------------------------------------------- the precision cache (issue 58.10, 59.8)
def write_entries(path: Path, change: Callable[[dict[str, Any]], None]) -> None:
    """The cache at ``path`` with ``change`` applied to each of its entries."""
    data = json.loads(path.read_text())
    for entry in data["entries"].values():
        change(entry)
    path.write_text(json.dumps(data))


@pytest.mark.parametrize(
    "damage",
    [
        lambda entry: entry.update(fp32=float("inf")),  # written as Infinity, trusted before
        lambda entry: entry.update(bf16=float("nan")),
        lambda entry: entry.update(bf16=-3.0),
        lambda entry: entry.update(fp32=True),
    ],
)
def test_a_cache_entry_that_is_not_a_finite_positive_speed_is_measured_again(
    gemm_speeds: dict[Any, float],
    capsys: pytest.CaptureFixture[str],
    damage: Callable[[dict[str, Any]], None],
) -> None:
    from rescorer.device import choose_precision, precision_cache_path

    gemm_speeds.update({torch.float32: 220.0, torch.bfloat16: 910.0})
    cpu = torch.device("cpu")
    choose_precision("auto", cpu, "train")
    write_entries(precision_cache_path(), damage)
    capsys.readouterr()
    choice = choose_precision("auto", cpu, "train")
    assert gemm_speeds[None] == 4 and choice.precision == "bf16"
    assert "measured now" in choice.reason
    warning = capsys.readouterr().err
    assert f"warning: {precision_cache_path()}: 1 entries without finite positive" in warning
    (entry,) = json.loads(precision_cache_path().read_text())["entries"].values()
    assert (entry["fp32"], entry["bf16"]) == (220.0, 910.0)


def test_a_deeply_nested_cache_is_measured_past_with_a_warning(
    gemm_speeds: dict[Any, float], capsys: pytest.CaptureFixture[str]
) -> None:
    from rescorer.device import choose_precision, precision_cache_path

    gemm_speeds.update({torch.float32: 220.0, torch.bfloat16: 910.0})
    precision_cache_path().parent.mkdir(parents=True)
    precision_cache_path().write_text("[" * 200_000 + "]" * 200_000)
    assert choose_precision("auto", torch.device("cpu"), "train").precision == "bf16"
    assert gemm_speeds[None] == 2
    assert "nested too deeply; measuring again" in capsys.readouterr().err


def test_a_measurement_taken_busy_is_taken_again_once_the_machine_is_idle(
    gemm_speeds: dict[Any, float], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 59, item 8: bf16 11.5 against fp32 2.6 GFLOP/s measured on a starved machine
    (311 against 76 idle) stayed cached for good. The load of the moment is recorded; an
    entry measured busy is measured again when the machine is idle, and kept while busy."""
    import rescorer.device as device

    cpus = os.cpu_count() or 1
    cpu = torch.device("cpu")
    monkeypatch.setattr(device, "_load", lambda: 2.5 * cpus)
    gemm_speeds.update({torch.float32: 2.6, torch.bfloat16: 11.5})
    busy = device.choose_precision("auto", cpu, "train")
    assert busy.precision == "bf16" and f"at load {2.5 * cpus:.1f} on {cpus} CPUs" in busy.reason
    (entry,) = json.loads(device.precision_cache_path().read_text())["entries"].values()
    assert (entry["load"], entry["cpus"]) == (2.5 * cpus, cpus)
    still_busy = device.choose_precision("auto", cpu, "train")
    assert gemm_speeds[None] == 2 and "measured earlier, cached in " in still_busy.reason
    assert f"at load {2.5 * cpus:.1f}" in still_busy.reason
    assert "delete it to measure again" in still_busy.reason
    monkeypatch.setattr(device, "_load", lambda: 0.1)
    gemm_speeds.update({torch.float32: 311.0, torch.bfloat16: 76.0})
    idle = device.choose_precision("auto", cpu, "train")
    assert gemm_speeds[None] == 4 and idle.precision == "fp32"
    assert "measured now, cached in " in idle.reason and "at load 0.1 on " in idle.reason
    assert "again: the figures cached were measured on a busy machine" in idle.reason
    again = device.choose_precision("auto", cpu, "train").reason
    assert "measured earlier, cached in " in again and "at load 0.1 on " in again
    assert gemm_speeds[None] == 4
    # an entry of an older cache, without the load it was measured at, counts as busy
    write_entries(device.precision_cache_path(), lambda entry: entry.pop("load"))
    device.choose_precision("auto", cpu, "train")
    assert gemm_speeds[None] == 6


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "folder"])
def test_a_cache_that_is_not_a_regular_file_is_measured_past_not_waited_on(
    tmp_path: Path, kind: str
) -> None:
    """``train --precision auto`` hung on a FIFO there, and read /dev/zero for ever (here under
    a bound on its memory, faults.few_threads): the cache is read only as a regular file, said
    in a warning, measured past and left as it is."""
    cache = tmp_path / "cache"
    cache.mkdir()
    path = cache / "precision.json"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev-zero":
        path.symlink_to("/dev/zero")
    else:
        path.mkdir()
    flags = [f for f in TINY_TRAIN_FLAGS if f != "-q"]
    flags[flags.index("--max-updates") + 1] = "2"
    done = faults.run_unless_hung(
        ["train", str(TINY_SYSTEM / "phrase-table.gz"), "-o", str(tmp_path / "m"), *flags,
         "--device", "cpu", "--precision", "auto", "--compile", "no"],
        env={**os.environ, "RESCORER_CACHE_DIR": str(cache)},
        preexec_fn=faults.few_threads(),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"warning: {path}: not a regular file" in done.stderr, done.stderr
    assert "precision auto -> " in done.stderr and "not cached: " in done.stderr
    assert {"fifo": path.is_fifo(), "dev-zero": path.is_symlink(), "folder": path.is_dir()}[kind]


def test_train_help_says_how_to_measure_the_precision_again() -> None:
    done = faults.run(["train", "--help"])
    assert "delete the file" in " ".join(done.stdout.split()), done.stdout
