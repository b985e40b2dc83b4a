"""Helpers for the TensorFlow integration tests (tests/mpi/test_tf_*.py).

The rules of mpi_helpers.py hold here too: every rank makes the same collective calls
(ml_comm ops, mpi4py) in the same order, and checks are recorded in a `Checks` object
whose `finish()` fails the test on every rank at once. A TensorFlow op of ml_comm is a
collective: every rank must run the same graphs, traced the same way, in the same order.

Three ways of running the same computation, named by MODES:

* "eager": ops run one by one (mc.gradients runs one fused op per dtype);
* "function": inside tf.function (one submit/wait op pair per gradient, a keyed group);
* "v1": a tf.compat.v1 graph run by a tf.compat.v1.Session; the graph is made with
  `tf.Graph().as_default()`, so eager mode stays on for every other test.
"""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
import tensorflow as tf
from ml_comm._core import lib
from mpi_helpers import CHUNK_BYTES, MSGLEN, NTEAMS, NTHREAD_PER_TEAM, ml_comm_session

from ml_comm.tensorflow.errors import typed

# 4 ranks share 2 cores: keep TensorFlow's own thread pools small. This must happen
# before TensorFlow runs anything; if something already did, keep its settings.
with contextlib.suppress(RuntimeError):
    tf.config.threading.set_inter_op_parallelism_threads(2)
    tf.config.threading.set_intra_op_parallelism_threads(1)

MODES = ["eager", "function", "v1"]


@contextlib.contextmanager
def tf_ml_comm_session(
    nthread_per_team=NTHREAD_PER_TEAM, nteams=NTEAMS, msglen=MSGLEN, chunk_bytes=CHUNK_BYTES
):
    """ml_comm initialised with framework="tensorflow" (thresholds scaled down with
    the chunk size as in mpi_helpers.ml_comm_session), finalized on exit."""
    with ml_comm_session(
        nthread_per_team, nteams, msglen, chunk_bytes, framework="tensorflow"
    ) as session:
        yield session


def module_session_fixture(**kwargs):
    """A module-scoped fixture: `tf_session = module_session_fixture()` in a test module."""

    @pytest.fixture(scope="module")
    def fixture():
        with tf_ml_comm_session(**kwargs) as s:
            yield s

    return fixture


def tf_dtype(dtype) -> tf.DType:
    return tf.as_dtype(np.dtype(dtype))


def to_numpy(value):
    """A tensor (eager) or a fetched value as a NumPy array; None stays None."""
    if value is None:
        return None
    if hasattr(value, "numpy"):
        value = value.numpy()
    return np.asarray(value)  # a 0-d result comes back as a NumPy scalar


def run_in_mode(mode: str, fn, runs, static_shapes: bool = True, shape_log=None):
    """Run fn(list_of_tensors) -> list (entries may be None) in `mode`.

    runs: a list of runs, each a list of NumPy arrays (the same shapes and dtypes in
    every run). The graph modes build the graph once and execute it once per run,
    so a graph's ops are checked on repeated execution too. static_shapes=False
    gives the graph modes inputs of unknown shape (tf.function input_signature /
    v1 placeholders with shape None).

    shape_log: a list that receives, in the graph modes, (input static shapes,
    output static shapes) of the traced call.

    Returns one list of NumPy arrays (or None) per run.
    """
    first = runs[0]
    specs = [
        tf.TensorSpec(a.shape if static_shapes else [None] * a.ndim, tf_dtype(a.dtype))
        for a in first
    ]

    def traced(tensors):
        outs = fn(list(tensors))
        if shape_log is not None:
            shape_log.append(
                (
                    [t.shape for t in tensors],
                    [None if o is None else o.shape for o in outs],
                )
            )
        return outs

    results = []
    if mode == "eager":
        for arrays in runs:
            outs = fn([tf.constant(a) for a in arrays])
            results.append([to_numpy(o) for o in outs])
    elif mode == "function":
        f = tf.function(traced, input_signature=[specs])
        for arrays in runs:
            outs = f([tf.constant(a) for a in arrays])
            results.append([to_numpy(o) for o in outs])
    elif mode == "v1":
        graph = tf.Graph()
        with graph.as_default():
            placeholders = [
                tf.compat.v1.placeholder(s.dtype, shape=s.shape if static_shapes else None)
                for s in specs
            ]
            outs = traced(placeholders)
            fetch = [o for o in outs if o is not None]
        with tf.compat.v1.Session(graph=graph) as sess:
            for arrays in runs:
                got = iter(sess.run(fetch, dict(zip(placeholders, arrays))))
                results.append([None if o is None else to_numpy(next(got)) for o in outs])
    else:
        raise ValueError(mode)
    return results


def check_kind(c, error, tf_class: type, kind: type, what: str) -> None:
    """`error`, raised by an ml_comm op, is TensorFlow's `tf_class`, and ml_comm reads its
    kind: typed(error) is both `kind` (with the core's status) and `tf_class`."""
    if error is None:
        return  # c.raises recorded that nothing was raised
    c.true(isinstance(error, tf_class), f"{what}: {type(error).__name__}, want {tf_class}")
    converted = typed(error)
    c.true(isinstance(converted, kind), f"{what}: typed as {type(converted)}, want {kind}")
    c.true(isinstance(converted, tf_class), f"{what}: typed error is no {tf_class}")
    want = getattr(lib, kind.status_name)
    c.true(getattr(converted, "status", None) == want, f"{what}: status, want {want}")
    c.true(str(converted) == str(error), f"{what}: the message changed")
