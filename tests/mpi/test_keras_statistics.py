"""Keras hook: the statistics layers keep while training (BatchNormalization's moving mean
and variance) are one state on every rank where rank 0 saves the model, and weights that
are already the same on every rank stay bit for bit; with init(average_statistics=False)
each rank keeps its own. The backend-neutral check of the averaged values is
tests/backends/test_keras_guarantees.py. Rules of mpi_helpers.py hold.
"""

from __future__ import annotations

import os
import shutil
import tempfile

import keras
import numpy as np
import pytest
from keras_helpers import keras_ml_comm_session
from mpi_helpers import Checks, comm_world

pytestmark = pytest.mark.mpi

B = 4


class Frozen(keras.layers.Layer):
    """Adds a non-trainable float64 constant: an average of equal float64 values can
    round (0.1 + 0.1 + 0.1 is not 0.3), so only a weight left alone stays 0.1."""

    def build(self, input_shape):
        self.constant = self.add_weight(
            shape=(input_shape[-1],), initializer="zeros", dtype="float64", trainable=False
        )
        self.constant.assign(np.full(input_shape[-1], 0.1))

    def call(self, x):
        return x + keras.ops.cast(self.constant, x.dtype)


def bn_model(seed: int) -> keras.Model:
    keras.utils.set_random_seed(seed)
    model = keras.Sequential(
        [
            keras.Input((3,)),
            Frozen(),
            keras.layers.BatchNormalization(momentum=0.5),
            keras.layers.Dense(2),
        ]
    )
    model.compile(optimizer=keras.optimizers.SGD(0.0), loss="mse")
    return model


def rank_data(rank: int, steps: int = 2):
    """Small integers, shifted by the rank: the ranks' batch means differ."""
    rng = np.random.default_rng(0)
    x = rng.integers(-2, 3, size=(steps * B, 3)).astype(np.float32) + rank
    y = rng.integers(-2, 3, size=(steps * B, 2)).astype(np.float32)
    return x, y


def statistics(model) -> list[np.ndarray]:
    bn = model.layers[1]
    return [np.asarray(bn.moving_mean.numpy()), np.asarray(bn.moving_variance.numpy())]


def test_checkpoint_holds_the_ranks_average():
    with keras_ml_comm_session(nthread_per_team=2, nteams=1, msglen=64) as (rank, nranks):
        checks = Checks()
        tmp = tempfile.mkdtemp(prefix="ml_comm_stats_") if rank == 0 else None
        path = comm_world().bcast(tmp and os.path.join(tmp, "ckpt.weights.h5"), root=0)
        model = bn_model(rank)
        x, y = rank_data(rank)
        checkpoint = keras.callbacks.ModelCheckpoint(path, save_weights_only=True)
        model.fit(x, y, batch_size=B, epochs=2, shuffle=False, verbose=0, callbacks=[checkpoint])
        checks.same_on_all_ranks(model.get_weights(), "weights and statistics after fit")
        constant = np.asarray(model.layers[0].constant.numpy())
        checks.equal(constant, np.full(3, 0.1), "the frozen float64 weight")
        own = [np.asarray(v) for v in comm_world().allgather(statistics(model)[0])]
        if rank == 0:
            saved = bn_model(0)
            saved.load_weights(path)
            for want, got in zip(statistics(model), statistics(saved)):
                checks.equal(got, want, "statistics in rank 0's checkpoint")
            shutil.rmtree(tmp)
        checks.true(all(np.array_equal(own[0], o) for o in own), "ranks' moving means")
        checks.finish()


def test_each_rank_keeps_its_own_when_asked():
    with keras_ml_comm_session(
        nthread_per_team=2, nteams=1, msglen=64, average_statistics=False
    ) as (rank, nranks):
        if nranks == 1:
            pytest.skip("one rank has no other rank's statistics")
        checks = Checks()
        model = bn_model(rank)
        x, y = rank_data(rank)
        model.fit(x, y, batch_size=B, epochs=1, shuffle=False, verbose=0)
        model.evaluate(x, y, batch_size=B, verbose=0)
        means = comm_world().allgather(statistics(model)[0].tobytes())
        checks.true(len(set(means)) == nranks, "each rank's moving mean is its own")
        checks.finish()
