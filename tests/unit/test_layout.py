"""The fused layout (ml_comm/core/layout.py), which the NumPy and TensorFlow backends share:
weights in reverse list order, then vectors in reverse list order."""

from __future__ import annotations

import random

import pytest

from ml_comm.core.layout import fused_order


def test_example():
    # conv kernel, its bias, a BN scale, a scalar, a dense kernel, an unknown rank, its bias
    ranks = [4, 1, 1, 0, 2, None, 1]
    assert fused_order(ranks, range(7)) == [5, 4, 0, 6, 3, 2, 1]


def test_keeps_the_given_indices():
    # a dtype group holds some of the list's indices: those come back, laid out
    assert fused_order([1, 2, 3], [4, 9, 11]) == [11, 9, 4]


@pytest.mark.parametrize("seed", range(20))
def test_weights_first_each_kind_in_reverse_list_order(seed):
    rng = random.Random(seed)
    n = rng.randrange(0, 40)
    ranks = [rng.choice([None, 0, 1, 2, 3, 4]) for _ in range(n)]
    idx = sorted(rng.sample(range(100), n))
    order = fused_order(ranks, idx)
    assert sorted(order) == idx
    rank_of = dict(zip(idx, ranks))
    is_vector = [rank_of[i] is not None and rank_of[i] <= 1 for i in order]
    assert is_vector == sorted(is_vector), "a weight after a vector"
    weights = [i for i, v in zip(order, is_vector) if not v]
    vectors = [i for i, v in zip(order, is_vector) if v]
    assert weights == sorted(weights, reverse=True)
    assert vectors == sorted(vectors, reverse=True)


def test_lengths_must_match():
    with pytest.raises(ValueError):
        fused_order([1, 2], [0])
