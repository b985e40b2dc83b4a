"""Horovod 0.28.1 names that Keras 3 scripts use: PartialDistributedOptimizer (local layers
keep their own gradients, divided by the rank count), BroadcastGlobalVariablesCallback's
local_variables (left as each rank has them), SyncBatchNormalization taking Horovod's
Keras 2 arguments with one warning. Integer-valued inputs, exact checks."""

from __future__ import annotations

import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf
from hvd_helpers import hvd_session  # noqa: F401
from mpi_helpers import Checks

import ml_comm.horovod.keras as hvd_keras
import ml_comm.horovod.tensorflow as hvd_tf
import ml_comm.horovod.tensorflow.keras as hvd

pytestmark = pytest.mark.mpi


def two_dense_layers(rank: int) -> keras.Model:
    init = keras.initializers.Constant(float(rank + 1))
    model = keras.Sequential(
        [
            keras.Input((2,)),
            keras.layers.Dense(2, kernel_initializer=init, bias_initializer=init),
            keras.layers.Dense(1, kernel_initializer=init, bias_initializer=init),
        ]
    )
    return model


def test_partial_distributed_optimizer(hvd_session):  # noqa: F811
    """SGD with learning rate 1: the shared layer moves by the average of the ranks'
    gradients, the local layer by its own gradient divided by the rank count."""
    rank, n = hvd_session
    c = Checks()
    model = two_dense_layers(rank)
    local = model.layers[0]
    opt = hvd_keras.PartialDistributedOptimizer(keras.optimizers.SGD(1.0), local_layers=[local])
    grads = [tf.fill(v.shape, float(rank + 1)) for v in model.trainable_variables]
    before = [v.numpy() for v in model.trainable_variables]
    opt.apply(grads, model.trainable_variables)
    mean = sum(q + 1 for q in range(n)) / n
    for v, b in zip(model.trainable_variables, before):
        is_local = any(v is w for w in local.trainable_variables)
        step = (rank + 1) / n if is_local else mean
        c.equal(v.numpy(), b - step, f"{'local' if is_local else 'shared'} {v.path}")
    with pytest.raises(ValueError, match="Keras layers"):
        hvd_keras.PartialDistributedOptimizer(keras.optimizers.SGD(1.0), local_layers=["x"])
    c.finish()


def test_broadcast_callback_keeps_local_variables(hvd_session):  # noqa: F811
    rank, n = hvd_session
    c = Checks()
    model = two_dense_layers(rank)
    model.compile(optimizer=keras.optimizers.SGD(0.0), loss="mse")
    local = list(model.layers[0].variables)
    callback = hvd.callbacks.BroadcastGlobalVariablesCallback(n - 1, local_variables=local)
    model.fit(np.ones((2, 2)), np.ones((2, 1)), epochs=1, verbose=0, callbacks=[callback])
    for v in model.variables:
        mine = any(v is w for w in local)
        want = np.full(v.shape, float(rank + 1 if mine else n), np.float32)
        c.equal(v.numpy(), want, f"{'local' if mine else 'broadcast'} {v.path}")
    with pytest.raises(ValueError, match="variables"):
        hvd.callbacks.BroadcastGlobalVariablesCallback(0, local_variables=[1.0])
    c.finish()


def test_sync_batch_normalization_takes_keras2_arguments(hvd_session):  # noqa: F811
    rank, n = hvd_session
    c = Checks()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = hvd_tf.SyncBatchNormalization(axis=1, fused=False, renorm=False)
        hvd_tf.SyncBatchNormalization(axis=1, fused=False)
    named = [w for w in caught if "fused" in str(w.message)]
    c.true(len(named) == 1, f"one warning for the Keras 2 arguments, got {len(named)}")
    x = tf.constant([[float(rank), 2.0 * rank]])
    out = first(x, training=True).numpy()
    ranks = np.arange(n, dtype=np.float64)
    column = [ranks, 2 * ranks]
    want = [(col[rank] - col.mean()) / np.sqrt(col.var() + first.epsilon) for col in column]
    c.true(np.allclose(out[0], want, atol=1e-5), f"normalised over every rank: {out} vs {want}")
    for bad in ({"fused": True}, {"renorm": True}, {"virtual_batch_size": 2}):
        with pytest.raises(NotImplementedError, match="no Keras 3 equivalent"):
            hvd_tf.SyncBatchNormalization(**bad)
    c.finish()
