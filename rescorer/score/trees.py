"""The scorer's fast path over prefix trees (steps 1 to 4 of rescorer/score/scorer.py's
docstring) for one chunk. The host's share: both prefix trees (the distinct sources; the
(source, target prefix) nodes with the readout's picks) planned as the int64 index arrays the
device needs (:class:`Plan`; the scorer uploads them in one copy). The device's share: one
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

import torch
from torch import Tensor

from rescorer.model.encdec import ROW_BUCKET, EncoderDecoder, Kernels
from rescorer.score.graphs import LevelSteps
from rescorer.score.pairs import GroupedPairs
from rescorer.score.plan import (
    PLAN_ROW_BUCKET,
    ROW_MULTIPLE,
    DecoderLevel,
    Plan,
    Work,
    plan_chunk,
)

assert ROW_BUCKET == PLAN_ROW_BUCKET  # the plan's blocks come in the readout's row buckets

__all__ = ["ROW_MULTIPLE", "Plan", "PrefixTreePath", "Work"]


class PrefixTreePath:
    """The prefix-tree steps of :class:`~rescorer.score.scorer.Scorer`, whose ``__init__`` sets
    these attributes."""

    model: EncoderDecoder
    device: torch.device
    kernels: Kernels | None
    phase: Callable[[str], AbstractContextManager[None]]
    readout_rows: int
    steps: LevelSteps | None  # bucketed shapes on static buffers (graphs.py), else None

    def _plan(self, batch: GroupedPairs, encoder: bool, decoder: bool) -> Plan:
        """The host's share of the fast path for one chunk (:func:`plan_chunk`)."""
        rows, readout = self.model.config.tgt_rows, self.readout_rows
        return plan_chunk(batch, rows, readout, encoder, decoder, ROW_MULTIPLE, ROW_BUCKET)

    def _run_encoder(self, plan: Plan, ids: list[Tensor], c_all: Tensor) -> None:
        """c of every distinct source (into c_all (U,H)), one encoder step per distinct prefix:
        each level of the tree is one batched step from the parents' states."""
        if self.steps is not None:
            self._run_encoder_steps(plan, ids, c_all, self.steps)
            return
        h: Tensor | None = None  # (n_{t-1},H) states of the previous level's prefixes
        for enc in plan.encoder:
            if enc.parents is not None:  # each prefix continues from its parent's state
                assert h is not None
                h = h.index_select(0, ids[enc.parents])  # (n_t+pad,H)
            h = self.model.encode_step(ids[enc.tokens], h, self.kernels)[: enc.n]  # (n_t,H)
            if enc.ending is not None and enc.ending_node is not None:
                c_all[ids[enc.ending]] = h.index_select(0, ids[enc.ending_node]).float()

    def _run_decoder(
        self, plan: Plan, ids: list[Tensor], batch: GroupedPairs, c_all: Tensor
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
                elif self.steps is not None:  # bucketed: (n',H), (n',E), (n',)
                    assert s is not None
                    s, f, node_src = self._decoder_steps(dec, ids, node_src, s, ctx_terms)
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
        level: DecoderLevel,
        ids: list[Tensor],
        logp: Tensor,
    ) -> None:
        """Adds ln p(word) of every pick of one tree level into logp (N,): the readout runs
        on the level's nodes in the planned blocks of readout_rows, each pick gathered from its
        node's row."""
        if self.steps is not None:
            self._readout_steps(s, f, c_out, node_src, level, ids, logp)
            return
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

    # ------------------------------------------- bucketed shapes, static buffers (graphs.py)
    def _run_encoder_steps(
        self, plan: Plan, ids: list[Tensor], c_all: Tensor, steps: LevelSteps
    ) -> None:
        """_run_encoder on a bucketed plan: each level's inputs gathered into the steps'
        static buffers, the step run (or replayed) there."""
        h: Tensor | None = None  # (m',H) the previous level's states, m' its bucket
        for enc in plan.encoder:
            tokens = ids[enc.tokens]  # (n',) n' the level's bucket
            rows = len(tokens)
            tok_in, h_in = steps.inputs("encoder", rows)  # (n',), (n',H)
            tok_in.copy_(tokens)
            if enc.parents is None:
                h_in.zero_()  # h_0 = 0
            else:
                assert h is not None
                torch.index_select(h, 0, ids[enc.parents], out=h_in)
            (h,) = steps.run("encoder", rows)  # (n',H)
            if enc.ending is not None and enc.ending_node is not None:
                c_all[ids[enc.ending]] = h.index_select(0, ids[enc.ending_node]).float()

    def _decoder_steps(
        self, dec: DecoderLevel, ids: list[Tensor], node_src: Tensor, s: Tensor, terms: Tensor
    ) -> tuple[Tensor, Tensor, Tensor]:
        """decoder_tree_step on a bucketed level (n' rows) from the previous level's node_src
        (m',) and states s (m',H), with terms (U,3H): the new states (n',H), f (n',E) and the
        nodes' sources (n',)."""
        steps = self.steps
        assert steps is not None and dec.parents is not None
        tokens, parents = ids[dec.tokens], ids[dec.parents]  # (n',), (n',)
        rows = len(tokens)
        tok_in, s_in, terms_in = steps.inputs("decoder", rows)  # (n',), (n',H), (n',3H)
        src = node_src.index_select(0, parents)  # (n',)
        tok_in.copy_(tokens)
        torch.index_select(s, 0, parents, out=s_in)
        torch.index_select(terms, 0, src, out=terms_in)
        s_new, f = steps.run("decoder", rows)  # (n',H), (n',E)
        return s_new, f, src

    def _readout_steps(
        self,
        s: Tensor,
        f: Tensor | None,
        c_out: Tensor,
        node_src: Tensor,
        level: DecoderLevel,
        ids: list[Tensor],
        logp: Tensor,
    ) -> None:
        """_readout_level with each block (R' rows and K' picks, buckets) on the steps' static
        buffers; the K real picks' ln p added into logp outside the graph."""
        steps = self.steps
        assert steps is not None
        for rows, local, word, pair in level.blocks:
            rows_t, local_t, pairs = ids[rows], ids[local], ids[pair]  # (R',), (K',), (K,)
            R, K = len(rows_t), len(local_t)
            s_in, f_in, c_in, local_in, word_in = steps.inputs("readout", R, K)
            torch.index_select(s, 0, rows_t, out=s_in)  # (R',H)
            if f is None:  # depth 0: no previous word
                f_in.zero_()  # (R',E)
            else:
                torch.index_select(f, 0, rows_t, out=f_in)
            torch.index_select(c_out, 0, node_src.index_select(0, rows_t), out=c_in)  # (R',PM)
            local_in.copy_(local_t)
            word_in.copy_(ids[word])
            (picked,) = steps.run("readout", R, K)  # (K',) fp32
            logp.index_add_(0, pairs, picked[: len(pairs)])
