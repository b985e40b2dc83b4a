"""Sparse gradients (tf.IndexedSlices, e.g. of an Embedding) averaged over the ranks
and handed to the optimizer still sparse, as Keras gives them to it in one process.

Keras's optimizers update only the rows named in an IndexedSlices (Adam's moments of
the other rows stay as they are), so making the gradient dense would train differently
from one process over the global batch. One process's gradient of the global batch is
the concatenation of the ranks' slices, each scaled by 1/N: that is what the optimizer
gets here, rank 0's rows first (the order of the global batch's rows).

The concatenation is an allgather built from the average that every request already
uses, so it joins the step's one reduction: each rank puts its k slices in its own
block of a zero-filled [N, k, ...] stack; the average of the stacks holds every rank's
values divided by N (a sum of one value and zeros, rounded once). Indices travel the
same way as float64 (exact below 2^50) and are multiplied back by N and rounded. Every
rank must hold the same number k of slices (the same batch shape: fit cuts the ranks'
data to equal batches); a different k fails as any differently-shaped request does.
An allgather request of the core would carry only the N*k slices, not the zeros.
"""

from __future__ import annotations

import tensorflow as tf


def is_sparse(grad) -> bool:
    return isinstance(grad, tf.IndexedSlices)


def stacks(grad: tf.IndexedSlices, rank: int, nranks: int) -> tuple[tf.Tensor, tf.Tensor]:
    """(values, indices) of this rank in its block of the [N, k, ...] stacks to average."""
    values = tf.convert_to_tensor(grad.values)
    indices = tf.cast(grad.indices, tf.float64)
    blocks = [[rank, nranks - rank - 1]]
    values = tf.pad(values[None], blocks + [[0, 0]] * values.shape.rank)
    indices = tf.pad(indices[None], blocks + [[0, 0]])
    return values, indices


def gathered(
    grad: tf.IndexedSlices, values: tf.Tensor, indices: tf.Tensor, nranks: int
) -> tf.IndexedSlices:
    """The global batch's IndexedSlices from the averaged stacks."""
    flat_values = tf.reshape(values, tf.concat([[-1], tf.shape(values)[2:]], 0))
    flat_indices = tf.cast(tf.round(tf.reshape(indices, [-1]) * nranks), grad.indices.dtype)
    return tf.IndexedSlices(flat_values, flat_indices, grad.dense_shape)
