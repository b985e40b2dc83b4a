"""Errors of the TensorFlow binding: unsupported dtypes and bad arguments raise a
Python exception on every rank, before any collective starts, and the team keeps
working afterwards."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from mpi_helpers import Checks, expected_average, make_input
from tf_helpers import MODES, module_session_fixture, to_numpy

import ml_comm as mc

pytestmark = pytest.mark.mpi

tf_session = module_session_fixture()

UNSUPPORTED = [tf.uint32, tf.uint64, tf.complex64, tf.bool, tf.string]
# bool is moved (broadcast) but never reduced: only gradients refuse it.
APIS = {tf.bool: (mc.gradients,)}


def unsupported_value(dtype: tf.DType):
    if dtype == tf.string:
        return tf.constant(["a", "b"])
    if dtype == tf.bool:
        return tf.constant([True, False])
    return tf.cast(tf.constant([1, 2, 3]), dtype)


def call_in_mode(mode, fn, make_inputs):
    """Call fn(inputs) eagerly, while tracing a tf.function, or while building a
    tf.compat.v1 graph; exceptions raised while tracing/building propagate."""
    if mode == "eager":
        return fn(make_inputs())
    if mode == "function":
        return tf.function(lambda: fn(make_inputs()))()
    with tf.Graph().as_default():
        return fn(make_inputs())


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", UNSUPPORTED, ids=[d.name for d in UNSUPPORTED])
def test_unsupported_dtype_raises_type_error(tf_session, mode, dtype):
    c = Checks()
    good = make_input(tf_session.rank, (5,), np.float32, 1)

    def alone():
        return [unsupported_value(dtype)]

    def after_good():  # a supported tensor first: nothing may have started
        return [tf.constant(good), unsupported_value(dtype)]

    for inputs in (alone, after_good):
        for api in APIS.get(dtype, (mc.gradients, mc.broadcast)):
            c.raises(TypeError, call_in_mode, mode, api, inputs, words=(dtype.name,))
    # the team still works: a reduction after the errors is exact
    out = mc.gradients([tf.constant(good)])[0]
    c.equal(to_numpy(out), expected_average((5,), np.float32, tf_session.nranks, 1), "after")
    c.finish()


def test_bad_arguments(tf_session):
    c = Checks()
    x = tf.constant(make_input(tf_session.rank, (3,), np.float32, 1))
    c.raises(TypeError, mc.gradients, x, words=("list",))
    c.raises(ValueError, mc.gradients, [x], team=2, words=("team",))
    c.raises(ValueError, mc.gradients, [x], team=-1, words=("team",))
    c.raises(ValueError, mc.broadcast, [x], root=tf_session.nranks, words=("root",))
    c.raises(ValueError, mc.broadcast, [x], root=-1, words=("root",))
    out = mc.gradients([x])[0]
    c.equal(to_numpy(out), expected_average((3,), np.float32, tf_session.nranks, 1), "after")
    c.finish()
