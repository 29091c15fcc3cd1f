"""log p(y|x) of phrase pairs: the model side of ``rescorer score``.

Pairs arrive as flat id arrays (:class:`GroupedPairs`): the distinct source phrases of a chunk
once each, every pair pointing at its source. The fast path does each piece of work once:

1. the encoder runs over the prefix tree of the chunk's sources, one step per distinct prefix
   (Moses tables list sources in byte order: "the file", "the file is", "the file was"),
2. the per-source decoder terms (s0, C c, O_c c) are computed once per source,
3. the decoder runs over the prefix tree of (source, target prefix): one step and one
   softmax per distinct prefix of the targets under a source, each level batched, the
   readout in blocks of positions (the logits stay in the cache), one log-sum-exp per
   position for every word picked there; matrix products in bf16 under autocast, the state,
   log-softmax and sums in fp32,
4. every result lands at its pair's input position.

Steps 1 to 4 are planned on the host and run on the device by
:class:`~rescorer.score.trees.PrefixTreePath` (rescorer/score/trees.py), which :class:`Scorer`
extends; this module holds the scorer itself, the unshared paths below and the overlap with the
host. On a GPU with ``capture="on"`` the levels and readout blocks run at bucketed row counts on
static buffers, each shape captured once as a CUDA graph and replayed (rescorer/score/graphs.py).

``share_prefixes=False`` encodes every source token by token, and ``share_targets=False``
runs the earlier decoder instead of step 3: pairs sorted by target length in token-bounded
padded batches, the model's own ``decoder_states`` and ``packed_readout``. Both are kept for
the benchmarks and tests that compare against them.

``score_pairs_straightforward`` is the reference the benchmark compares against: batches of 64
pairs in file order, fp32, every pair encoding its own source.

On a GPU a chunk is :meth:`Scorer.submit`-ted and its scores collected later
(:meth:`Pending.result`), so the device works on one chunk while the host parses the next,
builds its trees and formats the last (rescorer/score/pipeline.py). ``submit`` builds the
chunk's prefix trees and every index array the device will need on the host first, packs
them into the chunk's pinned staging buffer and copies them in one host-to-device copy, queues
the model's work, and queues one device-to-host copy of the scores into the chunk's pinned
output buffer, followed by an event. The staging buffers are reused: one pair (in and out) per
chunk in flight, two by default. The synchronisation points, and the only ones (with the fast
path, the default; tests/score/test_gpu.py runs ``submit`` under CUDA's sync debug mode):

1. ``Pending.result`` waits for its chunk's event: the scores have arrived;
2. ``submit`` waits for the event of the chunk that last used the staging buffers it is about
   to refill (already complete when the caller collected that chunk's scores first, as the
   pipeline does: a buffer is refilled two chunks later);
3. with ``--profile``, every phase starts and ends with one (rescorer/score/profile.py);
4. with ``--capture on`` (a GPU's opt-in), capturing a step's bucketed shape as a CUDA graph,
   the first time that shape comes (rescorer/score/graphs.py: a few dozen times, in the first
   chunks); a replay never waits.

Nothing else waits: no ``.item()``, no ``.cpu()``, no data-dependent shape on the device.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import replace

import numpy as np
import torch
from torch import Tensor

from rescorer.batching import pad_batch, pad_flat
from rescorer.device import CompileGuard, autocast, bound_kernel_caches
from rescorer.io.table import split_tokens
from rescorer.model.encdec import EncoderDecoder, compile_kernels, sequence_logprobs
from rescorer.score.graphs import LevelSteps, bucket, bucket_plan, capture_mode
from rescorer.score.pairs import GroupedPairs, encode_pairs, token_batches
from rescorer.score.profile import nothing
from rescorer.score.trees import Plan, PrefixTreePath, Work
from rescorer.vocab import Vocab


def gather_padded(flat: np.ndarray, off: np.ndarray, rows: np.ndarray) -> tuple[Tensor, Tensor]:
    """Rows ``rows`` of a flat ragged array as a padded id matrix (B,L) and lengths (B,)."""
    lens = off[rows + 1] - off[rows]  # (B,)
    return torch.from_numpy(pad_flat(flat, off, rows)), torch.from_numpy(lens.astype(np.int64))


READOUT_ROWS_CPU = 512  # positions per readout product on a CPU (the logits fit the cache)


class _Staging:
    """One chunk's pinned host buffers on a GPU, reused chunk after chunk: the index arrays on
    their way in, the scores on their way out, and the event after the chunk's last copy."""

    def __init__(self) -> None:
        self.ids = torch.empty(0, dtype=torch.int64).pin_memory()
        self.out = torch.empty(0, dtype=torch.float32).pin_memory()
        self.event: torch.cuda.Event | None = None
        self.holder: Pending | None = None  # the chunk whose scores are in ``out``

    def claim(self) -> None:
        """Make the buffers free to refill: the chunk that used them last is collected first
        (synchronisation point 2; a no-op wait when its caller collected it already)."""
        if self.holder is not None:
            self.holder.fetch()
        if self.event is not None and not self.event.query():  # query() does not wait
            self.event.synchronize()

    def ids_for(self, n: int) -> Tensor:
        if len(self.ids) < n:
            self.ids = torch.empty(max(n, 2 * len(self.ids)), dtype=torch.int64).pin_memory()
        return self.ids[:n]

    def out_for(self, n: int) -> Tensor:
        if len(self.out) < n:
            self.out = torch.empty(max(n, 2 * len(self.out)), dtype=torch.float32).pin_memory()
        return self.out[:n]


class Pending:
    """The scores of one submitted chunk: :meth:`result` gives them, waiting for the device
    only there (synchronisation point 1)."""

    def __init__(
        self,
        value: np.ndarray | None = None,
        host: Tensor | None = None,
        event: torch.cuda.Event | None = None,
        staging: _Staging | None = None,
    ) -> None:
        self._value, self._host, self._event, self._staging = value, host, event, staging

    def fetch(self) -> None:
        """Wait for the copy and take the scores out of the staging buffer (float64)."""
        if self._value is None:
            assert self._host is not None and self._event is not None
            self._event.synchronize()
            self._value = self._host.numpy().astype(np.float64)  # fp32 -> fp64, exact
            self._host = None
            if self._staging is not None and self._staging.holder is self:
                self._staging.holder = None

    def result(self) -> np.ndarray:
        """log p(y|x) (N,) float64 of the chunk's pairs, in input order."""
        self.fetch()
        assert self._value is not None
        return self._value


class Scorer(PrefixTreePath):
    """Scores GroupedPairses with a model on one device, fast path (see module docstring)."""

    def __init__(
        self,
        model: EncoderDecoder,
        precision: str = "fp32",
        batch_tokens: int = 4096,
        compile: bool = False,
        share_prefixes: bool = True,
        share_targets: bool = True,
        in_flight: int = 2,
        capture: str = "auto",
    ) -> None:
        """``model`` is used as it is handed over (already on its device); with ``compile`` the
        scorer keeps compiled kernels of its own and leaves the model unchanged. A compile
        error warns once and the scorer goes on with the eager functions (``compile_guard``):
        the chunk it happened in is scored again, so every score is the eager one from there.
        ``in_flight``: chunks submitted and not yet collected that have staging buffers of
        their own on a GPU (more wait for the oldest one's scores). ``capture`` (``score
        --capture``): the fast path's levels and readout blocks at bucketed row counts on
        static buffers, replayed as CUDA graphs (rescorer/score/graphs.py); auto: off on every
        device (the exact row counts, as before) until the GPU tests have passed on a GPU; on
        a CPU ``on`` runs the bucketed shapes eagerly (the tests' way to check them)."""
        bound_kernel_caches()
        self.model = model
        self.device = next(model.parameters()).device
        self.compile_guard = CompileGuard("torch.compile of the scoring kernels")
        self.kernels = compile_kernels(model, self.compile_guard) if compile else None
        self.precision = precision
        self.batch_tokens = batch_tokens
        self.share_prefixes = share_prefixes
        self.share_targets = share_targets
        # Readout rows per product: a block's (rows,V) logits stay in the CPU's cache.
        self.readout_rows = READOUT_ROWS_CPU if self.device.type == "cpu" else batch_tokens
        self.work = Work()
        self.phase: Callable[[str], AbstractContextManager[None]] = nothing  # Phases to profile
        cuda = self.device.type == "cuda"
        self._staging = [_Staging() for _ in range(max(1, in_flight))] if cuda else []
        self._submitted = 0
        self.capture = capture_mode(capture, self.device)  # "graph", "bucket" or ""
        self.steps = None
        if self.capture:
            self.steps = LevelSteps(
                model, precision, self.capture, self.kernels, bucket(self.readout_rows)
            )

    def score(self, batch: GroupedPairs) -> np.ndarray:
        """log p(y|x) (N,) float64 for every pair, in input order (one device-to-host copy)."""
        return self.submit(batch).result()

    def submit(self, batch: GroupedPairs, plan: Plan | None = None) -> Pending:
        """Queue the scoring of ``batch``; its scores come with the result's ``result()``. On a
        GPU this returns once the host has built the chunk's trees and queued the device's
        work and the copy back, so the host can prepare the next chunk meanwhile; on the CPU
        the work is done here. ``plan``: the chunk's trees made elsewhere (a parse worker's
        :func:`~rescorer.score.plan.plan_chunk` with this scorer's rows), else made here."""
        if batch.num_pairs == 0:
            return Pending(np.empty(0, dtype=np.float64))
        staging = None
        if self._staging:
            staging = self._staging[self._submitted % len(self._staging)]
            self._submitted += 1
            staging.claim()
        failed, work = self.compile_guard.failed, replace(self.work)
        logp = self._logprobs(batch, staging, plan)  # (N,)
        if self.compile_guard.failed and not failed:  # part-way: the whole chunk eagerly
            self.kernels, self.work = None, work
            if self.steps is not None:  # graphs captured with the compiled kernels: again
                self.steps.reset(None)
            if staging is not None:
                staging.claim()  # the first upload's copy is done before the buffer is refilled
            logp = self._logprobs(batch, staging, plan)
        with self.phase("d2h"):
            if staging is None:
                return Pending(logp.double().cpu().numpy())
            host = staging.out_for(batch.num_pairs)
            host.copy_(logp, non_blocking=True)
            staging.event = torch.cuda.Event()
            staging.event.record()
            pending = Pending(host=host, event=staging.event, staging=staging)
            staging.holder = pending
            return pending

    def logprobs(self, batch: GroupedPairs) -> Tensor:
        """log p(y|x) (N,) fp32 on the scorer's device, in input order. With shared target
        prefixes (the default) on a GPU this only queues work: no step waits for the device
        (tests/score/test_gpu.py checks it)."""
        staging = None
        if self._staging:
            staging = self._staging[self._submitted % len(self._staging)]
            self._submitted += 1
            staging.claim()
        return self._logprobs(batch, staging)

    @torch.inference_mode()
    def _logprobs(
        self, batch: GroupedPairs, staging: _Staging | None, given: Plan | None = None
    ) -> Tensor:
        dev, model, phase = self.device, self.model, self.phase
        trees = self.share_prefixes, self.share_targets
        with phase("trees"):
            shared = trees == (True, True)  # the plan a parse worker makes (plan_chunk)
            plan = given if given is not None and shared else self._plan(batch, *trees)
            if self.steps is not None:  # rows padded to buckets (a worker's plan too)
                plan = bucket_plan(plan, self.readout_rows)
        with phase("h2d"):
            ids = self._upload(plan.arrays, staging)
        self.work.source_tokens += plan.work.source_tokens
        self.work.encoder_steps += plan.work.encoder_steps
        self.work.decoder_positions += plan.work.decoder_positions
        with autocast(dev, self.precision):
            # 1. Each distinct source once; with share_prefixes each distinct prefix once.
            src_lens = np.diff(batch.src_off)  # (U,)
            c_all = torch.empty(
                len(src_lens), model.config.hidden_size, dtype=torch.float32, device=dev
            )  # (U,H)
            if self.share_prefixes:
                with phase("encoder"):
                    self._run_encoder(plan, ids, c_all)
            else:
                self.work.source_tokens += int(src_lens.sum())
                self.work.encoder_steps += int(src_lens.sum())
                src_order = np.argsort(src_lens, kind="stable")
                for rows in token_batches(src_lens, src_order, self.batch_tokens):
                    src_ids, lens = gather_padded(batch.src_ids, batch.src_off, rows)
                    with phase("h2d"):
                        src_ids, lens = self._to_device(src_ids), self._to_device(lens)
                        rows_t = self._to_device(torch.from_numpy(rows))
                    with phase("encoder"):
                        c = model.encode(src_ids, lens, self.kernels)  # (B,H)
                        c_all[rows_t] = c.float()
            if self.share_targets:  # 2-3. Target prefixes under one source shared.
                return self._run_decoder(plan, ids, batch, c_all)  # (N,)
            # 2-3. Pairs sorted by target length, then by source, in padded batches.
            tgt_lens = np.diff(batch.tgt_off)  # (N,)
            order = np.lexsort((batch.pair_src, tgt_lens))
            logp = torch.empty(batch.num_pairs, dtype=torch.float32, device=dev)  # (N,)
            for rows in token_batches(tgt_lens, order, self.batch_tokens):
                srcs = batch.pair_src[rows]  # (B,)
                uniq, inverse = np.unique(srcs, return_inverse=True)
                tgt_ids, lens = gather_padded(batch.tgt_ids, batch.tgt_off, rows)
                with phase("h2d"):
                    tgt_ids, lens = self._to_device(tgt_ids), self._to_device(lens)
                    uniq_t = self._to_device(torch.from_numpy(uniq))
                    rows_t = self._to_device(torch.from_numpy(rows))
                    expand = None
                    if not np.array_equal(uniq, srcs):  # expand to rows (np.unique sorts)
                        expand = self._to_device(torch.from_numpy(inverse.astype(np.int64)))
                with phase("decoder"):
                    ctx = model.decoder_context(c_all[uniq_t])
                    if expand is not None:
                        ctx = ctx.index_select(expand)
                    states = model.decoder_states(ctx, tgt_ids, self.kernels)
                with phase("readout"):
                    token_logp = model.packed_readout(ctx, tgt_ids, lens, states, self.kernels)
                    # 4. Back to input order.
                    logp[rows_t] = sequence_logprobs(token_logp)
            self.work.decoder_positions += int(tgt_lens.sum())
            return logp

    def _upload(self, arrays: list[np.ndarray], staging: _Staging | None) -> list[Tensor]:
        """``arrays`` (int64) on the scorer's device. On a GPU: packed into the chunk's pinned
        staging buffer and copied in one asynchronous copy (views into it come back); on the
        CPU the arrays themselves, uncopied."""
        if self.device.type != "cuda" or not arrays:
            return [self._to_device(torch.from_numpy(a)) for a in arrays]
        sizes = [len(a) for a in arrays]
        if staging is None:  # a private buffer (logprobs called on its own)
            staging = _Staging()
        host = staging.ids_for(sum(sizes))
        np.concatenate(arrays, out=host.numpy())
        dev = host.to(self.device, non_blocking=True)
        staging.event = torch.cuda.Event()  # the next refill waits for this copy (point 2)
        staging.event.record()
        return list(torch.split(dev, sizes))

    def _to_device(self, t: Tensor) -> Tensor:
        """A host tensor on the scorer's device (the unshared paths: the fast path uploads a
        chunk's arrays in one copy). On a GPU it is pinned first, so the copy is asynchronous
        and overlaps the work already queued."""
        if self.device.type != "cuda":
            return t
        return t.pin_memory().to(self.device, non_blocking=True)


def score_pairs(
    model: EncoderDecoder,
    src_vocab: Vocab,
    tgt_vocab: Vocab,
    pairs: Sequence[tuple[str, str]],
    *,
    precision: str = "fp32",
    batch_tokens: int = 4096,
) -> np.ndarray:
    """log p(y|x) (N,) of (source, target) phrase pairs with the fast path, in input order, on
    the device the model is on."""
    scorer = Scorer(model, precision, batch_tokens)
    return scorer.score(encode_pairs(src_vocab, tgt_vocab, pairs))


@torch.inference_mode()
def score_pairs_straightforward(
    model: EncoderDecoder,
    src_vocab: Vocab,
    tgt_vocab: Vocab,
    pairs: Sequence[tuple[str, str]],
    *,
    batch_size: int = 64,
) -> np.ndarray:
    """The baseline: batches of ``batch_size`` pairs in file order, fp32, no encoder reuse."""
    device = next(model.parameters()).device
    model.eval()
    out = np.empty(len(pairs), dtype=np.float64)
    for start in range(0, len(pairs), batch_size):
        chunk = pairs[start : start + batch_size]
        src = [src_vocab.encode_eos(split_tokens(s)) for s, _ in chunk]
        tgt = [tgt_vocab.encode_eos(split_tokens(t)) for _, t in chunk]
        src_ids, src_lens = pad_batch(src)
        tgt_ids, tgt_lens = pad_batch(tgt)
        token_logp = model(
            src_ids.to(device), src_lens.to(device), tgt_ids.to(device), tgt_lens.to(device)
        )  # (B,T)
        out[start : start + len(chunk)] = sequence_logprobs(token_logp).double().cpu().numpy()
    return out
