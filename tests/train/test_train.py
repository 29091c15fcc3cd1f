"""Training: loss, data split and order, overfitting real pairs, resume, the CLI."""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from conftest import ROOT, default_sigint

from rescorer.batching import PairArraysBuilder, PairBatch, epoch_batches, pad_batch
from rescorer.cli import cli
from rescorer.constants import TRAIN_LOG_FILE, TRAIN_STATE_FILE, WEIGHTS_FILE
from rescorer.errors import RescorerError
from rescorer.io.table import read_table
from rescorer.model.checkpoint import load_model_dir
from rescorer.model.encdec import EncoderDecoder, ModelConfig, init_weights_, sequence_logprobs
from rescorer.train.config import TrainConfig
from rescorer.train.data import is_heldout, read_training_data, unigram_logprob_sum
from rescorer.train.loop import batch_loss, train
from rescorer.vocab import Vocab, build_vocabs

TINY = ModelConfig(
    src_vocab_size=300, tgt_vocab_size=300, hidden_size=12, embed_size=8, maxout_units=6
)
FAST = TrainConfig(
    batch_size=16, device="cpu", precision="fp32", quiet=True, valid_fraction=0.1, valid_every=5
)


def encoded_pairs(path: Path, n: int, size: int = 300) -> tuple[PairBatch, Vocab, Vocab]:
    entries = list(read_table(str(path)))[:n]
    src_vocab, tgt_vocab = build_vocabs([(e.src, e.tgt) for e in entries], size, size)
    src = pad_batch([src_vocab.encode_eos(e.src_tokens) for e in entries])
    tgt = pad_batch([tgt_vocab.encode_eos(e.tgt_tokens) for e in entries])
    return PairBatch(*src, *tgt), src_vocab, tgt_vocab


def test_loss_is_minus_the_summed_token_logprobs(
    tiny_model: EncoderDecoder, sample_table: Path
) -> None:
    batch, _, _ = encoded_pairs(sample_table, 12, size=30)
    loss = batch_loss(tiny_model, batch)
    token_logp = tiny_model(*batch)
    torch.testing.assert_close(loss, -token_logp.sum())
    # ... and the sum of the pairs' own log-probabilities, each scored alone.
    alone = 0.0
    for i in range(batch.num_pairs):
        s, t = int(batch.src_lens[i]), int(batch.tgt_lens[i])
        one = tiny_model(
            batch.src_ids[i : i + 1, :s],
            batch.src_lens[i : i + 1],
            batch.tgt_ids[i : i + 1, :t],
            batch.tgt_lens[i : i + 1],
        )
        alone += float(sequence_logprobs(one)[0].detach())
    assert float(loss.detach()) == pytest.approx(-alone, abs=1e-4)
    assert loss.dtype == torch.float32


def test_a_tiny_model_overfits_50_real_pairs(sample_table: Path) -> None:
    """Capacity and gradients through every part: 50 real pairs get log-probabilities near 0."""
    batch, _, _ = encoded_pairs(sample_table, 50, size=200)
    torch.manual_seed(0)
    model = EncoderDecoder(
        ModelConfig(
            src_vocab_size=200, tgt_vocab_size=200, hidden_size=32, embed_size=16, maxout_units=16
        )
    )
    init_weights_(model, torch.Generator().manual_seed(0))
    before = sequence_logprobs(model(*batch)).detach()
    # Adam for speed (Adadelta from this init needs thousands of updates on a tiny model).
    optim = torch.optim.Adam(model.parameters(), lr=0.03)
    for _ in range(300):
        optim.zero_grad()
        batch_loss(model, batch).backward()
        optim.step()
    after = sequence_logprobs(model(*batch)).detach()
    assert before.mean() < -20  # about 4-5 tokens at ln(201) each
    assert after.mean() > -0.5, after
    assert after.min() > -3.0, after


def test_every_duration_option_needs_a_unit(tmp_path: Path) -> None:
    """A bare number is a usage error (exit 2) naming the accepted forms, before any work:
    train --max-time, scripts/table1.py --train, scripts/train_snapshots.py --snapshot."""
    forms = "expected e.g. 5m, 2h, 90s or 1h30m"
    table = str(ROOT / "tests" / "data" / "tiny-system" / "phrase-table.gz")
    result = CliRunner().invoke(cli, ["train", table, "-o", str(tmp_path / "m"), "--max-time", "5"])
    assert result.exit_code == 2 and "--max-time" in result.stderr and forms in result.stderr
    assert not (tmp_path / "m").exists()
    scripts = ROOT / "scripts"
    for argv in (
        [scripts / "table1.py", ROOT / "tests/data/tiny-system", "--work", tmp_path / "w",
         "--train", "5"],
        [scripts / "train_snapshots.py", tmp_path / "s", "--table", table, "--snapshot", "5"],
    ):  # fmt: skip
        proc = subprocess.run([sys.executable, *map(str, argv)], capture_output=True, text=True)
        assert proc.returncode == 2 and forms in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stderr
    assert sorted(os.listdir(tmp_path)) == []


def test_progress_says_what_the_budget_goes_on_before_the_first_update(
    tmp_path: Path, sample_table: Path
) -> None:
    """Issue 27, item 4: the first update came at 26% of a 5-minute budget, after lines that
    did not say so (vocabularies, encoding, the optimiser's imports, compiling)."""
    lines: list[str] = []
    cfg = TrainConfig(**{**FAST.to_dict(), "max_updates": 2, "max_time": 600.0, "quiet": False})
    train(str(sample_table), tmp_path / "m", TINY, cfg, echo=lines.append)
    phases = [
        "counting the vocabularies (",
        "encoding the pairs (",
        "building the model and the optimiser (",
        "starting the updates (",
        "first update done (",
    ]
    found = [next(i for i, line in enumerate(lines) if phase in line) for phase in phases]
    assert found == sorted(found), lines
    for i in found:
        assert re.search(r" \(\d+m\d\ds in, \d+% of the --max-time budget\)", lines[i]), lines[i]
    assert re.search(r": setup \d+m\d\ds, first update \d+m\d\ds$", lines[found[-1]])


def test_epoch_batches_cover_every_pair_once_in_a_seeded_order() -> None:
    lengths = np.array([3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5])
    for sort_k in (1, 2):
        e0 = epoch_batches(lengths, 4, seed=7, epoch=0, sort_k=sort_k)
        assert sorted(np.concatenate(e0).tolist()) == list(range(11))
        assert [len(b) for b in e0] == [4, 4, 3]
        again = epoch_batches(lengths, 4, seed=7, epoch=0, sort_k=sort_k)
        assert all(np.array_equal(a, b) for a, b in zip(e0, again, strict=True))
        e1 = epoch_batches(lengths, 4, seed=7, epoch=1, sort_k=sort_k)
        assert not all(np.array_equal(a, b) for a, b in zip(e0, e1, strict=True))
    # sort_k = 2: the two batches of the first window are ordered by length.
    first, second, _ = epoch_batches(lengths, 4, seed=7, epoch=0, sort_k=2)
    assert lengths[first].max() <= lengths[second].min()


def test_pair_arrays_pad_like_pad_batch() -> None:
    seqs = [([5, 9], [3, 4, 9]), ([9], [9]), ([2, 3, 4, 9], [7, 9])]
    builder = PairArraysBuilder()
    for s, t in seqs:
        builder.add(s, t)
    arrays = builder.build()
    batch = arrays.batch(np.array([2, 0, 1]))
    ids, lens = pad_batch([seqs[i][0] for i in (2, 0, 1)])
    assert torch.equal(batch.src_ids, ids) and torch.equal(batch.src_lens, lens)
    ids, lens = pad_batch([seqs[i][1] for i in (2, 0, 1)])
    assert torch.equal(batch.tgt_ids, ids) and torch.equal(batch.tgt_lens, lens)
    assert batch.num_tokens == 6
    assert arrays.subset(np.array([1])).tgt.tolist() == [9]


def test_validation_is_held_out_by_source(sample_table: Path) -> None:
    entries = list(read_table(str(sample_table)))
    src_vocab, tgt_vocab = build_vocabs([(e.src, e.tgt) for e in entries], 300, 300)
    cfg = TrainConfig(valid_fraction=0.3, seed=3)
    data = read_training_data(str(sample_table), src_vocab, tgt_vocab, cfg)
    held = {e.src for e in entries if is_heldout(e.src, 3, 0.3)}
    assert 0 < len(held) < len({e.src for e in entries})
    n_held = sum(e.src in held for e in entries)
    assert (len(data.train), len(data.valid), data.heldout_pairs) == (200 - n_held, n_held, n_held)
    assert data.heldout_sources == len(held)
    # Every validation source id sequence is a held-out source; none of them is trained on.
    valid_srcs = {tuple(src_vocab.encode_eos(e.src_tokens)) for e in entries if e.src in held}
    train_srcs = {tuple(src_vocab.encode_eos(e.src_tokens)) for e in entries if e.src not in held}
    offs = data.valid.src_offsets
    got = {tuple(data.valid.src[offs[i] : offs[i + 1]].tolist()) for i in range(len(data.valid))}
    assert got == valid_srcs and not (got & train_srcs - valid_srcs)
    # A cap scores a seeded subset but still keeps every held-out pair out of training.
    capped = read_training_data(
        str(sample_table),
        src_vocab,
        tgt_vocab,
        TrainConfig(valid_fraction=0.3, seed=3, valid_max_pairs=5),
    )
    assert (len(capped.valid), len(capped.train), capped.heldout_pairs) == (5, 200 - n_held, n_held)


def test_unigram_perplexity_by_hand() -> None:
    vocab = Vocab(words=("a", "b"), size=4)  # ids: 1 UNK, 2 a, 3 b, EOS 4
    train_b, valid_b = PairArraysBuilder(), PairArraysBuilder()
    train_b.add([4], [2, 2, 4])
    train_b.add([4], [3, 4])
    valid_b.add([4], [2, 1, 4])
    # Training target counts: a 2, b 1, EOS 2, UNK 0; total 5; 4 classes (UNK, a, b, EOS).
    expected = math.log(3 / 9) + math.log(1 / 9) + math.log(3 / 9)
    got = unigram_logprob_sum(train_b.build(), valid_b.build(), vocab)
    assert got == pytest.approx(expected)


def final_weights(out: Path) -> dict[str, torch.Tensor]:
    return torch.load(out / TRAIN_STATE_FILE, weights_only=True)["model"]


def test_resume_says_where_it_resumes_before_reading_the_table(
    tmp_path: Path, sample_table: Path
) -> None:
    """Issue 64, item 6: --resume said where it resumes only after reading, counting and
    encoding the table and building the model (minutes on a real table); now the line comes
    first, once."""
    cfg = TrainConfig(**{**FAST.to_dict(), "max_updates": 7})
    train(str(sample_table), tmp_path / "m", TINY, cfg)
    lines: list[str] = []
    more = TrainConfig(**{**cfg.to_dict(), "max_updates": 9, "quiet": False})
    train(str(sample_table), tmp_path / "m", TINY, more, resume=True, echo=lines.append)
    said = [i for i, line in enumerate(lines) if "resuming at update 7 (" in line]
    reading = next(i for i, line in enumerate(lines) if "encoding the pairs" in line)
    assert len(said) == 1 and said[0] < reading, lines
    assert "pairs seen, best validation perplexity " in lines[said[0]], lines[said[0]]


def test_resume_gives_the_same_weights_as_one_run(tmp_path: Path, sample_table: Path) -> None:
    cfg = FAST
    whole = train(
        str(sample_table),
        tmp_path / "whole",
        TINY,
        TrainConfig(**{**cfg.to_dict(), "max_updates": 17}),
    )
    assert whole.stopped_by == "max-updates" and whole.updates == 17
    assert whole.epochs_done > 1  # the resumed run crosses an epoch boundary
    split = tmp_path / "split"
    first = train(
        str(sample_table), split, TINY, TrainConfig(**{**cfg.to_dict(), "max_updates": 7})
    )
    assert first.updates == 7
    with pytest.raises(RescorerError, match="already holds a model"):
        train(str(sample_table), split, TINY, cfg)
    again = train(
        str(sample_table),
        split,
        TINY,
        TrainConfig(**{**cfg.to_dict(), "max_updates": 17}),
        resume=True,
    )
    assert again.updates == 17
    a, b = final_weights(tmp_path / "whole"), final_weights(split)
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key
    state_a = torch.load(tmp_path / "whole" / TRAIN_STATE_FILE, weights_only=True)
    state_b = torch.load(split / TRAIN_STATE_FILE, weights_only=True)
    for key in ("update", "epoch", "batch_in_epoch", "pairs_seen"):
        assert state_a["run"][key] == state_b["run"][key]
    for pa, pb in zip(
        state_a["optimizer"]["state"].values(), state_b["optimizer"]["state"].values(), strict=True
    ):
        assert torch.equal(pa["square_avg"], pb["square_avg"])
        assert torch.equal(pa["acc_delta"], pb["acc_delta"])
    # The log holds progress and validation records, the best model loads.
    records = [json.loads(line) for line in (split / TRAIN_LOG_FILE).read_text().splitlines()]
    valid = [r for r in records if "valid_ppl" in r]
    assert [r["update"] for r in valid] == [5, 7, 10, 15, 17]
    assert all(r["unigram_ppl"] == valid[0]["unigram_ppl"] for r in valid)
    assert load_model_dir(split).config == TINY


def test_compiled_training_follows_the_eager_run(tmp_path: Path, sample_table: Path) -> None:
    """--compile yes runs the updates through the compiled steps and readout (forward and
    backward); in fp32 its weights after 8 updates equal the eager run's to float rounding."""
    from torch._dynamo.utils import counters

    runs = {}
    for choice in ("no", "yes"):
        counters.clear()
        cfg = TrainConfig(**{**FAST.to_dict(), "max_updates": 8, "compile": choice})
        result = train(str(sample_table), tmp_path / choice, TINY, cfg)
        assert result.updates == 8
        runs[choice] = final_weights(tmp_path / choice)
        compiled_graphs = counters["stats"]["unique_graphs"]
        assert (compiled_graphs > 0) == (choice == "yes"), compiled_graphs
    initial = EncoderDecoder(TINY)
    init_weights_(initial, torch.Generator().manual_seed(FAST.seed))
    moved = 0.0
    for key, eager in runs["no"].items():
        torch.testing.assert_close(runs["yes"][key], eager, rtol=1e-4, atol=1e-5, msg=key)
        moved = max(moved, float((eager - initial.state_dict()[key]).abs().max()))
    assert moved > 1e-3  # the updates did change the weights


def test_compile_auto_follows_the_training_set_size() -> None:
    assert not TrainConfig().wants_compile(99_999)
    assert TrainConfig().wants_compile(100_000)
    assert TrainConfig(compile="yes").wants_compile(10)
    assert not TrainConfig(compile="no").wants_compile(10**6)
    with pytest.raises(RescorerError, match="--compile"):
        TrainConfig(compile="maybe")


@pytest.mark.slow
def test_interrupt_then_resume_matches_one_run(tmp_path: Path, sample_table: Path) -> None:
    """SIGINT in a real process stops after the current update and saves; --resume finishes."""
    flags = [
        "--src-vocab-size",
        "300",
        "--tgt-vocab-size",
        "300",
        "--hidden-size",
        "12",
        "--embed-size",
        "8",
        "--maxout-units",
        "6",
        "--batch-size",
        "16",
        "--device",
        "cpu",
        "--precision",
        "fp32",
        "--valid-fraction",
        "0.1",
        "--valid-every",
        "5",
        "--max-updates",
        "400",
        "--log-every",
        "1",
    ]
    out = tmp_path / "killed"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "rescorer", "train", str(sample_table), "-o", str(out), *flags],
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        preexec_fn=default_sigint,
    )
    assert proc.stderr is not None
    for line in proc.stderr:
        if "update 3 " in line:
            proc.send_signal(signal.SIGINT)
            break
    rest = proc.stderr.read()
    assert proc.wait(timeout=60) == 130, rest  # as a shell reports SIGINT: train && score stops
    assert "stopped (interrupted)" in rest, rest
    stopped_at = torch.load(out / TRAIN_STATE_FILE, weights_only=True)["run"]["update"]
    assert 3 <= stopped_at < 400
    # Finish to 40 updates in-process, compare with one uninterrupted run of 40.
    end = 40 if stopped_at < 40 else stopped_at
    result = CliRunner().invoke(
        cli,
        [
            "train",
            str(sample_table),
            "-o",
            str(out),
            "--resume",
            "--max-updates",
            str(end),
            "--quiet",
        ],
    )
    assert result.exit_code == 0, result.output
    whole = tmp_path / "whole"
    cfg = TrainConfig(**{**FAST.to_dict(), "max_updates": end})
    train(str(sample_table), whole, TINY, cfg)
    a, b = final_weights(whole), final_weights(out)
    for key in a:
        assert torch.equal(a[key], b[key]), key


def test_resume_refuses_other_model_flags(tmp_path: Path, sample_table: Path) -> None:
    out = tmp_path / "m"
    train(str(sample_table), out, TINY, TrainConfig(**{**FAST.to_dict(), "max_updates": 2}))
    runner = CliRunner()
    result = runner.invoke(
        cli, ["train", str(sample_table), "-o", str(out), "--resume", "--hidden-size", "16"]
    )
    assert result.exit_code == 1
    assert "--hidden-size 16 differs from the saved run's 12" in result.output
    result = runner.invoke(
        cli, ["train", str(sample_table), "-o", str(out), "--resume", "--seed", "5"]
    )
    assert result.exit_code == 1 and "--seed 5 differs" in result.output
    result = runner.invoke(cli, ["train", str(tmp_path / "missing.gz"), "-o", str(tmp_path / "x")])
    assert result.exit_code == 1 and "missing.gz" in result.output
    result = runner.invoke(cli, ["train", "-o", str(tmp_path / "x")])
    assert result.exit_code == 2


def test_cli_train_then_info(tmp_path: Path, sample_table: Path) -> None:
    out = tmp_path / "model"
    runner = CliRunner()
    result = runner.invoke(
        cli,
        [
            "train",
            str(sample_table),
            "-o",
            str(out),
            "--src-vocab-size",
            "100",
            "--tgt-vocab-size",
            "120",
            "--hidden-size",
            "8",
            "--embed-size",
            "4",
            "--maxout-units",
            "3",
            "--batch-size",
            "32",
            "--max-updates",
            "4",
            "--valid-every",
            "2",
            "--log-every",
            "2",
            "--device",
            "cpu",
            "--precision",
            "bf16",
            "--valid-fraction",
            "0.2",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "pairs/s" in result.output and "validation perplexity" in result.output
    assert "unigram" in result.output
    assert (out / WEIGHTS_FILE).is_file()
    info = runner.invoke(cli, ["info", str(out)])
    assert info.exit_code == 0, info.output
    for text in (
        "hidden_size: 8",
        "shortlist 100",
        "shortlist 120",
        "EOS id 120",
        "parameters:",
        "sha256:",
        "lines: 200",
        "torch_version",
        "precision: bf16",
        "valid_ppl",
    ):
        assert text in info.output, text
    bad = runner.invoke(cli, ["info", str(tmp_path)])
    assert bad.exit_code == 1 and "config.json" in bad.output


def test_pairs_input_equals_table_input(tmp_path: Path, sample_table: Path) -> None:
    entries = list(read_table(str(sample_table)))
    (tmp_path / "src.txt").write_text("".join(e.src + "\n" for e in entries), encoding="utf-8")
    (tmp_path / "tgt.txt").write_text("".join(e.tgt + "\n" for e in entries), encoding="utf-8")
    cfg = TrainConfig(**{**FAST.to_dict(), "max_updates": 3})
    train(str(sample_table), tmp_path / "a", TINY, cfg)
    train((str(tmp_path / "src.txt"), str(tmp_path / "tgt.txt")), tmp_path / "b", TINY, cfg)
    a, b = final_weights(tmp_path / "a"), final_weights(tmp_path / "b")
    assert all(torch.equal(a[k], b[k]) for k in a)
    (tmp_path / "tgt.txt").write_text("x\n", encoding="utf-8")
    with pytest.raises(RescorerError, match="more lines"):
        train((str(tmp_path / "src.txt"), str(tmp_path / "tgt.txt")), tmp_path / "c", TINY, cfg)


@pytest.mark.slow
def test_sigterm_saves_the_state_and_exits_143(tmp_path: Path, sample_table: Path) -> None:
    """What Slurm sends before it kills a job: the state is saved, and the exit status says the
    run did not finish (issue 14, item 2)."""
    out = tmp_path / "m"
    flags = ["--hidden-size", "8", "--embed-size", "6", "--maxout-units", "5", "--src-vocab-size",
             "200", "--tgt-vocab-size", "200", "--batch-size", "8", "--max-updates", "100000",
             "--valid-every", "1000", "--log-every", "1", "--device", "cpu"]  # fmt: skip
    proc = subprocess.Popen(
        [sys.executable, "-m", "rescorer", "train", str(sample_table), "-o", str(out), *flags],
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert proc.stderr is not None
    for line in proc.stderr:
        if "update 3 " in line:
            proc.send_signal(signal.SIGTERM)
            break
    rest = proc.stderr.read()
    assert proc.wait(timeout=60) == 143, rest
    assert "stopped (interrupted)" in rest and "continue with --resume" in rest, rest
    assert torch.load(out / TRAIN_STATE_FILE, weights_only=True)["run"]["update"] >= 3


class FakeCompile:
    """``compile_kernels`` whose kernels are the eager functions, the first call of which
    stands for a first compile: it waits until a "still compiling" line has been said (so that
    line comes while compiling, not after) and moves the clock of the modules given by
    ``seconds`` (a long compile, without waiting for one)."""

    def __init__(self, seconds: float = 0.0) -> None:
        import threading
        import time as real_time

        self.heard = threading.Event()
        self.offset, self.seconds, self.calls = 0.0, seconds, 0
        self.lines: list[str] = []
        outer = self

        class Clock:
            def __getattr__(self, name: str) -> object:
                return getattr(real_time, name)

            def monotonic(self) -> float:
                return real_time.monotonic() + outer.offset

        self.clock = Clock()

    def say(self, line: str) -> None:
        self.lines.append(line)
        if "still compiling" in line:
            self.heard.set()

    def __call__(self, model: EncoderDecoder, guard: object = None) -> object:
        from rescorer.model.encdec import Kernels

        def first_call(fn: object) -> object:
            def call(*args: object, **kwargs: object) -> object:
                self.calls += 1
                if self.calls == 1:
                    assert self.heard.wait(60), "no 'still compiling' line while compiling"
                    self.offset += self.seconds
                return fn(*args, **kwargs)  # type: ignore[operator]

            return call

        steps = (model.enc_rec.step, model.dec_rec.step, model.readout_logprobs,
                 model.readout_picks, model.decoder_tree_step)  # fmt: skip
        return Kernels(*map(first_call, steps))  # type: ignore[arg-type]


def test_a_first_compile_is_said_kept_alive_and_charged_to_max_time(
    tmp_path: Path, sample_table: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 39, item 2: 'train --max-time 10m' spent 3 minutes compiling its first update in
    silence. Now a line says it compiles and how long that usually takes, and lines keep coming
    while it does. Issue 59, item 1: the compile is charged to --max-time (the whole command
    is): a compile of 1000 s under a 600 s budget (--compile yes) leaves no time to train on."""
    import rescorer.train.budget as budget
    import rescorer.train.loop as loop
    import rescorer.train.setup as setup

    fake = FakeCompile(seconds=1000.0)
    monkeypatch.setattr(setup, "compile_kernels", fake)
    for module in (setup, loop, budget):
        monkeypatch.setattr(module, "time", fake.clock)
    cfg = TrainConfig(**{**FAST.to_dict(), "max_updates": 3, "max_time": 600.0, "quiet": False,
                         "compile": "yes", "progress_every": 0.05})  # fmt: skip
    result = train(str(sample_table), tmp_path / "m", TINY, cfg, echo=fake.say)
    assert (result.updates, result.stopped_by) == (1, "max-time"), fake.lines
    start = next(i for i, line in enumerate(fake.lines) if "starting the updates" in line)
    assert "compiles the steps and readout (usually" in fake.lines[start]
    assert "counted in --max-time; --compile auto gives up after 4m00s" in fake.lines[start]
    beat = next(i for i, line in enumerate(fake.lines) if "still compiling" in line)
    done = next(i for i, line in enumerate(fake.lines) if "first update done" in line)
    assert start < beat < done, fake.lines
    assert "(compiling, counted in --max-time)" in fake.lines[done]
    done_at = re.search(r"first update done \((\d+)m(\d\d)s in, 100% of the --max-time budget\)",
                        fake.lines[done])  # fmt: skip
    assert done_at and 60 * int(done_at[1]) + int(done_at[2]) >= 1000, fake.lines[done]


def test_compile_auto_gives_up_a_compile_far_past_its_time_and_trains_eagerly(
    tmp_path: Path, sample_table: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 59, item 1: a first compile of 17 minutes on a busy machine. --compile auto now
    gives up past COMPILE_GIVE_UP (here 2 s; the first kernel call hangs, as a compile that
    will not end, for two minutes and ten times what the run takes here with --compile no:
    issue 68, a slow machine keeps the margin) and trains eagerly: the same weights as
    --compile no."""
    import rescorer.train.config as config
    import rescorer.train.deadline as deadline
    import rescorer.train.setup as setup

    cfg = TrainConfig(**{**FAST.to_dict(), "max_updates": 3, "quiet": False, "compile": "auto"})
    eager_cfg = TrainConfig(**{**cfg.to_dict(), "compile": "no", "quiet": True})
    t0 = time.monotonic()
    train(str(sample_table), tmp_path / "no", TINY, eager_cfg)
    hang = 120 + 10 * (time.monotonic() - t0)
    fake = FakeCompile()
    fake.heard.set()  # its first call need not wait for a "still compiling" line
    real_kernels = fake.__call__

    def hanging_kernels(model: EncoderDecoder, guard: object = None) -> object:
        kernels = real_kernels(model, guard)
        first = kernels.readout  # type: ignore[attr-defined]
        calls = [0]

        def readout(*args: object) -> object:
            calls[0] += 1
            if calls[0] == 1:
                time.sleep(hang)  # interrupted by the deadline
            return first(*args)

        return kernels._replace(readout=readout)  # type: ignore[attr-defined]

    monkeypatch.setattr(setup, "compile_kernels", hanging_kernels)
    monkeypatch.setattr(config, "COMPILE_MIN_PAIRS", 1)  # auto compiles this small table
    monkeypatch.setattr(deadline, "COMPILE_GIVE_UP", 2.0)
    t0 = time.monotonic()
    result = train(str(sample_table), tmp_path / "auto", TINY, cfg, echo=fake.say)
    assert time.monotonic() - t0 < hang  # not the hanging "compile"
    assert (result.updates, result.stopped_by) == (3, "max-updates"), fake.lines
    warning = [line for line in fake.lines if "warning: compiling the first update" in line]
    assert len(warning) == 1 and "ran past 0m02s" in warning[0], fake.lines
    assert "continuing without compiling, as --compile no" in warning[0]
    a = load_model_dir(tmp_path / "auto")[0].state_dict()
    b = load_model_dir(tmp_path / "no")[0].state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
