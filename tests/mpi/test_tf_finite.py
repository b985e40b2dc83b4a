"""ML_COMM_CHECK_FINITE=1 with TensorFlow: a NaN or Inf in one rank's gradient fails
the step on every rank (tf.errors.InternalError naming the rank and the tensor's
place in the fused reduction: gradients are laid out last first), both for the fused
op of eager mode and for the keyed groups of tf.function, whose reduction then waits
for all of its gradients before it starts."""

from __future__ import annotations

import os

import numpy as np
import pytest
import tensorflow as tf
from mpi_helpers import Checks, expected_average, make_input
from tf_helpers import tf_ml_comm_session, to_numpy

import ml_comm as mc

pytestmark = pytest.mark.mpi


@pytest.fixture(scope="module")
def tf_session():
    os.environ["ML_COMM_CHECK_FINITE"] = "1"
    try:
        with tf_ml_comm_session() as s:
            os.environ.pop("ML_COMM_CHECK_FINITE")
            yield s
    finally:
        os.environ.pop("ML_COMM_CHECK_FINITE", None)


@pytest.mark.parametrize("mode", ["eager", "function"])
def test_nan_in_one_rank_fails_everywhere(tf_session, mode):
    if tf_session.nranks == 1:
        pytest.skip("at one rank the TensorFlow ops return their input without the core")
    c = Checks()
    last = tf_session.nranks - 1
    shapes = [(3, 4), (500,), (7,)]
    good = [make_input(tf_session.rank, s, np.float32, i) for i, s in enumerate(shapes)]
    bad = [g.copy() for g in good]
    if tf_session.rank == last:
        bad[0][1, 2] = np.nan  # gradients[0]: last in the layout, member 2

    def run(arrays):
        fn = lambda: mc.gradients([tf.constant(a) for a in arrays])  # noqa: E731
        return fn() if mode == "eager" else tf.function(fn)()

    e = c.raises(tf.errors.InternalError, run, bad, words=("NaN or Inf",))
    c.true(f"rank {last} tensor 2" in str(e), str(e))
    out = run(good)  # the team still works, and finite inputs pass
    for i, s in enumerate(shapes):
        want = expected_average(s, np.float32, tf_session.nranks, i)
        c.equal(to_numpy(out[i]), want, f"{mode}: gradients[{i}]")
    c.finish()
