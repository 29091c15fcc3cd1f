"""``rescorer score``: the streamed job (:mod:`rescorer.job.run`) with the scoring plugged in.

What it does with each chunk (:class:`Scoring`, the job's :class:`~rescorer.job.run.ChunkWork`):

- a worker parses and validates the chunk and turns it into id arrays, once per ``-m`` model
  (:func:`~rescorer.score.stages.parse_chunk`);
- the main process scores it on the device (:class:`rescorer.score.Scorer`), one scorer per
  model in the order given (an inverse model's pairs come grouped by target phrase and its
  scores go back to line order); the job submits chunk k+1 before it collects chunk k's
  scores, so on a GPU the device works on chunk k while the host parses chunk k+1, builds its
  trees and formats chunk k-1 (the synchronisation points: rescorer/score/scorer.py);
- a worker formats the new columns into the lines and compresses them, one gzip member per
  chunk (a multi-member gzip file, which zcat, Python and Moses read as one stream).

Everything else (chunks, lock, ``OUT.partial`` and its record, ``--resume``, shards and their
manifests) is the job's. The parts beside this module: the options and worker policy in
:mod:`~rescorer.score.config`, what the workers run in :mod:`~rescorer.score.stages`, the
models' warnings and columns in :mod:`~rescorer.score.models`.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from rescorer.errors import RescorerError
from rescorer.io.inputs import display_name
from rescorer.io.progress import COMPILE_TYPICAL
from rescorer.job.run import Phase, StreamedJob, nothing
from rescorer.score.config import (
    ScoreConfig,
    ScoreStats,
    batch_tokens_for,
    choose_workers,
    chunk_bytes_for,
    input_chunks,
    want_compile,
)
from rescorer.score.models import (
    already_scored,
    collect_columns,
    coverage_check,
    non_finite_error,
    refuse_foreign_table,
)
from rescorer.score.pairs import pairs_inside_shortlists
from rescorer.score.profile import Phases, WallClock
from rescorer.score.stages import ModelSides, ParsedChunk, format_chunk, init_worker, parse_chunk


def score_table(
    table: str, model_dir: str | Sequence[str], out: str, config: ScoreConfig
) -> ScoreStats:
    """Append one log-probability column per model of ``model_dir`` (a folder or a list, in
    that order; each in its direction: p(target | source) or p(source | target)), then the word
    penalty if asked, to every line of ``table``; write ``out``.

    What needs no model is checked before torch is imported (issue 59: a minute on a busy
    machine): the options, the output (its lock, an interrupted run's partial), the input;
    the table's coverage by the models' shortlists before they are loaded and compiled.
    Raises InputError at the first malformed line (unless ``skip_bad_lines``), leaving no output.
    """
    clock = WallClock() if config.profile else None
    mark = clock.mark if clock is not None else _unmarked
    model_dirs = [model_dir] if isinstance(model_dir, str) else list(model_dir)
    if not model_dirs:
        raise RescorerError("score: no model given (-m)")
    compile_ = want_compile(config.compile, table)
    with StreamedJob("score", table, out, config, model_dirs) as job:  # checks first
        job.claim(config)
        from rescorer.cpus import choose_threads
        from rescorer.device import resolve_device, resolve_precision, set_threads
        from rescorer.model.checkpoint import load_model_dir
        from rescorer.score.graphs import describe_capture

        threads = set_threads(choose_threads(config.threads))
        device = resolve_device(config.device)
        precision = resolve_precision(config.precision, device, "score")
        chunk_bytes = chunk_bytes_for(config.chunk_bytes, device)
        refuse_foreign_table(table, model_dirs, replace(config, chunk_bytes=chunk_bytes))
        mark("start and imports")
        loaded = [load_model_dir(folder, device=device) for folder in model_dirs]
        mark("model load")
        scorers, batch_tokens = _scorers(loaded, device, precision, config, compile_)
        mark("scorers")
        chunks = input_chunks(table, chunk_bytes) if config.workers == "auto" else None
        workers, why = choose_workers(config.workers, device, chunks)
        sides = [  # with workers, they plan each chunk's trees: the main process feeds the device
            ModelSides(m.src_vocab, m.tgt_vocab, m.direction, _plan_rows(m, s) if workers else None)
            for m, s in zip(loaded, scorers, strict=True)
        ]
        if (workers, chunk_bytes) != (config.workers, config.chunk_bytes):
            config = replace(config, workers=workers, chunk_bytes=chunk_bytes)
        phases = Phases(device) if config.profile else None
        if phases is not None:  # every model's encoder, decoder and readout time together
            for scorer in scorers:
                scorer.phase = phases
        stats = ScoreStats(device=str(device), precision=precision)
        manifest_options = _manifest_options(config, out, precision, device, batch_tokens, compile_)
        if scorers[0].capture:  # bucketed rows may change a GPU's last bits: parts must agree
            manifest_options["capture"] = scorers[0].capture
        coverage = [
            coverage_check(m.provenance, f, config.ignore_coverage)
            for m, f in zip(loaded, model_dirs, strict=True)
        ]
        phase = phases or nothing
        work = Scoring(
            scorers, sides, config, stats, coverage, model_dirs, display_name(table), phase
        )
        steps = ""  # the CPU's default, the exact shapes, goes unsaid
        if scorers[0].capture or config.capture != "auto" or device.type == "cuda":
            steps = f", {describe_capture(scorers[0].capture, config.capture, device)}"
        opening = [f"rescorer score: {device}, {precision}, {threads.describe()}, {why}{steps}"]
        compiling = _compiling(opening) if compile_ else None
        job.run(
            work,
            config,
            stats,
            model_dirs,
            manifest_options,
            device,
            phase,
            opening,
            compiling,
            mark,
        )
        stats.phases, stats.clock = phases, clock
        return stats


def _scorers(
    loaded: Sequence[Any], device: Any, precision: str, config: ScoreConfig, compile_: bool
) -> tuple[list[Any], int]:
    """One Scorer per model, and the --batch-tokens they share (on a GPU, by its memory)."""
    import torch

    from rescorer.score.scorer import Scorer

    cuda = device.type == "cuda"
    memory = torch.cuda.get_device_properties(device).total_memory if cuda else None
    rows = max(m.model.config.tgt_rows for m in loaded)
    batch_tokens = batch_tokens_for(config.batch_tokens, device, memory, rows)
    scorers = [
        Scorer(m.model, precision, batch_tokens, compile_, capture=config.capture) for m in loaded
    ]
    return scorers, batch_tokens


def _compiling(opening: list[str]) -> str:
    """Said when the input opens, after how the run computes: that the first chunk compiles;
    returns what is said while it still does."""
    opening.append(
        "rescorer score: compiling the model's steps and readout while the first chunk is "
        f"scored ({COMPILE_TYPICAL}; --compile no skips it)"
    )
    return "rescorer score: still compiling, with the first chunk"


def _manifest_options(
    config: ScoreConfig, out: str, precision: str, device: Any, batch_tokens: int, compile_: bool
) -> dict[str, Any]:
    """Every option that changes the output's bytes, as a shard's manifest states them."""
    gz = out.endswith(".gz")
    return {
        "column": config.column,
        "word_penalty": config.word_penalty,
        "precision": precision,
        "device_type": device.type,
        "batch_tokens": batch_tokens,
        "chunk_bytes": config.chunk_bytes,
        "compile": compile_,
        "gzip": gz,
        "compresslevel": config.compresslevel if gz else None,
        "skip_bad_lines": config.skip_bad_lines is not None,
    }


def _plan_rows(loaded: Any, scorer: Any) -> tuple[int, int]:
    """What a parse worker needs to plan a chunk for ``scorer`` (plan_chunk's rows)."""
    return loaded.model.config.tgt_rows, scorer.readout_rows


def _unmarked(name: str) -> None:
    """The stand-in for WallClock.mark when not profiling."""


class Scoring:
    """The scoring a ``score`` job does with each chunk (module docstring). ``coverage[k]``
    hears of model k's pairs inside its shortlists, before they are scored, until it has
    warned (it may refuse the table: score/models.py)."""

    unit = "pairs"
    shared_chunks = True  # parse_chunk and format_chunk take a chunk's text in shared memory

    def __init__(
        self,
        scorers: Sequence[Any],
        sides: Sequence[ModelSides],
        config: ScoreConfig,
        stats: ScoreStats,
        coverage: Sequence[Callable[[int, int], bool]] = (),
        model_dirs: Sequence[str] = ("the model",),
        name: str = "the table",
        phase: Phase = nothing,
    ) -> None:
        self.scorers, self.config, self.stats = scorers, config, stats
        self.init_worker = init_worker
        self.init_args: tuple[Any, ...] = (list(sides), None)
        self.parse = parse_chunk
        self.warn: list[Callable[[int, int], bool] | None] = list(coverage)
        self.inside = [0] * len(scorers)  # pairs inside each model's shortlists
        self.read = 0  # pairs read (parsed) so far
        self.model_dirs, self.name, self.phase = model_dirs, name, phase

    def submit(self, parsed: ParsedChunk) -> list[Any]:
        self.read += parsed.pairs.num_pairs  # the models' verdicts come before they score
        for k, pairs in enumerate(parsed.by_model):
            self.inside[k] += pairs_inside_shortlists(pairs)
            callback = self.warn[k] if k < len(self.warn) else None
            if callback is not None and callback(self.inside[k], self.read):
                self.warn[k] = None  # warned once
        self.stats.pairs_inside = self.inside[0]  # the first model's
        plans = parsed.plans or [None] * len(self.scorers)
        models = zip(self.scorers, parsed.by_model, plans, strict=True)
        return [scorer.submit(pairs, plan) for scorer, pairs, plan in models]

    def collect(
        self, pending: list[Any], parsed: ParsedChunk, gz_level: int | None
    ) -> tuple[Callable[..., bytes], tuple[Any, ...], int]:
        stats, config = self.stats, self.config
        with self.phase("d2h"):
            logp = collect_columns(pending, parsed)  # (N,) or (N,M)
        if not np.isfinite(logp).all():  # one pass: no nan or inf ever reaches the output
            raise non_finite_error(logp, parsed, self.name, self.model_dirs, stats.precision)
        if not stats.pairs_scored:  # the first chunk: is the table score's own output?
            scored = already_scored(self.name, parsed.lines, logp)
            if scored:
                print(f"rescorer score: {scored}", file=sys.stderr, flush=True)
        stats.pairs_scored += len(logp)
        args = (parsed.text, parsed.cuts, logp, parsed.unk, config.column, config.word_penalty)
        parsed.by_model, parsed.orders, parsed.plans = [], [], []  # only what the writer needs
        return format_chunk, (*args, gz_level), parsed.num_lines

    def progress(self) -> int:
        return self.stats.pairs_scored
