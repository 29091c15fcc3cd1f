"""The scorer's per-level steps at a few fixed row counts, replayed as CUDA graphs (``score
--capture``, issue 57 item 3).

Each level of a chunk's prefix trees has its own row count, so the eager fast path launches
kernels of new shapes chunk after chunk and nothing can be captured. Here:

- **Row buckets.** Every level's rows (encoder and decoder steps) and every readout block's
  rows are padded up to a bucket (:func:`bucket`): 64, then m * 2^k for m in 5..8 (80, 96,
  112, 128, 160, ...: four sizes per octave). Powers of two alone would waste up to half of a
  level's rows (a third on average) on padding; four per octave waste at most a fifth (about a
  tenth on average) and still give few shapes: 49 from 64 to 262,144 rows, of which a run
  meets a dozen or two. Every bucket is a multiple of 8 (the CPU's row rule, plan.py). The pad
  rows repeat a real row (the tree's row 0, the block's first row): their states and logits are
  computed and never read, so the scores are unchanged (:func:`bucket_plan` pads the plan's
  index arrays on the host; a parse worker's plan is padded the same way).
- **Static buffers.** Each of the three computations (encoder step, decoder step, readout block)
  reads and writes row views of buffers of its own (:class:`_Arena`), allocated outside any
  graph and grown (every graph of that kind dropped and captured again) when a larger bucket
  comes. The caller gathers each level's inputs straight into them (``index_select(out=)``)
  and takes its outputs from them; the picks (a block's words, whose count varies) are gathered
  from the readout's logits outside the graph.
- **Graphs.** ``mode == "graph"``: each (computation, bucket) is captured once as a
  ``torch.cuda.CUDAGraph`` (after one warm-up run on a side stream, as the training update does,
  rescorer/train/capture.py) and replayed; all graphs share one memory pool, which holds only
  their temporaries (they never run at once, and nothing in the pool outlives a replay).
  Capturing a new shape waits for the device (once per shape, the first chunks); a replay never
  does. ``mode == "bucket"``: the same computations at the same shapes, run eagerly (on a CPU
  with ``--capture on``, for the tests; and after a capture failed, with a one-line warning).

The computations are the eager ones' (rescorer/model/encdec.py): the same kernels on the same
rows, so fp32 scores equal the unbucketed ones to float rounding (the products' row counts
differ, and with them, on some libraries, the order of the sums).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import numpy as np
import torch
from torch import Tensor

from rescorer.model.encdec import EncoderDecoder, Kernels
from rescorer.score.config import CAPTURE_CHOICES  # auto: graphs on a CUDA device only
from rescorer.score.plan import Plan

ROW_FLOOR = 64  # the least bucket (the readout's old row multiple, encdec.ROW_BUCKET)


def bucket(rows: int) -> int:
    """The least bucket of at least ``rows`` rows: 64, or m * 2^k with m in 5..8 (module
    docstring): 65 -> 80, 100 -> 112, 129 -> 160, 1000 -> 1024, 100000 -> 102400."""
    if rows <= ROW_FLOOR:
        return ROW_FLOOR
    k = (rows - 1).bit_length() - 3  # 2^(k+2) < rows <= 2^(k+3)
    return -(-rows // (1 << k)) << k


def capture_mode(choice: str, device: torch.device) -> str:
    """The steps' mode for --capture ``choice``: ``graph`` (CUDA graphs at bucketed shapes),
    ``bucket`` (bucketed shapes run eagerly: ``on`` where there are no CUDA graphs) or ``""``
    (today's path: the exact row counts, eagerly; ``off``, and ``auto`` on a CPU)."""
    if choice not in CAPTURE_CHOICES:
        raise ValueError(f"--capture {choice!r}: expected one of {', '.join(CAPTURE_CHOICES)}")
    if choice == "off" or (choice == "auto" and device.type != "cuda"):
        return ""
    return "graph" if device.type == "cuda" else "bucket"


def describe_capture(mode: str, choice: str) -> str:
    """A few words on how the steps run, for a run's first line."""
    how = {
        "graph": "bucketed shapes replayed as CUDA graphs",
        "bucket": "bucketed shapes, eagerly",
        "": "exact shapes, eagerly",
    }[mode]
    return f"{how} (--capture {choice})"


def _padded(array: np.ndarray, rows: int, value: int | None = None) -> np.ndarray:
    """``array`` (n,) int64 padded to ``rows`` with ``value`` (None: its first entry)."""
    fill = int(array[0]) if value is None else value
    return np.pad(array, (0, rows - len(array)), constant_values=fill)


def bucket_plan(plan: Plan, readout_rows: int) -> Plan:
    """``plan`` with every level's rows and every readout block's rows padded to a bucket (the
    levels' indices into ``arrays`` kept; the pad rows are computed and never read). A block is
    padded to its bucket or to ``readout_rows`` (the largest block), whichever is less."""
    arrays = list(plan.arrays)
    for enc in plan.encoder:
        rows = bucket(len(arrays[enc.tokens]))
        arrays[enc.tokens] = _padded(arrays[enc.tokens], rows, 0)  # pad rows: prefix 0
        if enc.parents is not None:
            arrays[enc.parents] = _padded(arrays[enc.parents], rows, 0)
    for dec in plan.decoder:
        rows = bucket(len(arrays[dec.tokens]))
        tokens = arrays[dec.tokens]  # (n+pad,): a valid word or V + source in every row
        arrays[dec.tokens] = _padded(tokens, rows, int(tokens[-1]))
        if dec.parents is not None:
            arrays[dec.parents] = _padded(arrays[dec.parents], rows, 0)
        for block_rows, _, _, _ in dec.blocks:
            n = len(arrays[block_rows])
            arrays[block_rows] = _padded(arrays[block_rows], max(n, min(bucket(n), readout_rows)))
    return replace(plan, arrays=arrays)


class _Arena:
    """One computation's static inputs and outputs: a buffer per tensor of ``capacity`` rows
    (row shape and dtype in ``specs``), handed out as views of the first rows."""

    def __init__(self, device: torch.device, specs: list[tuple[tuple[int, ...], torch.dtype]]):
        self.device, self.specs, self.capacity = device, specs, 0
        self.buffers: list[Tensor] = []

    def views(self, rows: int) -> list[Tensor]:
        return [b[:rows] for b in self.buffers]

    def fit(self, rows: int, limit: int | None = None) -> bool:
        """Grow to ``rows`` rows at least (twice the old capacity, but not past ``limit``
        unless ``rows`` is); True if grown (new buffers: the graphs captured on the old ones
        are stale)."""
        if rows <= self.capacity:
            return False
        double = 2 * self.capacity if limit is None else min(2 * self.capacity, limit)
        self.capacity = max(rows, double)
        self.buffers = [
            torch.empty((self.capacity, *shape), dtype=dtype, device=self.device)
            for shape, dtype in self.specs
        ]
        return True


class LevelSteps:
    """The encoder step, the decoder step and the readout block of the prefix-tree path
    (rescorer/score/trees.py) at bucketed row counts, on static buffers: ``inputs(kind, rows)``
    gives the views to fill, ``run(kind, rows)`` computes (or replays) and gives the outputs.

    - ``encoder``: inputs tokens (n,) long, h (n,H) fp32 (zeros at depth 0); output h' (n,H);
    - ``decoder``: inputs tokens (n,) long, s (n,H) fp32 the parents' states, terms (n,3H) fp32
      [C_r c ; C_u c ; C c] of each node's source; outputs s' (n,H) fp32, f (n,E) fp32;
    - ``readout``: inputs s (R,H) fp32, f (R,E) fp32 (zeros at depth 0), c (R,PM) fp32 O_c c;
      outputs logits (R,V) fp32 (bias included), lse (R,) fp32 their log-sum-exp.
    """

    KINDS = ("encoder", "decoder", "readout")

    def __init__(
        self,
        model: EncoderDecoder,
        precision: str,
        mode: str,
        kernels: Kernels | None = None,
        readout_rows: int | None = None,
    ) -> None:
        """``readout_rows``: the scorer's largest readout block (its buffers grow no further
        unless a block needs it)."""
        self.model, self.precision, self.mode, self.kernels = model, precision, mode, kernels
        self.readout_rows = readout_rows
        cfg = model.config
        H, E, V = cfg.hidden_size, cfg.embed_size, cfg.tgt_rows
        PM = cfg.maxout_units * cfg.maxout_pool
        device = next(model.parameters()).device
        long, f32 = torch.int64, torch.float32
        Spec = list[tuple[tuple[int, ...], torch.dtype]]
        ins: dict[str, Spec] = {  # per row: (shape, dtype) of each input, then of each output
            "encoder": [((), long), ((H,), f32)],
            "decoder": [((), long), ((H,), f32), ((3 * H,), f32)],
            "readout": [((H,), f32), ((E,), f32), ((PM,), f32)],
        }
        outs: dict[str, Spec] = {
            "encoder": [((H,), f32)],
            "decoder": [((H,), f32), ((E,), f32)],
            "readout": [((V,), f32), ((), f32)],
        }
        self.arenas = {k: _Arena(device, [*ins[k], *outs[k]]) for k in self.KINDS}
        self.inputs_of = {k: len(v) for k, v in ins.items()}  # the rest are outputs
        self.graphs: dict[tuple[str, int], torch.cuda.CUDAGraph] = {}
        self.pool: Any = None
        self.shapes: set[tuple[str, int]] = set()  # every (kind, rows) run so far

    def reset(self, kernels: Kernels | None) -> None:
        """Drop every graph (they are captured again), e.g. when the compiled kernels fail."""
        self.kernels = kernels
        self.graphs.clear()

    def inputs(self, kind: str, rows: int) -> list[Tensor]:
        """The views (``rows`` rows) to fill with the next ``run``'s inputs."""
        arena = self.arenas[kind]
        limit = self.readout_rows if kind == "readout" else None  # (R,V) logits: no more
        if arena.fit(rows, limit):
            for key in [k for k in self.graphs if k[0] == kind]:
                del self.graphs[key]
        return arena.views(rows)[: self.inputs_of[kind]]

    def run(self, kind: str, rows: int) -> list[Tensor]:
        """The outputs (views of ``rows`` rows) of ``kind`` on the inputs just filled."""
        views = self.arenas[kind].views(rows)
        ins, outs = views[: self.inputs_of[kind]], views[self.inputs_of[kind] :]
        self.shapes.add((kind, rows))
        if self.mode != "graph":
            self._body(kind, ins, outs)
            return outs
        graph = self.graphs.get((kind, rows))
        if graph is None:
            try:
                graph = self.graphs[kind, rows] = self._capture(kind, ins, outs)
            except RuntimeError as exc:  # a kernel that cannot be captured: no graphs at all
                self._give_up(exc)
                self._body(kind, ins, outs)
                return outs
        graph.replay()
        return outs

    def _give_up(self, exc: BaseException) -> None:
        torch.cuda.synchronize()
        self.mode = "bucket"
        self.graphs.clear()
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
        print(
            f"rescorer: warning: capturing the scorer's steps as CUDA graphs failed ({first});"
            " continuing with the same steps uncaptured (slower)",
            file=sys.stderr,
            flush=True,
        )

    def _capture(self, kind: str, ins: list[Tensor], outs: list[Tensor]) -> torch.cuda.CUDAGraph:
        """One warm-up run on a side stream (lazy initialisations, compilation), then the
        capture into the shared pool (module docstring)."""
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            self._body(kind, ins, outs)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        if self.pool is None:
            self.pool = torch.cuda.graph_pool_handle()
        with torch.cuda.graph(graph, pool=self.pool, capture_error_mode="thread_local"):
            self._body(kind, ins, outs)
        return graph

    def _body(self, kind: str, ins: list[Tensor], outs: list[Tensor]) -> None:
        """The computation itself, the eager path's kernels (encdec.py), outputs written into
        ``outs``."""
        model, kernels = self.model, self.kernels
        with self._autocast(ins[0].device):
            if kind == "encoder":
                tokens, h = ins  # (n,), (n,H)
                outs[0].copy_(model.encode_step(tokens, h, kernels))  # (n,H)
            elif kind == "decoder":
                tokens, s, terms = ins  # (n,), (n,H), (n,3H)
                f = model.dec_input.embed_ids(tokens)  # (n,E)
                x = model.dec_input.project(f, terms)  # (n,3H)
                step = kernels.dec_step if kernels else model.dec_rec.step
                outs[0].copy_(step(x, s))  # (n,H)
                outs[1].copy_(f)
            else:
                s, f, c = ins  # (R,H), (R,E), (R,PM)
                logits, lse = outs  # (R,V), (R,)
                unbiased = model._unbiased_logits(s, f, c).float()  # (R,V)
                torch.add(unbiased, model.out_vocab.bias.float(), out=logits)  # readout_logits
                torch.logsumexp(logits, dim=1, out=lse)

    @contextmanager
    def _autocast(self, device: torch.device) -> Iterator[None]:
        """bf16 autocast without its weight-cast cache, which a graph must not keep (TF32 is
        set by the scorer's own autocast around the chunk)."""
        if self.precision == "bf16":
            with torch.autocast(device.type, dtype=torch.bfloat16, cache_enabled=False):
                yield
        else:
            yield
