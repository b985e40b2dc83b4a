"""ml_comm.horovod's training wrappers as Horovod defines them, exact inputs: one
reduction per step (k micro-steps with backward_passes_per_step=k, summed locally and
divided by k only with average_aggregated_gradients), optimizer.iterations counting every
micro-step, Sum vs Average, gradient_predivide_factor, None and sparse gradients, the
same optimizer instance back, LossScaleOptimizer reduced before its finite check, and a
Keras fit with Horovod's callbacks ending with identical weights on every rank. The rules
of mpi_helpers.py hold."""

from __future__ import annotations

import os
import tempfile

import keras
import numpy as np
import pytest
import tensorflow as tf
from hvd_helpers import hvd_session  # noqa: F401
from mpi_helpers import Checks

import ml_comm as mc
import ml_comm.horovod.tensorflow as hvd
import ml_comm.horovod.tensorflow.keras as hvdk

pytestmark = pytest.mark.mpi


def linear_model():
    """y = x @ w + b on 2 inputs, w = 0, b = 0: loss = sum(y) has gradient sum(x) for w and
    the batch size for b, so every expected value is an exact integer sum."""
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1, kernel_initializer="zeros")])
    return model


def batch(rank, step):
    return tf.constant([[1.0 + rank + step, 2.0 * (rank + 1)]])


def reductions_since(before: int) -> int:
    """The team's reductions since `before`: an eager one after them makes the team
    record every earlier one first (graph-mode groups are counted as the next opens)."""
    hvd.allreduce(tf.constant([0.0]))
    return mc.team_stats(0)["calls"] - before - (1 if hvd.size() > 1 else 0)


def grads_of(model, x):
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(model(x))
    return tape.gradient(loss, model.trainable_variables)


@pytest.mark.parametrize("steps,average_aggregated", [(1, False), (3, False), (3, True)])
@pytest.mark.parametrize("op", ["Sum", "Average"])
def test_backward_passes_per_step(hvd_session, steps, average_aggregated, op):  # noqa: F811
    rank, n = hvd_session
    c = Checks()
    model = linear_model()
    sgd = keras.optimizers.SGD(1.0)
    opt = hvd.DistributedOptimizer(
        sgd,
        backward_passes_per_step=steps,
        op=getattr(hvd, op),
        average_aggregated_gradients=average_aggregated,
    )
    c.true(opt is sgd, "the same optimizer instance is returned")

    @tf.function
    def step(x):
        opt.apply_gradients(zip(grads_of(model, x), model.trainable_variables))

    before = mc.team_stats(0)["calls"]
    micro = 2 * steps
    for s in range(micro):
        step(batch(rank, s))
        c.true(int(opt.iterations.numpy()) == s + 1, f"iterations after {s + 1} micro-steps")
    calls = reductions_since(before)
    c.true(calls == (2 if n > 1 else 0), f"{calls} reductions for 2 updates")
    # Expected kernel: -(sum over updates of the reduced, aggregated gradient).
    grad_w = np.zeros(2)
    for s in range(micro):
        for r in range(n):
            grad_w += [1.0 + r + s, 2.0 * (r + 1)]
    if op == "Average":
        grad_w /= n
    if average_aggregated:
        grad_w /= steps
    c.equal(model.get_weights()[0], (-grad_w).reshape(2, 1).astype(np.float32), "kernel")
    c.finish()


@pytest.mark.parametrize("sparse_as_dense", [False, True])
def test_tape_none_sparse_and_predivide(hvd_session, sparse_as_dense):  # noqa: F811
    rank, n = hvd_session
    c = Checks()
    table = tf.Variable(tf.zeros((4, 2)))
    unused = tf.Variable(1.0)
    dense = tf.Variable([1.0, 1.0])
    with tf.GradientTape() as tape:
        rows = tf.gather(table, [rank % 4, 3])
        loss = tf.reduce_sum(rows) * (rank + 1) + tf.reduce_sum(dense) * (rank + 1)
    dtape = hvd.DistributedGradientTape(tape, op=hvd.Sum, sparse_as_dense=sparse_as_dense)
    g_table, g_unused, g_dense = dtape.gradient(loss, [table, unused, dense])
    c.true(g_unused is None, "an unconnected variable's gradient stays None")
    c.true(isinstance(g_table, tf.IndexedSlices) != sparse_as_dense, "sparse or densified")
    want = np.zeros((4, 2), np.float32)
    for r in range(n):
        want[r % 4] += r + 1
        want[3] += r + 1
    c.equal(tf.convert_to_tensor(g_table).numpy(), want, f"table sparse_as_dense={sparse_as_dense}")
    s = float(sum(r + 1 for r in range(n)))
    c.equal(g_dense.numpy(), np.array([s, s], np.float32), "dense gradient, Sum")
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(dense) * 4.0 * (rank + 1)
    (g,) = hvd.DistributedGradientTape(tape, gradient_predivide_factor=2.0).gradient(loss, [dense])
    avg = 4.0 * sum(r + 1 for r in range(n)) / n
    c.equal(g.numpy(), np.array([avg, avg], np.float32), "predivide 2: still the average")
    c.raises(
        ValueError,
        hvd.DistributedGradientTape,
        tape,
        op=hvd.Sum,
        gradient_predivide_factor=2.0,
        words=["predivide"],
    )
    c.finish()


def test_partial_tape_keeps_local_layers(hvd_session):  # noqa: F811
    rank, n = hvd_session
    c = Checks()
    shared = keras.layers.Dense(1, kernel_initializer="ones", use_bias=False)
    local = keras.layers.Dense(1, kernel_initializer="ones", use_bias=False)
    x = tf.constant([[float(rank + 1)]])
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(local(shared(x)))
    tape = hvd.PartialDistributedGradientTape(tape, op=hvd.Sum, local_layers=[local])
    g_shared, g_local = tape.gradient(loss, shared.trainable_weights + local.trainable_weights)
    c.equal(g_shared.numpy(), np.array([[sum(r + 1.0 for r in range(n))]], np.float32), "shared")
    c.equal(g_local.numpy(), np.array([[(rank + 1.0) / n]], np.float32), "local, scaled by 1/size")
    c.finish()


def test_loss_scale_optimizer_skips_together(hvd_session):  # noqa: F811
    rank, n = hvd_session
    c = Checks()
    v = tf.Variable([0.0])
    lso = keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(1.0), initial_scale=1.0)
    opt = hvd.DistributedOptimizer(lso, op=hvd.Sum)
    # The last rank alone has an infinite gradient: every rank must skip the step.
    bad = np.inf if rank == n - 1 else 1.0
    opt.apply_gradients([(tf.constant([bad]), v)])
    c.equal(v.numpy(), np.array([0.0], np.float32), "non-finite on one rank: every rank skips")
    opt.apply_gradients([(tf.constant([1.0]), v)])
    # The skip halved the scale to 0.5, which the next (summed) step divides by.
    c.equal(v.numpy(), np.array([-2.0 * n], np.float32), "then a summed step, unscaled")
    c.finish()


def test_v1_optimizer_compute_gradients(hvd_session):  # noqa: F811
    rank, n = hvd_session
    c = Checks()
    v = tf.Variable([0.0, 0.0])
    sgd = tf.compat.v1.train.GradientDescentOptimizer(1.0)
    opt = hvd.DistributedOptimizer(sgd, op=hvd.Sum)
    c.true(opt is sgd, "the same v1 optimizer instance")
    pairs = opt.compute_gradients(lambda: tf.reduce_sum(v) * (rank + 1), var_list=[v])
    s = float(sum(r + 1 for r in range(n)))
    c.equal(pairs[0][0].numpy(), np.array([s, s], np.float32), "summed v1 gradient")
    c.finish()


def test_keras_fit_with_callbacks(hvd_session):  # noqa: F811
    rank, n = hvd_session
    c = Checks()
    keras.utils.set_random_seed(rank)  # different initial weights: rank 0's are broadcast
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3), keras.layers.Dense(1)])
    opt = hvdk.DistributedOptimizer(keras.optimizers.SGD(0.01 * n))
    model.compile(optimizer=opt, loss="mse", experimental_run_tf_function=False)
    rng = np.random.default_rng(rank)
    x = rng.integers(-2, 3, (32, 4)).astype(np.float32)
    y = x.sum(axis=1, keepdims=True)
    callbacks = [
        hvdk.callbacks.BroadcastGlobalVariablesCallback(0),
        hvdk.callbacks.MetricAverageCallback(),
        hvdk.callbacks.LearningRateWarmupCallback(
            initial_lr=0.01 * n, warmup_epochs=1, momentum_correction=False
        ),
    ]
    history = model.fit(x, y, batch_size=8, epochs=3, callbacks=callbacks, verbose=0)
    losses = history.history["loss"]
    c.true(losses[-1] < losses[0], f"loss falls: {losses}")
    c.same_on_all_ranks(model.get_weights(), "weights after fit")
    c.same_on_all_ranks([np.array(losses)], "averaged losses")
    c.true(len(opt.variables()) == len(opt.variables), "optimizer.variables() as a method")
    c.true(float(opt.lr.numpy()) == float(opt.learning_rate.numpy()), "optimizer.lr")
    if rank == 0:  # evaluate on rank 0 alone: per rank, as in Horovod, no collective
        model.evaluate(x, y, verbose=0)
    # Resumed from a saved model, with its optimizer (Keras compiles a loaded model only
    # where compile is Keras's own: the wrap that drops experimental_run_tf_function is).
    path = os.path.join(tempfile.mkdtemp(), "model.keras")
    model.save(path)
    for load in (keras.models.load_model, hvdk.load_model):
        loaded = load(path)
        name = f"{load.__module__}.load_model"
        c.true(getattr(loaded, "optimizer", None) is not None, f"{name} keeps the optimizer")
    loaded.fit(x, y, batch_size=8, epochs=1, verbose=0)  # hvdk's: averaged on every rank
    c.same_on_all_ranks(loaded.get_weights(), "weights after the resumed fit")
    c.finish()


@pytest.mark.parametrize("optimizer,correction", [("adam", None), ("sgd", None), ("sgd", True)])
def test_momentum_correction_warns_only_when_asked_for_and_meaningful(
    hvd_session,  # noqa: F811
    optimizer,
    correction,
):
    """The default says nothing, nor does an optimizer without momentum; momentum_correction
    =True with SGD's momentum warns once, on rank 0 only."""
    import warnings

    rank, n = hvd_session
    c = Checks()
    opt = keras.optimizers.Adam(0.01) if optimizer == "adam" else keras.optimizers.SGD(0.01, 0.9)
    model = linear_model()
    model.compile(optimizer=hvdk.DistributedOptimizer(opt), loss="mse")
    asked = {} if correction is None else {"momentum_correction": correction}  # None: default
    x = np.ones((8, 2), np.float32)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warmup = hvdk.callbacks.LearningRateWarmupCallback(
            initial_lr=0.01, warmup_epochs=1, **asked
        )
        model.fit(x, x[:, :1], batch_size=4, epochs=2, callbacks=[warmup], verbose=0)
    said = [str(w.message) for w in caught if "momentum_correction" in str(w.message)]
    warned = correction is True and optimizer == "sgd" and rank == 0
    c.true(len(said) == (1 if warned else 0), f"warnings: {said}")
    c.finish()
