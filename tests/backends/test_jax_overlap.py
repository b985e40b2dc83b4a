"""Keras's JAX train step with the average overlapping backprop
(ml_comm/keras/backend/jax/overlap.py, ml_comm/jax/ffi/overlap.cc): the gradients
submitted during backprop train as one process on the global batch, a weight the loss
does not use keeps its value, an optimizer that changes the gradients before `apply`
still trains as one process, and a rank whose compiled step fails halfway through
backprop fails every rank's step, after which the ranks train in step again.

    KERAS_BACKEND=jax timeout 300 .venv-jax/bin/mpiexec -n 3 .venv-jax/bin/python -P \
        -m pytest -q --with-mpi -p no:cacheprovider tests/backends/test_jax_overlap.py
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
    pytest.mark.skipif(keras.backend.backend() != "jax", reason="Keras's JAX backend only"),
]


@pytest.fixture(scope="module")
def session():
    comm_world().barrier()
    mk.init(nthread_per_team=2, nteams=1, msglen=256)
    yield mc.get_rank(), mc.get_nranks()
    mk.finalize()


def overlapped() -> int:
    from ml_comm.jax import handler

    return handler.overlapped_steps()


class Scaled(keras.layers.Layer):
    """x @ kernel + bias, and a weight `extra` the output never uses; `fail_at`: the
    training step at which backprop through this layer raises (a host callback that
    fails inside the compiled step)."""

    def __init__(self, units, fail_at=None, **kwargs):
        super().__init__(**kwargs)
        self.units, self.fail_at = units, fail_at

    def build(self, shape):
        self.kernel = self.add_weight((shape[-1], self.units), initializer="glorot_uniform")
        self.bias = self.add_weight((self.units,), initializer="zeros")
        self.extra = self.add_weight((self.units,), initializer="ones", name="extra")

    def call(self, x, training=False):
        y = keras.ops.matmul(x, self.kernel) + self.bias
        return _failing_in_backprop(y, self.fail_at) if training and self.fail_at else y


def _failing_in_backprop(y, fail_at: int):
    import jax

    calls = [0]

    def check(grad):
        calls[0] += 1
        if calls[0] == fail_at:
            raise RuntimeError("this rank's backprop failed")
        return grad

    @jax.custom_vjp
    def identity(v):
        return v

    def backward(_, grad):
        shape = jax.ShapeDtypeStruct(grad.shape, grad.dtype)
        return (jax.experimental.io_callback(check, shape, grad),)

    identity.defvjp(lambda v: (v, None), backward)
    return identity(y)


class HalvingSGD(keras.optimizers.SGD):
    """SGD that halves the gradients before its apply: apply gets other arrays than
    backprop's."""

    def stateless_apply(self, optimizer_variables, grads, trainable_variables):
        halved = [None if g is None else g * 0.5 for g in grads]
        return super().stateless_apply(optimizer_variables, halved, trainable_variables)


def halving_model_of(seed: int) -> keras.Model:
    return model_of(seed, optimizer=HalvingSGD(0.125))


def model_of(seed: int, first: Scaled | None = None, optimizer=None) -> keras.Model:
    keras.utils.set_random_seed(seed)
    model = keras.Sequential(
        [keras.Input((3,)), first or Scaled(4), keras.layers.Dense(4), keras.layers.Dense(2)]
    )
    model.compile(optimizer=optimizer or keras.optimizers.SGD(0.125), loss="mse")
    return model


def test_fit_overlapped_equals_one_process(session):
    rank, nranks = session
    if nranks == 1:
        pytest.skip("one rank averages nothing")
    trains_as_one_process(rank, nranks, 5, 0, model_of, overlapped)


def test_a_weight_the_loss_does_not_use_keeps_its_value(session):
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


def test_gradients_changed_before_apply_average_after_backprop(session):
    rank, nranks = session
    if nranks == 1:
        pytest.skip("one rank averages nothing")
    trains_as_one_process(rank, nranks, 2, 3, halving_model_of, overlapped)


def test_a_rank_failing_in_backprop_fails_every_rank(session):
    rank, nranks = session
    if nranks == 1:
        pytest.skip("one rank has no other rank to fail")
    checks = Checks()
    model = model_of(0, Scaled(4, fail_at=2 if rank == nranks - 1 else None))
    x, y = int_data(3 * B)
    if rank == nranks - 1:
        checks.raises(Exception, model.fit, x, y, batch_size=B, verbose=0, words=("backprop",))
    else:
        checks.raises(mc.MLCommError, model.fit, x, y, batch_size=B, verbose=0)
    checks.finish()
    trains_as_one_process(rank, nranks, 2, 7, model_of, overlapped)  # in step again
