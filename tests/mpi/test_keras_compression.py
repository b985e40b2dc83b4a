"""Keras fit on a team with 16-bit values on the wire (config_team after mk.init):
every rank ends with the same weights, and one update is as close to the float32
wire's as the 16-bit roundings of the average allow (the bound that
test_compression.py derives for the NumPy path) but not equal to it (the gradients did
travel as 16 bits). The rules of mpi_helpers.py hold."""

from __future__ import annotations

import contextlib

import keras
import numpy as np
import pytest
import tensorflow as tf
from keras_helpers import keras_ml_comm_session
from mpi_helpers import CHUNK_BYTES, SCALED_THRESHOLDS, Checks, comm_world

import ml_comm as mc
import ml_comm.keras as mk

pytestmark = pytest.mark.mpi

with contextlib.suppress(RuntimeError):
    tf.config.threading.set_inter_op_parallelism_threads(2)
    tf.config.threading.set_intra_op_parallelism_threads(1)


@pytest.fixture(scope="module")
def keras_session():
    # SCALED_THRESHOLDS: 8 KiB of gradients take the ring.
    with keras_ml_comm_session(
        SCALED_THRESHOLDS, nthread_per_team=2, nteams=1, msglen=64, chunk_bytes=CHUNK_BYTES
    ) as session:
        yield session


LR = 0.05


def one_step(rank: int, nranks: int, compression: str):
    """(weights after one SGD step of fit, this rank's gradients at the start): rank 0's
    initial weights, each rank's own batch of 8."""
    mc.config_team(0, mc.ALG_AUTO, 0, 0, compression=compression)
    keras.utils.set_random_seed(rank)  # different initial weights: rank 0's are broadcast
    model = keras.Sequential(
        [keras.Input((32,)), keras.layers.Dense(64, activation="tanh"), keras.layers.Dense(4)]
    )  # 2112 + 260 parameters: the kernel's gradient (8 KiB) takes the ring
    model.compile(optimizer=keras.optimizers.SGD(LR), loss="mse")
    mk.broadcast_weights(model)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((8 * nranks, 32)).astype(np.float32)
    y = rng.standard_normal((8 * nranks, 4)).astype(np.float32)
    mine = slice(rank, None, nranks)
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x[mine]) - y[mine]))
    grads = [g.numpy() for g in tape.gradient(loss, model.trainable_variables)]
    model.fit(x[mine], y[mine], batch_size=8, epochs=1, shuffle=False, verbose=0)
    return model.get_weights(), grads


def test_fit_with_bf16_on_the_wire(keras_session):
    """One update: the bf16 wire's weights differ from the float32 wire's by at most the
    learning rate times the roundings that tests/mpi/test_compression.py allows an
    average (2 N (ulp_bf16 * mean |g_r| + 2^-24) per element, ulp_bf16 = 2^-8), plus the
    float32 rounding of each run's update (2^-23 |w|)."""
    rank, nranks = keras_session
    c = Checks()
    try:
        wired, grads = one_step(rank, nranks, "bf16")
        plain, _ = one_step(rank, nranks, "none")
    finally:
        mc.config_team(0, mc.ALG_AUTO, 0, 0, compression="none")
    c.same_on_all_ranks(wired, "weights after fit with bf16 on the wire")
    c.true(all(np.isfinite(w).all() for w in wired), "non-finite weights")
    every = comm_world().allgather(grads)
    ulp = 2.0**-8
    for i, (a, b) in enumerate(zip(wired, plain)):
        scale = np.abs(np.stack([g[i] for g in every])).sum(axis=0) / nranks
        bound = LR * 2 * nranks * (ulp * scale + 2.0**-24) + 2.0**-23 * np.abs(b)
        gap = np.abs(a - b)
        c.true(
            bool(np.all(gap <= bound)),
            f"weight {i}: bf16 wire off the float32 wire by {float(np.max(gap)):.3g}, more "
            f"than the roundings allow (worst excess {float(np.max(gap - bound)):.3g})",
        )
    if nranks > 1:
        c.true(
            any(not np.array_equal(a, b) for a, b in zip(wired, plain)),
            "bf16 wire gave the float32 wire's weights: nothing was compressed",
        )
    c.finish()
