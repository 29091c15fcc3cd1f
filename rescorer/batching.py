"""Padding id sequences into tensors, and the training data order.

``pad_flat`` pads rows of a flat ragged id array with numpy (training and scoring use it);
``pad_batch`` pads Python lists (the straightforward reference scorer and tests). ``PairArrays``
holds encoded pairs compactly (flat int32 ids plus offsets, about 4 bytes a token).
``epoch_batches`` is the training order: a seeded permutation of all pairs per epoch (uniform
sampling of unique pairs without replacement, docs/model.md §2), cut into windows of ``sort_k``
batches whose pairs are regrouped by length (GroundHog's ``sort_k_batches``, encdec.py:141-156)
so less is padded. ``bucketed_batches`` is ``train --capture``'s order: the same permutation,
its pairs grouped into a few length buckets (``length_bounds``), so that a handful of padded
shapes cover an epoch (rescorer/train/capture.py).
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch
from torch import Tensor

from rescorer.constants import PAD_ID

__all__ = [
    "PairArrays",
    "PairArraysBuilder",
    "PairBatch",
    "bucket_of",
    "bucketed_batches",
    "epoch_batches",
    "length_bounds",
    "pad_batch",
    "pad_flat",
]


def pad_batch(
    seqs: Sequence[Sequence[int]], device: torch.device | str = "cpu"
) -> tuple[Tensor, Tensor]:
    """ids (B,L) long padded with PAD_ID, and lens (B,) long, of ``seqs`` (each non-empty)."""
    lens = np.fromiter((len(s) for s in seqs), dtype=np.int64, count=len(seqs))  # (B,)
    ids = np.full((len(seqs), int(lens.max(initial=0))), PAD_ID, dtype=np.int64)  # (B,L)
    for row, seq in zip(ids, seqs, strict=True):
        row[: len(seq)] = seq
    return torch.from_numpy(ids).to(device), torch.from_numpy(lens).to(device)


class PairBatch(NamedTuple):
    """A padded batch of (source, target) id sequences, each ending with EOS."""

    src_ids: Tensor  # (B,S) long
    src_lens: Tensor  # (B,) long
    tgt_ids: Tensor  # (B,T) long
    tgt_lens: Tensor  # (B,) long

    @property
    def num_pairs(self) -> int:
        return int(self.src_ids.shape[0])

    @property
    def num_tokens(self) -> int:
        """Predicted target tokens, EOS included."""
        return int(self.tgt_lens.sum())


def pad_flat(flat: np.ndarray, offsets: np.ndarray, index: np.ndarray) -> np.ndarray:
    """Rows ``index`` (B,) of a flat id array with offsets, padded: (B,L) int64."""
    starts, ends = offsets[index], offsets[index + 1]  # (B,)
    lens = ends - starts
    width = int(lens.max(initial=0))
    cols = np.arange(width)  # (L,)
    positions = starts[:, None] + cols[None, :]  # (B,L)
    valid = cols[None, :] < lens[:, None]  # (B,L)
    picked = flat[np.minimum(positions, max(len(flat) - 1, 0))] if len(flat) else positions
    return np.where(valid, picked, PAD_ID).astype(np.int64)


@dataclass(frozen=True)
class PairArrays:
    """Encoded pairs: ``src[src_offsets[i]:src_offsets[i+1]]`` is source i (with EOS), etc."""

    src: np.ndarray  # (sum of source lengths,) int32
    src_offsets: np.ndarray  # (n+1,) int64
    tgt: np.ndarray  # (sum of target lengths,) int32
    tgt_offsets: np.ndarray  # (n+1,) int64

    def __len__(self) -> int:
        return len(self.src_offsets) - 1

    @property
    def src_lens(self) -> np.ndarray:
        return np.diff(self.src_offsets)  # (n,)

    @property
    def tgt_lens(self) -> np.ndarray:
        return np.diff(self.tgt_offsets)  # (n,)

    def batch(self, index: np.ndarray, device: torch.device | str = "cpu") -> PairBatch:
        """The pairs ``index`` (B,) as a padded batch on ``device``."""
        index = np.asarray(index, dtype=np.int64)
        src = torch.from_numpy(pad_flat(self.src, self.src_offsets, index))
        tgt = torch.from_numpy(pad_flat(self.tgt, self.tgt_offsets, index))
        src_lens = torch.from_numpy(self.src_lens[index].astype(np.int64))
        tgt_lens = torch.from_numpy(self.tgt_lens[index].astype(np.int64))
        return PairBatch(src.to(device), src_lens.to(device), tgt.to(device), tgt_lens.to(device))

    def subset(self, index: np.ndarray) -> PairArrays:
        """A new PairArrays holding the pairs ``index`` in that order."""
        builder = PairArraysBuilder()
        for i in np.asarray(index, dtype=np.int64):
            s0, s1 = self.src_offsets[i], self.src_offsets[i + 1]
            t0, t1 = self.tgt_offsets[i], self.tgt_offsets[i + 1]
            builder.add(self.src[s0:s1].tolist(), self.tgt[t0:t1].tolist())
        return builder.build()


class PairArraysBuilder:
    """Collects encoded pairs in compact arrays (no per-pair Python objects are kept)."""

    def __init__(self) -> None:
        self._src = array("i")
        self._tgt = array("i")
        self._src_off = array("q", [0])
        self._tgt_off = array("q", [0])

    def __len__(self) -> int:
        return len(self._src_off) - 1

    def add(self, src_ids: Sequence[int], tgt_ids: Sequence[int]) -> None:
        self._src.extend(src_ids)
        self._tgt.extend(tgt_ids)
        self._src_off.append(len(self._src))
        self._tgt_off.append(len(self._tgt))

    def build(self) -> PairArrays:
        return PairArrays(
            src=np.frombuffer(self._src, dtype=np.int32).copy(),
            src_offsets=np.frombuffer(self._src_off, dtype=np.int64).copy(),
            tgt=np.frombuffer(self._tgt, dtype=np.int32).copy(),
            tgt_offsets=np.frombuffer(self._tgt_off, dtype=np.int64).copy(),
        )


def epoch_batches(
    lengths: np.ndarray, batch_size: int, seed: int, epoch: int, sort_k: int = 1
) -> list[np.ndarray]:
    """The batches (arrays of pair indices) of one epoch, a pure function of its arguments.

    lengths: (n,) the length used to group pairs (e.g. max of source and target length).
    Each epoch draws a fresh permutation from (seed, epoch); every pair appears exactly once.
    With ``sort_k > 1`` each window of ``sort_k`` consecutive batches is regrouped by length
    (stable sort, then cut in order), which keeps the sample and reduces padding.
    """
    n = len(lengths)
    order = np.random.default_rng([seed, epoch]).permutation(n)
    window = batch_size * max(sort_k, 1)
    batches: list[np.ndarray] = []
    for start in range(0, n, window):
        chunk = order[start : start + window]
        if sort_k > 1:
            chunk = chunk[np.argsort(lengths[chunk], kind="stable")]
        batches.extend(chunk[i : i + batch_size] for i in range(0, len(chunk), batch_size))
    return batches


def length_bounds(lengths: np.ndarray, count: int = 4) -> np.ndarray:
    """At most ``count`` padded lengths (ascending, the last the longest of ``lengths``) that
    :func:`bucketed_batches` pads to: the lengths at equal shares of the pairs, so that each
    bucket holds about as many pairs. A pure function of ``lengths`` (every rank gets the same).
    """
    if len(lengths) == 0:
        return np.array([1], dtype=np.int64)
    shares = np.arange(1, count + 1) / count  # (count,)
    bounds = np.quantile(lengths, shares, method="higher").astype(np.int64)  # (count,)
    return np.unique(np.append(bounds, int(lengths.max())))


def bucket_of(lengths: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """The bucket (an index into ``bounds``) of each length: the shortest bound it fits."""
    return np.searchsorted(bounds, lengths, side="left")


def bucketed_batches(
    lengths: np.ndarray, batch_size: int, seed: int, epoch: int, bounds: np.ndarray
) -> list[np.ndarray]:
    """The batches of one epoch grouped by padded length, a pure function of its arguments.

    Each epoch draws a fresh permutation from (seed, epoch) as :func:`epoch_batches` does;
    its pairs, in that order, go to the bucket of their length (``bounds``: the padded
    lengths, :func:`length_bounds`), each bucket is cut into batches of ``batch_size`` (its
    last one shorter), and the batches of all buckets are shuffled together by (seed, epoch).
    Every pair appears exactly once; a batch padded to its bucket's bound has one of
    len(bounds) shapes (a short last batch is padded with empty rows by the trainer:
    rescorer/train/capture.py). The list is the same on every rank, so distributed.py's
    slicing (rank r takes batch W*u + r) applies unchanged.
    """
    n = len(lengths)
    order = np.random.default_rng([seed, epoch]).permutation(n)  # (n,)
    buckets = bucket_of(lengths[order], bounds)  # (n,)
    batches: list[np.ndarray] = []
    for bucket in range(len(bounds)):
        members = order[buckets == bucket]  # the permutation's order kept
        batches.extend(members[i : i + batch_size] for i in range(0, len(members), batch_size))
    shuffle = np.random.default_rng([seed, epoch, 1]).permutation(len(batches))
    return [batches[i] for i in shuffle]
