"""Keras fit on a team with 16-bit values on the wire (config_team after mk.init):
every rank ends with the same weights, each update a 16-bit-rounded average of the
gradients, and the run is close to the float32 wire's but not equal to it (the
gradients did travel as 16 bits). The rules of mpi_helpers.py hold."""

from __future__ import annotations

import contextlib
import os

import keras
import numpy as np
import pytest
import tensorflow as tf
from mpi_helpers import CHUNK_BYTES, SCALED_THRESHOLDS, Checks, comm_world

import ml_comm as mc
import ml_comm.keras as mk

pytestmark = pytest.mark.mpi

with contextlib.suppress(RuntimeError):
    tf.config.threading.set_inter_op_parallelism_threads(2)
    tf.config.threading.set_intra_op_parallelism_threads(1)


@pytest.fixture(scope="module")
def keras_session():
    comm_world().barrier()
    os.environ.update(SCALED_THRESHOLDS)  # 8 KiB of gradients take the ring
    try:
        mk.init(nthread_per_team=2, nteams=1, msglen=64, chunk_bytes=CHUNK_BYTES)
    finally:
        for name in SCALED_THRESHOLDS:
            del os.environ[name]
    try:
        yield mc.get_rank(), mc.get_nranks()
    finally:
        mk.finalize()


def fit(rank: int, nranks: int, compression: str) -> list[np.ndarray]:
    mc.config_team(0, mc.ALG_AUTO, 0, 0, compression=compression)
    keras.utils.set_random_seed(rank)  # different initial weights: rank 0's are broadcast
    model = keras.Sequential(
        [keras.Input((32,)), keras.layers.Dense(64, activation="tanh"), keras.layers.Dense(4)]
    )  # 2112 + 260 parameters: the kernel's gradient (8 KiB) takes the ring
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64 * nranks, 32)).astype(np.float32)
    y = rng.standard_normal((64 * nranks, 4)).astype(np.float32)
    mine = slice(rank, None, nranks)
    model.fit(x[mine], y[mine], batch_size=8, epochs=2, shuffle=False, verbose=0)
    return model.get_weights()


def test_fit_with_bf16_on_the_wire(keras_session):
    rank, nranks = keras_session
    c = Checks()
    try:
        wired = fit(rank, nranks, "bf16")
        plain = fit(rank, nranks, "none")
    finally:
        mc.config_team(0, mc.ALG_AUTO, 0, 0, compression="none")
    c.same_on_all_ranks(wired, "weights after fit with bf16 on the wire")
    c.true(all(np.isfinite(w).all() for w in wired), "non-finite weights")
    gap = max(float(np.max(np.abs(a - b))) for a, b in zip(wired, plain))
    c.true(gap < 0.05, f"bf16 wire far from float32 wire: {gap}")
    if nranks > 1:
        c.true(gap > 0, "bf16 wire gave the float32 wire's weights: nothing was compressed")
    c.finish()
