"""Sparse gradients (tf.IndexedSlices, e.g. of an Embedding) averaged over the ranks
and handed to the optimizer still sparse, as Keras gives them to it in one process.

Keras's optimizers update only the rows named in an IndexedSlices (Adam's moments of
the other rows stay as they are), so making the gradient dense would train differently
from one process over the global batch. One process's gradient of the global batch is
the concatenation of the ranks' slices, each scaled by 1/N: that is what the optimizer
gets here, rank 0's rows first (the order of the global batch's rows). The slices'
values and indices travel as two allgathers of the core (ml_comm.tensorflow.allgather),
on the model's team, so only the N*k slices cross the wire; the ranks may hold
different numbers of slices.
"""

from __future__ import annotations

import tensorflow as tf

from .... import tensorflow as tf_binding


def is_sparse(grad) -> bool:
    return isinstance(grad, tf.IndexedSlices)


def gathered(grad: tf.IndexedSlices, team: int, nranks: int) -> tf.IndexedSlices:
    """The global batch's IndexedSlices: every rank's slices in rank order, values / N."""
    values = tf_binding.allgather(grad.values, team)
    indices = tf_binding.allgather(grad.indices, team)
    return tf.IndexedSlices(values / tf.cast(nranks, values.dtype), indices, grad.dense_shape)
