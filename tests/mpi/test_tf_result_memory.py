"""Where the TensorFlow op's results live when the caller still holds the gradients
(ml_comm/tensorflow/ops/result_memory.cc): memory that earlier results gave back, never
memory a live result still uses, and exact averages in it every time."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from mpi_helpers import Checks, expected_average, make_input
from tf_helpers import module_session_fixture, to_numpy

import ml_comm as mc

pytestmark = pytest.mark.mpi

tf_session = module_session_fixture()

# One result above the op's pooled size (256 KiB), one below it.
SHAPES = [(300, 257), (1000,)]


def address(tensor: tf.Tensor) -> int:
    """Where a CPU tensor's data is: NumPy's view of an eager tensor shares its buffer."""
    return np.asarray(tensor).ctypes.data


@pytest.mark.parametrize("mode", ["eager", "function"])
def test_results_reuse_memory_once_collected(tf_session, mode):
    s = tf_session
    if s.nranks == 1:
        pytest.skip("one rank's average is the gradient itself: no op, no result memory")
    c = Checks()
    arrays = [make_input(s.rank, shape, np.float32, 7 + i) for i, shape in enumerate(SHAPES)]
    want = [expected_average(shape, np.float32, s.nranks, 7 + i) for i, shape in enumerate(SHAPES)]
    held = [tf.constant(a) for a in arrays]  # the caller keeps them: no forwarding

    def call(xs):
        return mc.gradients(list(xs))

    fn = tf.function(call) if mode == "function" else call
    first = fn(held)
    large_first = address(first[0])
    second = fn(held)  # first is alive: other memory
    c.true(address(second[0]) != large_first, "a live result's memory was handed out again")
    for got in (first, second):
        for i, (g, w) in enumerate(zip(got, want)):
            c.equal(to_numpy(g), w, f"result {i}")
    del first
    third = fn(held)
    c.true(address(third[0]) == large_first, "a collected result's memory was not reused")
    for i, (g, w) in enumerate(zip(third, want)):
        c.equal(to_numpy(g), w, f"result {i} in reused memory")
    for a, h in zip(arrays, held):
        c.equal(to_numpy(h), a, "the caller's gradient is untouched")
    c.finish()
