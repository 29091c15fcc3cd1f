"""A chunk's plan for the scorer's fast path (rescorer/score/trees.py runs it on the device):
both prefix trees as the index arrays the device needs, made on the host with numpy alone. No
torch here, so a parse worker can make it (``score --workers``): the main process, which feeds
the device, only uploads it."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from rescorer.score.pairs import GroupedPairs, prefix_tree

PLAN_ROW_BUCKET = 64  # readout blocks are padded to a multiple of this (model.encdec.ROW_BUCKET)
ROW_MULTIPLE = 8  # rows of a prefix-tree level are padded to a multiple of this


@dataclass
class Work:
    """What the model has done so far (per-pair work, without padding)."""

    source_tokens: int = 0  # tokens of the distinct sources, EOS included
    encoder_steps: int = 0  # encoder steps run: source_tokens, or distinct prefixes if shared
    decoder_positions: int = 0  # positions run: target tokens (EOS included), or distinct
    # (source, target prefix) nodes when target prefixes are shared


@dataclass
class EncoderLevel:
    """One level of the source prefix tree, as indices into the chunk's uploaded arrays."""

    n: int  # distinct prefixes at this depth
    tokens: int  # (n+pad,) their last tokens
    parents: int | None  # (n+pad,) their parents' rows (None at depth 0)
    ending_node: int | None  # (e,) the rows of the sources that end here
    ending: int | None  # (e,) those sources


@dataclass
class DecoderLevel:
    """One level of the (source, target prefix) tree, as indices into the uploaded arrays."""

    n: int  # nodes at this depth
    tokens: int  # (n+pad,) words, or V + source at depth 0
    parents: int | None  # (n+pad,) parents' rows (None at depth 0)
    blocks: list[tuple[int, int, int, int]]  # per readout block: rows, local, word, pair


@dataclass
class Plan:
    """A chunk's host work for the fast path: both prefix trees, as the index arrays the device
    needs (``arrays``, all int64, uploaded in one copy) and the levels that use them."""

    encoder: list[EncoderLevel] = field(default_factory=list)
    decoder: list[DecoderLevel] = field(default_factory=list)
    arrays: list[np.ndarray] = field(default_factory=list)
    work: Work = field(default_factory=Work)

    def add(self, array: np.ndarray) -> int:
        self.arrays.append(np.ascontiguousarray(array, dtype=np.int64))
        return len(self.arrays) - 1


def plan_chunk(
    batch: GroupedPairs,
    tgt_rows: int,
    readout_rows: int,
    encoder: bool = True,
    decoder: bool = True,
    row_multiple: int = ROW_MULTIPLE,
    row_bucket: int = PLAN_ROW_BUCKET,
) -> Plan:
    """The host's share of the fast path for one chunk: the source prefix tree (with
    ``encoder``) and the (source, target prefix) tree with the readout's picks (with
    ``decoder``), as index arrays."""
    plan = Plan()
    if encoder:
        plan.work.source_tokens = int(np.diff(batch.src_off).sum())
        for level in prefix_tree(batch.src_ids, batch.src_off):
            n = len(level.tokens)
            # Rows padded to a multiple of 8 (pad rows repeat prefix 0 and are dropped):
            # MKL's fp32 products of 5-7 and 9-11 rows give other last bits with 1 and 2
            # threads, and a deep level can have any row count; the bytes must not depend
            # on the threads.
            pad = -n % row_multiple
            ends = len(level.ending) > 0
            plan.encoder.append(
                EncoderLevel(
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
    V = tgt_rows
    seq = np.empty(len(batch.tgt_ids), dtype=np.int64)  # (sum T_j,)
    seq[1:] = batch.tgt_ids[:-1]
    seq[batch.tgt_off[:-1]] = V + batch.pair_src  # each sequence starts with its source
    R = readout_rows
    for depth, level in enumerate(prefix_tree(seq, batch.tgt_off)):
        n = len(level.tokens)
        pad = -n % row_multiple  # as in the encoder (pad rows are dropped)
        tokens = plan.add(np.pad(level.tokens, (0, pad), mode="edge"))  # a valid source
        parents = plan.add(np.pad(level.parents, (0, pad))) if depth else None
        # Picks: pair j, at its node of this level, scores its word y_{depth+1}; grouped
        # by node, in blocks of R rows (padded to a multiple of PLAN_ROW_BUCKET with copies of
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
            rows = np.pad(rows, (0, -len(rows) % row_bucket), constant_values=start)
            local = pick_node[lo:hi] - start  # each pick's row in the block
            blocks.append(
                (
                    plan.add(rows),
                    plan.add(local),
                    plan.add(pick_word[lo:hi]),
                    plan.add(pick_pair[lo:hi]),
                )
            )
        plan.decoder.append(DecoderLevel(n, tokens, parents, blocks))
        plan.work.decoder_positions += n
    return plan
