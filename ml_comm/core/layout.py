"""The order of a fused reduction's tensors, for every backend: weights (2-D and more) in
reverse list order, then vectors (biases, normalization scales and offsets, scalars) in
reverse list order.

Backprop produces the last layers' gradients first, so reverse order lets the first
segments start while it runs; but a segment is reduced only once every tensor before it
has arrived, and TensorFlow computes vector gradients (BiasAddGrad, a batch norm's scale
and offset) off backprop's critical path, often only once it has ended. A Dense bias
first in the layout held the whole reduction back until then, so that no communication
overlapped backprop.

A list that is all there at once (NumPy) gains too: each large tensor starts a segment of
its own (the core's aligned starts), so a run of small tensors between two large ones is
a short segment of its own, copied into the fusion buffer and back. Together at the end
they fill whole segments (ResNet-50's list: 54 weights, 160 vectors).

The vectors are a small share of the bytes. Ranks (numbers of dimensions) alone decide,
so every rank makes the same layout; an unknown rank (None) counts as a weight.
"""

from __future__ import annotations

from collections.abc import Sequence


def fused_order(ranks: Sequence[int | None], idx: Sequence[int]) -> list[int]:
    """idx (list indices of tensors of ranks `ranks`, in list order) in layout order."""
    weights, vectors = [], []
    for rank, i in zip(ranks, idx, strict=True):
        (vectors if rank is not None and rank <= 1 else weights).append(i)
    return weights[::-1] + vectors[::-1]
