"""Errors of the TensorFlow binding: unsupported dtypes and bad arguments raise a
Python exception on every rank, before any collective starts, and the team keeps
working afterwards; the ops' errors carry their kind (a TensorFlow code per kind of the
core's statuses, the status itself as a payload) and come out as ml_comm's classes."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from ml_comm._core import ffi, lib
from mpi_helpers import Checks, expected_average, make_input
from tf_helpers import MODES, module_session_fixture, to_numpy

import ml_comm as mc
from ml_comm.core.status import error_class
from ml_comm.tensorflow import library
from ml_comm.tensorflow.errors import status_of, typed

pytestmark = pytest.mark.mpi

tf_session = module_session_fixture()

STATUSES = dict(ffi.typeof("enum mlc_status").relements)
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
            c.raises(mc.BadArgumentTypeError, call_in_mode, mode, api, inputs, words=(dtype.name,))
    # the team still works: a reduction after the errors is exact
    out = mc.gradients([tf.constant(good)])[0]
    c.equal(to_numpy(out), expected_average((5,), np.float32, tf_session.nranks, 1), "after")
    c.finish()


def test_bad_arguments(tf_session):
    c = Checks()
    x = tf.constant(make_input(tf_session.rank, (3,), np.float32, 1))
    c.raises(mc.BadArgumentTypeError, mc.gradients, x, words=("list",))
    c.raises(mc.BadArgumentError, mc.gradients, [x], team=2, words=("team",))
    c.raises(mc.BadArgumentError, mc.gradients, [x], team=-1, words=("team",))
    c.raises(mc.BadArgumentError, mc.broadcast, [x], root=tf_session.nranks, words=("root",))
    c.raises(mc.BadArgumentError, mc.broadcast, [x], root=-1, words=("root",))
    out = mc.gradients([x])[0]
    c.equal(to_numpy(out), expected_average((3,), np.float32, tf_session.nranks, 1), "after")
    c.finish()


# The TensorFlow code of each failure status of the core. Kinds a program tells apart
# get codes of their own: ranks that disagree FailedPrecondition (as Horovod's ops), a bad
# argument on this rank InvalidArgument, a stall DeadlineExceeded, a lost rank
# Unavailable; bad values (NaN/Inf, float16 overflow) are arguments too.
TF_ERRORS = {
    "MLC_ERR_MISMATCH": tf.errors.FailedPreconditionError,
    "MLC_ERR_ARG": tf.errors.InvalidArgumentError,
    "MLC_ERR_NONFINITE": tf.errors.InvalidArgumentError,
    "MLC_ERR_OVERFLOW": tf.errors.InvalidArgumentError,
    "MLC_ERR_STALL": tf.errors.DeadlineExceededError,
    "MLC_ERR_PEER_LOST": tf.errors.UnavailableError,
    "MLC_ERR_MPI": tf.errors.InternalError,
    "MLC_ERR_NOMEM": tf.errors.ResourceExhaustedError,
    "MLC_ERR_STATE": tf.errors.CancelledError,
    "MLC_ERR_THREAD_LEVEL": tf.errors.FailedPreconditionError,
}
DISTINCT = ("MLC_ERR_MISMATCH", "MLC_ERR_ARG", "MLC_ERR_STALL", "MLC_ERR_PEER_LOST",
            "MLC_ERR_MPI", "MLC_ERR_NOMEM", "MLC_ERR_STATE")  # fmt: skip


def test_every_failure_status_has_its_tensorflow_code(tf_session):
    failures = set(STATUSES) - {"MLC_OK", "MLC_PENDING"}
    assert set(TF_ERRORS) == failures, "a status of the core without a TensorFlow code here"
    for name, tf_class in TF_ERRORS.items():
        assert library.error_code(STATUSES[name]) == tf_class(None, None, "").error_code, name
    assert len({TF_ERRORS[name] for name in DISTINCT}) == len(DISTINCT)
    assert library.error_code(lib.MLC_OK) == tf.errors.OK


@pytest.mark.parametrize("name", sorted(TF_ERRORS))
def test_an_ops_error_is_typed_by_its_status(tf_session, name):
    """An error as TensorFlow raises an op's (its class by code, the status as payload)
    becomes the class of both, with the status; the stall, which no op returns yet, too."""
    status = STATUSES[name]
    tf_class = TF_ERRORS[name]
    payloads = {library.status_payload().encode(): str(status).encode()}
    raised = tf_class(None, None, "ml_comm allreduce failed: the core's words", payloads)
    converted = typed(raised)
    assert isinstance(converted, error_class(status)) and isinstance(converted, tf_class)
    assert converted.status == status and converted.message == raised.message
    assert typed(converted) is converted
    assert status_of(tf_class(None, None, "not ml_comm's", {})) is None
    assert typed(ValueError("not TensorFlow's")).args == ("not TensorFlow's",)
