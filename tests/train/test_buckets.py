"""Batches bucketed by padded length (train --capture): every pair once per epoch whatever the
buckets, a few shapes, a pure function of (seed, epoch), and the ranks' slices disjoint."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import SLICE
from test_step import real_pairs

from rescorer.batching import bucket_of, bucketed_batches, length_bounds


def lengths_of_slice() -> np.ndarray:
    pairs = real_pairs(SLICE, n=2090)
    return np.maximum(pairs.src_lens, pairs.tgt_lens)  # (n,)


@pytest.mark.parametrize("count", [1, 2, 4, 8])
@pytest.mark.parametrize("batch_size", [1, 7, 64, 5000])
def test_every_pair_once_per_epoch_whatever_the_buckets(count: int, batch_size: int) -> None:
    lengths = lengths_of_slice()
    bounds = length_bounds(lengths, count)
    assert len(bounds) <= count + 1 and bounds[-1] == lengths.max()
    for epoch in (0, 1):
        batches = bucketed_batches(lengths, batch_size, seed=3, epoch=epoch, bounds=bounds)
        seen = np.concatenate(batches)
        assert np.array_equal(np.sort(seen), np.arange(len(lengths)))  # each pair exactly once
        assert all(1 <= len(b) <= batch_size for b in batches)
        # a batch's pairs share a bucket: its padded shape is that bucket's bound
        shapes = set()
        for b in batches:
            buckets = set(bucket_of(lengths[b], bounds).tolist())
            assert len(buckets) == 1
            shapes.add(int(bounds[buckets.pop()]))
        assert len(shapes) <= len(bounds)  # a handful of shapes cover the epoch
        # at most one short batch per bucket
        assert sum(len(b) < batch_size for b in batches) <= len(bounds)


def test_few_shapes_and_little_padding_on_real_pairs() -> None:
    lengths = lengths_of_slice()
    bounds = length_bounds(lengths, 4)
    assert 2 <= len(bounds) <= 5, bounds
    batches = bucketed_batches(lengths, 64, seed=1, epoch=0, bounds=bounds)
    padded = sum(len(b) * int(bounds[bucket_of(lengths[b[:1]], bounds)[0]]) for b in batches)
    # padding every batch to the longest pair would cost len * max; the buckets cost less
    assert padded < 0.9 * len(lengths) * int(lengths.max())


def test_a_pure_function_of_seed_and_epoch_and_the_ranks_disjoint() -> None:
    lengths = lengths_of_slice()
    bounds = length_bounds(lengths)
    first = bucketed_batches(lengths, 16, seed=1, epoch=2, bounds=bounds)
    again = bucketed_batches(lengths, 16, seed=1, epoch=2, bounds=bounds)
    other = bucketed_batches(lengths, 16, seed=1, epoch=3, bounds=bounds)
    assert all(np.array_equal(a, b) for a, b in zip(first, again, strict=True))
    assert not all(np.array_equal(a, b) for a, b in zip(first, other, strict=False))
    # distributed.py: of each group of W consecutive batches rank r takes the r-th
    world = 3
    ranks = [[first[g + r] for g in range(0, len(first) - world + 1, world)] for r in range(world)]
    taken = np.concatenate([np.concatenate(r) for r in ranks])
    assert len(np.unique(taken)) == len(taken)  # no pair on two ranks
