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

``share_prefixes=False`` encodes every source token by token, and ``share_targets=False``
runs the earlier decoder instead of step 3: pairs sorted by target length in token-bounded
padded batches, the model's own ``decoder_states`` and ``packed_readout``. Both are kept for
the benchmarks and tests that compare against them.

``score_pairs_straightforward`` is the reference the benchmark compares against: batches of 64
pairs in file order, fp32, every pair encoding its own source.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace

import numpy as np
import torch
from torch import Tensor

from rescorer.batching import pad_batch, pad_flat
from rescorer.device import CompileGuard, autocast, bound_kernel_caches
from rescorer.io.table import split_tokens
from rescorer.model.encdec import (
    ROW_BUCKET,
    DecoderContext,
    EncoderDecoder,
    compile_kernels,
    sequence_logprobs,
)
from rescorer.score.pairs import (
    GroupedPairs,
    PrefixLevel,
    encode_pairs,
    prefix_tree,
    token_batches,
)
from rescorer.score.profile import nothing
from rescorer.vocab import Vocab


def gather_padded(flat: np.ndarray, off: np.ndarray, rows: np.ndarray) -> tuple[Tensor, Tensor]:
    """Rows ``rows`` of a flat ragged array as a padded id matrix (B,L) and lengths (B,)."""
    lens = off[rows + 1] - off[rows]  # (B,)
    return torch.from_numpy(pad_flat(flat, off, rows)), torch.from_numpy(lens.astype(np.int64))


ROW_MULTIPLE = 8  # rows of a prefix-tree level are padded to a multiple of this
READOUT_ROWS_CPU = 512  # positions per readout product on a CPU (the logits fit the cache)


@dataclass
class Work:
    """What the model has done so far (per-pair work, without padding)."""

    source_tokens: int = 0  # tokens of the distinct sources, EOS included
    encoder_steps: int = 0  # encoder steps run: source_tokens, or distinct prefixes if shared
    decoder_positions: int = 0  # positions run: target tokens (EOS included), or distinct
    # (source, target prefix) nodes when target prefixes are shared


class Scorer:
    """Scores GroupedPairses with a model on one device, fast path (see module docstring)."""

    def __init__(
        self,
        model: EncoderDecoder,
        precision: str = "fp32",
        batch_tokens: int = 4096,
        compile: bool = False,
        share_prefixes: bool = True,
        share_targets: bool = True,
    ) -> None:
        """``model`` is used as it is handed over (already on its device); with ``compile`` the
        scorer keeps compiled kernels of its own and leaves the model unchanged. A compile
        error warns once and the scorer goes on with the eager functions (``compile_guard``):
        the chunk it happened in is scored again, so every score is the eager one from there."""
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

    def score(self, batch: GroupedPairs) -> np.ndarray:
        """log p(y|x) (N,) float64 for every pair, in input order (one device-to-host copy)."""
        if batch.num_pairs == 0:
            return np.empty(0, dtype=np.float64)
        failed, work = self.compile_guard.failed, replace(self.work)
        logp = self.logprobs(batch)  # (N,)
        if self.compile_guard.failed and not failed:  # part-way: the whole chunk eagerly
            self.kernels, self.work = None, work
            logp = self.logprobs(batch)
        with self.phase("d2h"):
            return logp.double().cpu().numpy()

    @torch.inference_mode()
    def logprobs(self, batch: GroupedPairs) -> Tensor:
        """log p(y|x) (N,) fp32 on the scorer's device, in input order. With shared target
        prefixes (the default) on a GPU this only queues work: no step waits for the device
        (tests/score/test_gpu.py checks it)."""
        dev = self.device
        model = self.model
        with autocast(dev, self.precision):
            # 1. Each distinct source once; with share_prefixes each distinct prefix once.
            src_lens = np.diff(batch.src_off)  # (U,)
            c_all = torch.empty(
                len(src_lens), model.config.hidden_size, dtype=torch.float32, device=dev
            )  # (U,H)
            self.work.source_tokens += int(src_lens.sum())
            phase = self.phase
            if self.share_prefixes:
                with phase("encoder"):
                    self._encode_prefix_tree(batch, c_all)
            else:
                self.work.encoder_steps += int(src_lens.sum())
                src_order = np.argsort(src_lens, kind="stable")
                for rows in token_batches(src_lens, src_order, self.batch_tokens):
                    ids, lens = gather_padded(batch.src_ids, batch.src_off, rows)
                    with phase("h2d"):
                        ids, lens = self._to_device(ids), self._to_device(lens)
                    with phase("encoder"):
                        c = model.encode(ids, lens, self.kernels)  # (B,H)
                        c_all[self._to_device(torch.from_numpy(rows))] = c.float()
            if self.share_targets:  # 2-3. Target prefixes under one source shared.
                with phase("decoder"):
                    ctx_all = model.decoder_context(c_all)  # (U,.)
                return self._decode_prefix_tree(batch, ctx_all)  # (N,)
            # 2-3. Pairs sorted by target length, then by source, in padded batches.
            tgt_lens = np.diff(batch.tgt_off)  # (N,)
            order = np.lexsort((batch.pair_src, tgt_lens))
            logp = torch.empty(batch.num_pairs, dtype=torch.float32, device=dev)  # (N,)
            for rows in token_batches(tgt_lens, order, self.batch_tokens):
                srcs = batch.pair_src[rows]  # (B,)
                uniq, inverse = np.unique(srcs, return_inverse=True)
                ids, lens = gather_padded(batch.tgt_ids, batch.tgt_off, rows)
                with phase("h2d"):
                    ids, lens = self._to_device(ids), self._to_device(lens)
                with phase("decoder"):
                    ctx = model.decoder_context(c_all[self._to_device(torch.from_numpy(uniq))])
                    if not np.array_equal(uniq, srcs):  # expand to rows (np.unique sorts)
                        expand = torch.from_numpy(inverse.astype(np.int64))
                        ctx = ctx.index_select(self._to_device(expand))
                    states = model.decoder_states(ctx, ids, self.kernels)
                with phase("readout"):
                    token_logp = model.packed_readout(ctx, ids, lens, states, self.kernels)
                    # 4. Back to input order.
                    logp[self._to_device(torch.from_numpy(rows))] = sequence_logprobs(token_logp)
            self.work.decoder_positions += int(tgt_lens.sum())
            return logp

    def _to_device(self, t: Tensor) -> Tensor:
        """A host tensor on the scorer's device. On a GPU it is pinned first, so the copy is
        asynchronous and overlaps the work already queued (from pageable memory a copy
        waits for the device)."""
        if self.device.type != "cuda":
            return t
        return t.pin_memory().to(self.device, non_blocking=True)

    def _encode_prefix_tree(self, batch: GroupedPairs, c_all: Tensor) -> None:
        """c of every distinct source (into c_all (U,H)), one encoder step per distinct prefix:
        each level of the tree is one batched step from the parents' states."""
        host = torch.from_numpy
        h: Tensor | None = None  # (n_{t-1},H) states of the previous level's prefixes
        for level in prefix_tree(batch.src_ids, batch.src_off):
            n = len(level.tokens)
            # Rows padded to a multiple of 8 (pad rows repeat prefix 0 and are dropped): MKL's
            # fp32 products of 5-7 and 9-11 rows give other last bits with 1 and 2 threads, and
            # a deep level can have any row count; the bytes must not depend on the threads.
            pad = -n % ROW_MULTIPLE
            tokens = self._to_device(host(np.pad(level.tokens, (0, pad)).astype(np.int64)))
            if h is not None:  # each prefix continues from its parent's state
                parents = self._to_device(host(np.pad(level.parents, (0, pad))))
                h = h.index_select(0, parents)  # (n_t+pad,H)
            h = self.model.encode_step(tokens, h, self.kernels)[:n]  # (n_t,H)
            self.work.encoder_steps += n
            if len(level.ending):
                rows = self._to_device(host(level.ending_node))
                c_all[self._to_device(host(level.ending))] = h.index_select(0, rows).float()

    def _decode_prefix_tree(self, batch: GroupedPairs, ctx: DecoderContext) -> Tensor:
        """log p(y|x) (N,) fp32 of every pair, one decoder step and one readout per distinct
        (source, target prefix): targets under one source that begin alike ("of the", "of
        the house") share the states and the softmax of their common positions.

        Position t of pair j needs the state after y_1..y_{t-1}, so the sequences put into
        the prefix tree are [source j, y_1, ..., y_{T-1}] (the source as a pseudo-token
        after the vocabulary ids): depth 0 holds the sources (state s_0, no previous word),
        depth d the distinct (source, y_1..y_d). Every level is one batched step from the
        parents' states, then a readout whose picks are the next words of the pairs there.
        """
        dev, model, phase = self.device, self.model, self.phase
        V = model.config.tgt_rows
        seq = np.empty(len(batch.tgt_ids), dtype=np.int64)  # (sum T_j,)
        seq[1:] = batch.tgt_ids[:-1]
        seq[batch.tgt_off[:-1]] = V + batch.pair_src  # each sequence starts with its source
        ctx_terms = torch.cat([ctx.c_gates, ctx.c_cand], dim=1)  # (U,3H)
        logp = torch.zeros(batch.num_pairs, dtype=torch.float32, device=dev)  # (N,)
        s: Tensor | None = None  # (n_d,H) states of the previous level's nodes
        node_src = torch.empty(0, dtype=torch.int64, device=dev)  # (n_d,) each node's source
        for depth, level in enumerate(prefix_tree(seq, batch.tgt_off)):
            n = len(level.tokens)
            pad = -n % ROW_MULTIPLE  # as in _encode_prefix_tree (pad rows are dropped)
            with phase("h2d"):
                padded = np.pad(level.tokens, (0, pad), mode="edge")  # a valid source at depth 0
                tokens = self._to_device(torch.from_numpy(padded))
                parents = self._to_device(torch.from_numpy(np.pad(level.parents, (0, pad))))
            with phase("decoder"):
                if depth == 0:  # the roots: s_0 of each source, no previous word
                    node_src = tokens.long() - V  # (n,)
                    s = ctx.s0.index_select(0, node_src)  # (n,H)
                    f = None
                else:  # (n,H), (n,E) f(y_d), (n,)
                    assert s is not None
                    step = self.kernels.dec_tree_step if self.kernels else model.decoder_tree_step
                    s, f, node_src = step(tokens.long(), parents, node_src, s, ctx_terms)
            # Picks: pair j, at its node of this level, scores its word y_{depth+1}.
            words = batch.tgt_ids[batch.tgt_off[level.members] + depth]  # (a,)
            with phase("readout"):
                self._readout_level(s, f, ctx.c_out, node_src, level, words, logp)
            self.work.decoder_positions += n
            s = s[:n]
            node_src = node_src[:n]
        return logp

    def _readout_level(
        self,
        s: Tensor,
        f: Tensor | None,
        c_out: Tensor,
        node_src: Tensor,
        level: PrefixLevel,
        words: np.ndarray,
        logp: Tensor,
    ) -> None:
        """Adds ln p(word) of every pick of one tree level into logp (N,): the readout runs
        on the level's nodes in blocks of readout_rows (rows padded to a multiple of
        ROW_BUCKET with copies of node 0: few distinct shapes), each pick gathered from its
        node's row."""
        model, host = self.model, torch.from_numpy
        n = len(level.tokens)
        order = np.argsort(level.member_node, kind="stable")  # picks grouped by node
        pick_node, pick_pair = level.member_node[order], level.members[order]
        pick_word = words[order].astype(np.int64)
        readout = self.kernels.readout_picks if self.kernels else model.readout_picks
        R = self.readout_rows
        for start in range(0, n, R):
            stop = min(start + R, n)
            lo, hi = np.searchsorted(pick_node, [start, stop])
            rows = np.arange(start, stop)
            rows = np.pad(rows, (0, -len(rows) % ROW_BUCKET), constant_values=start)
            rows_t = self._to_device(host(rows))
            s_b = s.index_select(0, rows_t)  # (R',H)
            if f is None:  # depth 0: no previous word
                f_b = s_b.new_zeros(len(rows), model.config.embed_size)  # (R',E)
            else:
                f_b = f.index_select(0, rows_t)  # (R',E)
            c_b = c_out.index_select(0, node_src.index_select(0, rows_t))  # (R',PM)
            local = self._to_device(host(pick_node[lo:hi] - start))  # (K,) each pick's row
            word = self._to_device(host(pick_word[lo:hi]))  # (K,)
            picked = readout(s_b, f_b, c_b, local, word)  # (K,) fp32
            # A pair has one pick per level: no index repeats, so the sum is deterministic.
            logp.index_add_(0, self._to_device(host(pick_pair[lo:hi])), picked)


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
