"""Grouped allreduces in tf.compat.v1 graphs, where a Session runs only what a fetch
needs: fetching one output of a group, or a later group after an earlier one that this
run does not fetch, completes on every rank (each group runs whole, in one order)."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from hvd_helpers import hvd_session  # noqa: F401
from mpi_helpers import Checks

import ml_comm.horovod.tensorflow as hvd

pytestmark = pytest.mark.mpi


def test_runs_of_part_of_what_was_built(hvd_session):  # noqa: F811
    rank, n = hvd_session
    c = Checks()
    with tf.Graph().as_default(), tf.compat.v1.Session() as sess:
        first = hvd.grouped_allreduce([tf.constant([1.0, rank]), tf.constant([2.0])], op=hvd.Sum)
        second = hvd.grouped_allreduce(
            [tf.constant([rank], tf.int32), tf.constant([3, 4], tf.int32)], op=hvd.Sum
        )
        c.equal(sess.run(second[1]), np.array([3 * n, 4 * n], np.int32), "one output of a group")
        c.equal(sess.run(first[0]), np.array([n, n * (n - 1) / 2], np.float32), "an earlier group")
        c.equal(sess.run(second[0]), np.array([n * (n - 1) // 2], np.int32), "the other output")
    c.finish()


def test_gradients_of_one_output_at_a_time(hvd_session):  # noqa: F811
    """Horovod's test idiom: tf.gradients of each output of a grouped allreduce, each
    fetched on its own (the upstream gradients of the other outputs are zeros)."""
    rank, n = hvd_session
    c = Checks()
    with tf.Graph().as_default(), tf.compat.v1.Session() as sess:
        tensors = [tf.constant(np.full(4, rank + k, np.float32)) for k in range(3)]
        summed = hvd.grouped_allreduce(tensors, op=hvd.Sum)
        for k, (s, t) in enumerate(zip(summed, tensors)):
            grad = tf.gradients(s, t, tf.ones([4]))[0]
            c.equal(sess.run(grad), np.full(4, n, np.float32), f"gradient of output {k}")
    c.finish()
