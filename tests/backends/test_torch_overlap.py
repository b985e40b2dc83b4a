"""Keras's torch train step with the average overlapping backprop
(ml_comm/keras/backend/torch/overlap.py): the gradients handed over during backprop
train as one process on the global batch, a weight without gradients on every rank
keeps its value, one with gradients on some ranks only fails on every rank naming it,
and a rank whose step raises halfway through backprop fails every rank's step, after
which the ranks train in step again.

    KERAS_BACKEND=torch timeout 300 .venv-torch/bin/mpiexec -n 3 .venv-torch/bin/python -P \
        -m pytest -q --with-mpi -p no:cacheprovider tests/backends/test_torch_overlap.py
"""

from __future__ import annotations

import keras
import numpy as np
import pytest
from keras_data import B, int_data, trains_as_one_process, weights
from mpi_helpers import Checks, comm_world

import ml_comm as mc
import ml_comm.keras as mk

pytestmark = [
    pytest.mark.mpi,
    pytest.mark.skipif(keras.backend.backend() != "torch", reason="Keras's torch backend only"),
]


@pytest.fixture(scope="module")
def session():
    comm_world().barrier()
    mk.init(nthread_per_team=2, nteams=1, msglen=256)
    yield mc.get_rank(), mc.get_nranks()
    mk.finalize()


def overlapped() -> int:
    from ml_comm.keras.backend.torch import overlap

    return overlap.overlapped_steps()


class Scaled(keras.layers.Layer):
    """x @ kernel + bias, and a weight `extra` that the output uses where `uses_extra`
    (times 0: a gradient of zeros, but a gradient); `fail_at`: the training call at
    which backprop through this layer raises."""

    def __init__(self, units, uses_extra=False, fail_at=None, **kwargs):
        super().__init__(**kwargs)
        self.units, self.uses_extra, self.fail_at, self.calls = units, uses_extra, fail_at, 0

    def build(self, shape):
        self.kernel = self.add_weight((shape[-1], self.units), initializer="glorot_uniform")
        self.bias = self.add_weight((self.units,), initializer="zeros")
        self.extra = self.add_weight((self.units,), initializer="ones", name="extra")

    def call(self, x, training=False):
        y = keras.ops.matmul(x, self.kernel) + self.bias
        if self.uses_extra:
            y = y + self.extra * 0.0
        if training:
            self.calls += 1
            if self.calls == self.fail_at:
                y.register_hook(_fail_in_backprop)
        return y


def _fail_in_backprop(grad):
    raise RuntimeError("this rank's backprop failed")


def model_of(seed: int, first: Scaled | None = None, lr: float = 0.125) -> keras.Model:
    keras.utils.set_random_seed(seed)
    model = keras.Sequential(
        [keras.Input((3,)), first or Scaled(4), keras.layers.Dense(4), keras.layers.Dense(2)]
    )
    model.compile(optimizer=keras.optimizers.SGD(lr), loss="mse")
    return model


def test_fit_overlapped_equals_one_process(session):
    rank, nranks = session
    if nranks == 1:
        pytest.skip("one rank averages nothing")
    trains_as_one_process(rank, nranks, 5, 0, model_of, overlapped)


def test_a_weight_no_rank_uses_keeps_its_value(session):
    rank, nranks = session
    if nranks == 1:
        pytest.skip("one rank averages nothing")
    checks = Checks()
    first = Scaled(4)
    model = model_of(rank, first)
    x, y = int_data(2 * B, seed=rank)
    before = overlapped()
    model.fit(x, y, batch_size=B, shuffle=False, verbose=0)
    checks.true(overlapped() - before == 2, f"{overlapped() - before} of 2 steps overlapped")
    checks.equal(np.asarray(first.extra), np.ones(4, np.float32), "the unused weight")
    checks.true(not np.array_equal(np.asarray(first.bias), np.zeros(4)), "the bias trained")
    checks.same_on_all_ranks(weights(model), "weights")
    checks.finish()


def test_a_weight_some_ranks_use_fails_on_every_rank_naming_it(session):
    rank, nranks = session
    if nranks == 1:
        pytest.skip("one rank has no other rank to differ from")
    checks = Checks()
    model = model_of(0, Scaled(4, uses_extra=rank == 0, name="scaled"))
    x, y = int_data(B)
    checks.raises(
        mc.MismatchError, model.fit, x, y, batch_size=B, verbose=0, words=("scaled/extra",)
    )
    checks.finish()
    trains_as_one_process(rank, nranks, 2, 7, model_of, overlapped)  # in step again


def test_a_rank_failing_in_backprop_fails_every_rank(session):
    rank, nranks = session
    if nranks == 1:
        pytest.skip("one rank has no other rank to fail")
    checks = Checks()
    model = model_of(0, Scaled(4, fail_at=2 if rank == nranks - 1 else None))
    x, y = int_data(3 * B)
    if rank == nranks - 1:
        checks.raises(RuntimeError, model.fit, x, y, batch_size=B, verbose=0, words=("backprop",))
    else:
        checks.raises(mc.MLCommError, model.fit, x, y, batch_size=B, verbose=0)
    checks.finish()
    trains_as_one_process(rank, nranks, 2, 7, model_of, overlapped)  # in step again
