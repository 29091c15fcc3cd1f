"""The scorer's per-level steps at a few fixed row counts, replayed as CUDA graphs (``score
--capture``, issue 57 item 3).

Each level of a chunk's prefix trees has its own row count, so the eager fast path launches
kernels of new shapes chunk after chunk and nothing can be captured. Here:

- **Row buckets.** Every level's rows (encoder and decoder steps), every readout block's rows
  and its picks (the words scored there) are padded up to a bucket (:func:`bucket`): 64, then
  m * 2^k for m in 5..8 (80, 96, 112, 128, 160, ...: four sizes per octave). Powers of two
  alone would waste up to half of a level's rows (a third on average) on padding; four per
  octave waste at most a fifth (about a tenth on average) and still give few shapes: 49 from
  64 to 262,144 rows, of which a run meets a dozen or two. Every bucket is a multiple of 8
  (the CPU's row rule, plan.py). The pad rows repeat a real row (the tree's row 0, the block's
  first row; a pad pick scores word 0 at the block's row 0): they are computed and never read,
  so the scores are unchanged (:func:`bucket_plan` pads the plan's index arrays on the host;
  a parse worker's plan too).
- **Static buffers.** Each of the three computations (encoder step, decoder step, readout block)
  reads and writes row views of buffers of its own (:class:`_Arena`), allocated outside any
  graph and grown (every graph of that kind dropped and captured again) when a larger bucket
  comes. The caller gathers each level's inputs straight into them (``index_select(out=)``)
  and takes its outputs from them (the readout's: one ln p per pick, added into the chunk's
  scores outside the graph; the (R,V) logits are the graph's temporaries).
- **Graphs.** ``mode == "graph"``: each (computation, bucket; a readout's rows and picks) is
  captured once as a ``torch.cuda.CUDAGraph`` (after one warm-up run on a side stream, as the
  training update does, rescorer/train/capture.py) and replayed; all graphs share one memory
  pool, which holds only their temporaries (they never run at once, and nothing in the pool
  outlives a replay). Capturing a new shape waits for the device (once per shape, the first
  chunks); a replay never does. ``mode == "bucket"``: the same computations at the same
  shapes, run eagerly (on a CPU with ``--capture on``, for the tests; and after a capture
  failed, with a one-line warning).

The computations are the eager ones' (rescorer/model/encdec.py; the readout adds its fp32 bias
in the same kernel that converts the products' output, one pass less, the same values) on the
same rows, so scores equal the unbucketed ones to float rounding (the products' row counts
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


#: What the first line adds for --capture auto on a GPU.
UNTESTED = "CUDA graphs not yet tested on a GPU; --capture on replays the steps as CUDA graphs"


def capture_mode(choice: str, device: torch.device) -> str:
    """The steps' mode for --capture ``choice``: ``graph`` (CUDA graphs at bucketed shapes),
    ``bucket`` (bucketed shapes run eagerly: ``on`` where there are no CUDA graphs) or ``""``
    (today's path: the exact row counts, eagerly; ``off``, and ``auto`` on every device until
    the GPU tests have passed on a GPU: issue 64, item 7)."""
    if choice not in CAPTURE_CHOICES:
        raise ValueError(f"--capture {choice!r}: expected one of {', '.join(CAPTURE_CHOICES)}")
    if choice in ("auto", "off"):
        return ""
    return "graph" if device.type == "cuda" else "bucket"


def describe_capture(mode: str, choice: str, device: torch.device) -> str:
    """A few words on how the steps run, for a run's first line (on a GPU, why auto does not
    capture)."""
    how = {
        "graph": "bucketed shapes replayed as CUDA graphs",
        "bucket": "bucketed shapes, eagerly",
        "": "exact shapes, eagerly",
    }[mode]
    why = f": {UNTESTED}" if not mode and choice == "auto" and device.type == "cuda" else ""
    return f"{how} (--capture {choice}{why})"


def _padded(array: np.ndarray, rows: int, value: int | None = None) -> np.ndarray:
    """``array`` (n,) int64 padded to ``rows`` with ``value`` (None: its first entry)."""
    fill = int(array[0]) if value is None else value
    return np.pad(array, (0, rows - len(array)), constant_values=fill)


def bucket_plan(plan: Plan, readout_rows: int) -> Plan:
    """``plan`` with every level's rows, every readout block's rows and its picks padded to a
    bucket (the levels' indices into ``arrays`` kept; the pad rows and picks are computed and
    never read: a block's pairs are not padded). A block's rows are padded to their bucket or
    to ``readout_rows`` (the largest block), whichever is less."""
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
        for block_rows, local, word, _ in dec.blocks:  # the picks' pairs stay as they are
            n = len(arrays[block_rows])
            arrays[block_rows] = _padded(arrays[block_rows], max(n, min(bucket(n), readout_rows)))
            picks = bucket(len(arrays[local]))
            arrays[local] = _padded(arrays[local], picks, 0)  # word 0 at the block's row 0
            arrays[word] = _padded(arrays[word], picks, 0)
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
    - ``readout``: inputs s (R,H) fp32, f (R,E) fp32 (zeros at depth 0), c (R,PM) fp32 O_c c,
      and K picks: rows (K,) long, words (K,) long; output ln p (K,) fp32 of each pick
      (encdec.readout_picks). R and K are both buckets: a graph per (R, K) that comes.
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
        H, E = cfg.hidden_size, cfg.embed_size
        PM = cfg.maxout_units * cfg.maxout_pool
        device = next(model.parameters()).device
        long, f32 = torch.int64, torch.float32
        specs: dict[str, list[tuple[tuple[int, ...], torch.dtype]]] = {  # per row
            "encoder": [((), long), ((H,), f32), ((H,), f32)],  # tokens, h | h'
            "decoder": [((), long), ((H,), f32), ((3 * H,), f32), ((H,), f32), ((E,), f32)],
            "readout": [((H,), f32), ((E,), f32), ((PM,), f32)],  # s, f, c (rows)
            "picks": [((), long), ((), long), ((), f32)],  # row, word | ln p (picks)
        }  # tokens, s, terms | s', f
        self.arenas = {name: _Arena(device, spec) for name, spec in specs.items()}
        self.inputs_of = {"encoder": 2, "decoder": 3, "readout": 5}  # the rest are outputs
        self.graphs: dict[tuple[str, int, int], torch.cuda.CUDAGraph] = {}
        self.pool: Any = None
        self.shapes: set[tuple[str, int]] = set()  # every (kind, rows) run so far

    def reset(self, kernels: Kernels | None) -> None:
        """Drop every graph (they are captured again), e.g. when the compiled kernels fail."""
        self.kernels = kernels
        self.graphs.clear()

    @staticmethod
    def _parts(kind: str, rows: int, picks: int) -> list[tuple[str, int]]:
        """The arenas of ``kind`` and their row counts: a readout block's rows and picks."""
        return [("readout", rows), ("picks", picks)] if kind == "readout" else [(kind, rows)]

    def _views(self, kind: str, rows: int, picks: int) -> tuple[list[Tensor], list[Tensor]]:
        parts = self._parts(kind, rows, picks)
        views = [v for name, n in parts for v in self.arenas[name].views(n)]
        return views[: self.inputs_of[kind]], views[self.inputs_of[kind] :]

    def inputs(self, kind: str, rows: int, picks: int = 0) -> list[Tensor]:
        """The views (``rows`` rows; a readout's last two ``picks`` rows) to fill with the next
        ``run``'s inputs."""
        grown = False
        for name, n in self._parts(kind, rows, picks):
            limit = self.readout_rows if name == "readout" else None
            grown |= self.arenas[name].fit(n, limit)
        if grown:
            for key in [k for k in self.graphs if k[0] == kind]:
                del self.graphs[key]
        return self._views(kind, rows, picks)[0]

    def run(self, kind: str, rows: int, picks: int = 0) -> list[Tensor]:
        """The outputs (views) of ``kind`` on the inputs just filled."""
        ins, outs = self._views(kind, rows, picks)
        self.shapes.add((kind, rows))
        if self.mode != "graph":
            self._body(kind, ins, outs)
            return outs
        graph = self.graphs.get((kind, rows, picks))
        if graph is None:
            try:
                graph = self.graphs[kind, rows, picks] = self._capture(kind, ins, outs)
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
                s, f, c, rows, words = ins  # (R,H), (R,E), (R,PM), (K,), (K,)
                readout = kernels.readout_picks if kernels else self._readout_picks
                outs[0].copy_(readout(s, f, c, rows, words))  # (K,)

    def _readout_picks(
        self, s: Tensor, f: Tensor, c: Tensor, rows: Tensor, words: Tensor
    ) -> Tensor:
        """encdec.readout_picks with one pass less over the (R,V) logits: the products'
        output and the fp32 bias added in one kernel (bf16 + fp32 gives fp32: the same
        values as converting first)."""
        model = self.model
        logits = torch.add(model._unbiased_logits(s, f, c), model.out_vocab.bias.float())
        lse = torch.logsumexp(logits, dim=1)  # (R,)
        return logits[rows, words] - lse[rows]  # (K,)

    @contextmanager
    def _autocast(self, device: torch.device) -> Iterator[None]:
        """bf16 autocast without its weight-cast cache, which a graph must not keep (TF32 is
        set by the scorer's own autocast around the chunk)."""
        if self.precision == "bf16":
            with torch.autocast(device.type, dtype=torch.bfloat16, cache_enabled=False):
                yield
        else:
            yield
