"""The scorer's fast path over prefix trees (steps 1 to 4 of rescorer/score/scorer.py's
docstring) for one chunk. The host's share: both prefix trees (the distinct sources; the
(source, target prefix) nodes with the readout's picks) planned as the int64 index arrays the
device needs (:class:`_Plan`; the scorer uploads them in one copy). The device's share: one
batched encoder or decoder step per tree level, the readout in blocks of rows, each pick added
at its pair's input position. :class:`Work` counts what ran. The trees themselves come from
:func:`rescorer.score.pairs.prefix_tree`.

:class:`~rescorer.score.scorer.Scorer` is a :class:`PrefixTreePath`: it holds the model, its
device and compiled kernels, uploads the arrays and queues the work (the overlap and its
synchronisation points are its module's).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

from rescorer.model.encdec import ROW_BUCKET, EncoderDecoder, Kernels
from rescorer.score.pairs import GroupedPairs, prefix_tree

ROW_MULTIPLE = 8  # rows of a prefix-tree level are padded to a multiple of this


@dataclass
class Work:
    """What the model has done so far (per-pair work, without padding)."""

    source_tokens: int = 0  # tokens of the distinct sources, EOS included
    encoder_steps: int = 0  # encoder steps run: source_tokens, or distinct prefixes if shared
    decoder_positions: int = 0  # positions run: target tokens (EOS included), or distinct
    # (source, target prefix) nodes when target prefixes are shared


@dataclass
class _EncoderLevel:
    """One level of the source prefix tree, as indices into the chunk's uploaded arrays."""

    n: int  # distinct prefixes at this depth
    tokens: int  # (n+pad,) their last tokens
    parents: int | None  # (n+pad,) their parents' rows (None at depth 0)
    ending_node: int | None  # (e,) the rows of the sources that end here
    ending: int | None  # (e,) those sources


@dataclass
class _DecoderLevel:
    """One level of the (source, target prefix) tree, as indices into the uploaded arrays."""

    n: int  # nodes at this depth
    tokens: int  # (n+pad,) words, or V + source at depth 0
    parents: int | None  # (n+pad,) parents' rows (None at depth 0)
    blocks: list[tuple[int, int, int, int]]  # per readout block: rows, local, word, pair


@dataclass
class _Plan:
    """A chunk's host work for the fast path: both prefix trees, as the index arrays the device
    needs (``arrays``, all int64, uploaded in one copy) and the levels that use them."""

    encoder: list[_EncoderLevel] = field(default_factory=list)
    decoder: list[_DecoderLevel] = field(default_factory=list)
    arrays: list[np.ndarray] = field(default_factory=list)
    work: Work = field(default_factory=Work)

    def add(self, array: np.ndarray) -> int:
        self.arrays.append(np.ascontiguousarray(array, dtype=np.int64))
        return len(self.arrays) - 1


class PrefixTreePath:
    """The prefix-tree steps of :class:`~rescorer.score.scorer.Scorer`, whose ``__init__`` sets
    these attributes."""

    model: EncoderDecoder
    device: torch.device
    kernels: Kernels | None
    phase: Callable[[str], AbstractContextManager[None]]
    readout_rows: int

    def _plan(self, batch: GroupedPairs, encoder: bool, decoder: bool) -> _Plan:
        """The host's share of the fast path for one chunk: the source prefix tree (with
        ``encoder``) and the (source, target prefix) tree with the readout's picks (with
        ``decoder``), as index arrays."""
        plan = _Plan()
        if encoder:
            plan.work.source_tokens = int(np.diff(batch.src_off).sum())
            for level in prefix_tree(batch.src_ids, batch.src_off):
                n = len(level.tokens)
                # Rows padded to a multiple of 8 (pad rows repeat prefix 0 and are dropped):
                # MKL's fp32 products of 5-7 and 9-11 rows give other last bits with 1 and 2
                # threads, and a deep level can have any row count; the bytes must not depend
                # on the threads.
                pad = -n % ROW_MULTIPLE
                ends = len(level.ending) > 0
                plan.encoder.append(
                    _EncoderLevel(
                        n,
                        plan.add(np.pad(level.tokens, (0, pad))),
                        plan.add(np.pad(level.parents, (0, pad))) if plan.encoder else None,
                        plan.add(level.ending_node) if ends else None,
                        plan.add(level.ending) if ends else None,
                    )
                )
                plan.work.encoder_steps += n
        if not decoder:
            return plan
        # The decoder's sequences [source j, y_1, ..., y_{T-1}] (see _run_decoder).
        V = self.model.config.tgt_rows
        seq = np.empty(len(batch.tgt_ids), dtype=np.int64)  # (sum T_j,)
        seq[1:] = batch.tgt_ids[:-1]
        seq[batch.tgt_off[:-1]] = V + batch.pair_src  # each sequence starts with its source
        R = self.readout_rows
        for depth, level in enumerate(prefix_tree(seq, batch.tgt_off)):
            n = len(level.tokens)
            pad = -n % ROW_MULTIPLE  # as in the encoder (pad rows are dropped)
            tokens = plan.add(np.pad(level.tokens, (0, pad), mode="edge"))  # a valid source
            parents = plan.add(np.pad(level.parents, (0, pad))) if depth else None
            # Picks: pair j, at its node of this level, scores its word y_{depth+1}; grouped
            # by node, in blocks of R rows (padded to a multiple of ROW_BUCKET with copies of
            # the block's first row: few distinct shapes).
            words = batch.tgt_ids[batch.tgt_off[level.members] + depth]  # (a,)
            order = np.argsort(level.member_node, kind="stable")
            pick_node, pick_pair = level.member_node[order], level.members[order]
            pick_word = words[order]
            blocks = []
            for start in range(0, n, R):
                stop = min(start + R, n)
                lo, hi = np.searchsorted(pick_node, [start, stop])
                rows = np.arange(start, stop)
                rows = np.pad(rows, (0, -len(rows) % ROW_BUCKET), constant_values=start)
                local = pick_node[lo:hi] - start  # each pick's row in the block
                blocks.append(
                    (
                        plan.add(rows),
                        plan.add(local),
                        plan.add(pick_word[lo:hi]),
                        plan.add(pick_pair[lo:hi]),
                    )
                )
            plan.decoder.append(_DecoderLevel(n, tokens, parents, blocks))
            plan.work.decoder_positions += n
        return plan

    def _run_encoder(self, plan: _Plan, ids: list[Tensor], c_all: Tensor) -> None:
        """c of every distinct source (into c_all (U,H)), one encoder step per distinct prefix:
        each level of the tree is one batched step from the parents' states."""
        h: Tensor | None = None  # (n_{t-1},H) states of the previous level's prefixes
        for enc in plan.encoder:
            if enc.parents is not None:  # each prefix continues from its parent's state
                assert h is not None
                h = h.index_select(0, ids[enc.parents])  # (n_t+pad,H)
            h = self.model.encode_step(ids[enc.tokens], h, self.kernels)[: enc.n]  # (n_t,H)
            if enc.ending is not None and enc.ending_node is not None:
                c_all[ids[enc.ending]] = h.index_select(0, ids[enc.ending_node]).float()

    def _run_decoder(
        self, plan: _Plan, ids: list[Tensor], batch: GroupedPairs, c_all: Tensor
    ) -> Tensor:
        """log p(y|x) (N,) fp32 of every pair, one decoder step and one readout per distinct
        (source, target prefix): targets under one source that begin alike ("of the", "of
        the house") share the states and the softmax of their common positions.

        Position t of pair j needs the state after y_1..y_{t-1}, so the sequences put into
        the prefix tree are [source j, y_1, ..., y_{T-1}] (the source as a pseudo-token
        after the vocabulary ids): depth 0 holds the sources (state s_0, no previous word),
        depth d the distinct (source, y_1..y_d). Every level is one batched step from the
        parents' states, then a readout whose picks are the next words of the pairs there.
        """
        dev, model, phase, kernels = self.device, self.model, self.phase, self.kernels
        V = model.config.tgt_rows
        with phase("decoder"):
            ctx = model.decoder_context(c_all)  # (U,.)
            ctx_terms = torch.cat([ctx.c_gates, ctx.c_cand], dim=1)  # (U,3H)
        logp = torch.zeros(batch.num_pairs, dtype=torch.float32, device=dev)  # (N,)
        s: Tensor | None = None  # (n_d,H) states of the previous level's nodes
        node_src = torch.empty(0, dtype=torch.int64, device=dev)  # (n_d,) each node's source
        for dec in plan.decoder:
            tokens = ids[dec.tokens]
            with phase("decoder"):
                if dec.parents is None:  # the roots: s_0 of each source, no previous word
                    node_src = tokens - V  # (n,)
                    s = ctx.s0.index_select(0, node_src)  # (n,H)
                    f = None
                else:  # (n,H), (n,E) f(y_d), (n,)
                    assert s is not None
                    step = kernels.dec_tree_step if kernels else model.decoder_tree_step
                    s, f, node_src = step(tokens, ids[dec.parents], node_src, s, ctx_terms)
            with phase("readout"):
                self._readout_level(s, f, ctx.c_out, node_src, dec, ids, logp)
            s = s[: dec.n]
            node_src = node_src[: dec.n]
        return logp

    def _readout_level(
        self,
        s: Tensor,
        f: Tensor | None,
        c_out: Tensor,
        node_src: Tensor,
        level: _DecoderLevel,
        ids: list[Tensor],
        logp: Tensor,
    ) -> None:
        """Adds ln p(word) of every pick of one tree level into logp (N,): the readout runs
        on the level's nodes in the planned blocks of readout_rows, each pick gathered from its
        node's row."""
        model = self.model
        readout = self.kernels.readout_picks if self.kernels else model.readout_picks
        for rows, local, word, pair in level.blocks:
            rows_t = ids[rows]
            s_b = s.index_select(0, rows_t)  # (R',H)
            if f is None:  # depth 0: no previous word
                f_b = s_b.new_zeros(len(rows_t), model.config.embed_size)  # (R',E)
            else:
                f_b = f.index_select(0, rows_t)  # (R',E)
            c_b = c_out.index_select(0, node_src.index_select(0, rows_t))  # (R',PM)
            picked = readout(s_b, f_b, c_b, ids[local], ids[word])  # (K,) fp32
            # A pair has one pick per level: no index repeats, so the sum is deterministic.
            logp.index_add_(0, ids[pair], picked)
