"""ML_COMM_CHECK_FINITE=1 with a Keras LossScaleOptimizer (mixed_float16): an overflow
of the scaled gradients, which the optimizer would skip, fails fit on every rank, and
the error says that the check and loss scaling do not mix. The rules of mpi_helpers.py
hold."""

from __future__ import annotations

import contextlib

import keras
import numpy as np
import pytest
import tensorflow as tf
from keras_helpers import keras_ml_comm_session
from mpi_helpers import Checks

import ml_comm as mc

pytestmark = pytest.mark.mpi

with contextlib.suppress(RuntimeError):
    tf.config.threading.set_inter_op_parallelism_threads(2)
    tf.config.threading.set_intra_op_parallelism_threads(1)


@pytest.fixture(scope="module")
def keras_session():
    with keras_ml_comm_session(
        {"ML_COMM_CHECK_FINITE": "1"}, nthread_per_team=1, nteams=1, msglen=64
    ) as session:
        yield session


def test_overflow_under_loss_scaling_names_the_check(keras_session):
    r, n = keras_session
    if n == 1:
        pytest.skip("at one rank the TensorFlow ops return their input without the core")
    c = Checks()
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3), keras.layers.Dense(2)])
        opt = keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.01), initial_scale=2.0**40)
        model.compile(optimizer=opt, loss="mse")
        x = np.full((8, 4), 100.0, np.float32)
        y = np.zeros((8, 2), np.float32)
        e = c.raises(
            mc.NonFiniteError,
            lambda: model.fit(x, y, batch_size=4, epochs=1, verbose=0),
            words=("ML_COMM_CHECK_FINITE=1",),
        )
        c.true("LossScaleOptimizer" in str(e) and "NaN or Inf" in str(e), str(e))
    finally:
        keras.mixed_precision.set_global_policy("float32")
    c.finish()
