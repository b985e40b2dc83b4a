"""Keras 3 hook (ml_comm.keras): data-parallel training equals one process on the
global batch.

Every test builds a tiny model (5 -> 3 tanh -> 2, MSE, plain SGD) whose initial weights
differ on every rank, registers it with set_team, trains it on this rank's b samples of
every global batch of N*b, and compares with a model that starts from the same weights
(rank 0's, which set_team broadcast) and is trained by the same Keras call, without
ml_comm, on the whole global batches: weights within 1e-5 relative (max |w - w_ref| <=
1e-5 * max |w_ref| per variable), and the metrics that fit shows (per epoch, and per batch
with GlobalMetrics(per_batch=True)) within 1e-5 of the reference's. Inputs and targets are
small integers, so the only differences are float32 rounding. The rules of mpi_helpers.py
hold: every rank makes the same collective calls, and checks are gathered by
Checks.finish().
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile

import keras
import numpy as np
import pytest
import tensorflow as tf
from keras_helpers import keras_ml_comm_session
from mpi_helpers import CHUNK_BYTES, SCALED_THRESHOLDS, Checks, comm_world, digest

import ml_comm as mc
import ml_comm.keras as mk

pytestmark = pytest.mark.mpi

# 4 ranks share 2 cores: keep TensorFlow's own thread pools small.
with contextlib.suppress(RuntimeError):
    tf.config.threading.set_inter_op_parallelism_threads(2)
    tf.config.threading.set_intra_op_parallelism_threads(1)

D_IN, D_HIDDEN, D_OUT = 5, 3, 2
B = 4  # per-rank batch
STEPS = 3
LR = 0.05
RTOL = 1e-5


@pytest.fixture(scope="module")
def keras_session():
    """ml_comm.keras for this module: 2 teams, small segments (multi-segment path)."""
    with keras_ml_comm_session(
        SCALED_THRESHOLDS, nthread_per_team=2, nteams=2, msglen=64, chunk_bytes=CHUNK_BYTES
    ) as session:
        yield session


def global_data(nranks: int, steps: int = STEPS, seed: int = 0):
    """STEPS global batches of N*B rows: small integers, so every rank and the reference
    see exactly the same numbers."""
    rng = np.random.default_rng(seed)
    x = rng.integers(-3, 4, size=(steps * nranks * B, D_IN)).astype(np.float32)
    y = rng.integers(-3, 4, size=(steps * nranks * B, D_OUT)).astype(np.float32)
    return x, y


def shard(a: np.ndarray, rank: int, nranks: int) -> np.ndarray:
    """Rows of global batch s that rank r trains on: [s*N*B + r*B, s*N*B + (r+1)*B)."""
    steps = len(a) // (nranks * B)
    rows = [
        np.arange(s * nranks * B + rank * B, s * nranks * B + (rank + 1) * B) for s in range(steps)
    ]
    return a[np.concatenate(rows)]


def make_model(
    seed: int, built: bool = True, metrics=("mae",), checks_input: bool = False
) -> keras.Model:
    """checks_input: a first layer (no weights) that fails the step on NaN in its input."""
    keras.utils.set_random_seed(seed)
    layers = [keras.layers.Dense(D_HIDDEN, activation="tanh"), keras.layers.Dense(D_OUT)]
    if checks_input:
        layers.insert(0, keras.layers.Lambda(lambda t: tf.debugging.check_numerics(t, "input")))
    model = keras.Sequential(([keras.Input((D_IN,))] if built else []) + layers)
    model.compile(optimizer=keras.optimizers.SGD(LR), loss="mse", metrics=list(metrics))
    return model


def reference_model(weights) -> keras.Model:
    """Opted out of ml_comm (set_team(model, None)): trains on this process alone."""
    model = make_model(12345)
    mk.set_team(model, None)
    model.set_weights(weights)
    return model


def check_close(c: Checks, got, want, tag: str) -> None:
    for i, (w, ref) in enumerate(zip(got, want)):
        err = float(np.max(np.abs(w - ref)))
        scale = float(np.max(np.abs(ref)))
        c.true(
            err <= RTOL * scale,
            f"{tag}: weight {i} differs from the single-process reference by {err:.3g} "
            f"(max |w_ref| = {scale:.3g})",
        )


def check_logs_close(c: Checks, got: dict, want: dict, tag: str) -> None:
    c.true(sorted(got) == sorted(want), f"{tag}: keys {sorted(got)} != {sorted(want)}")
    for key in want:
        g, w = np.asarray(got.get(key, np.nan)), np.asarray(want[key])
        c.true(
            np.all(np.abs(g - w) <= RTOL * np.maximum(np.abs(w), 1e-3)),
            f"{tag}: {key} = {g} but the global value is {w}",
        )


def register(c: Checks, model: keras.Model, team: int, nranks: int, tag: str) -> list:
    """set_team, checking that the ranks started different and end identical; returns
    the (broadcast) initial weights."""
    digests = comm_world().allgather(digest(model.get_weights()))
    c.true(
        len(set(digests)) == nranks,
        f"{tag}: initial weights should differ on every rank before set_team",
    )
    mk.set_team(model, team)
    weights = [w.copy() for w in model.get_weights()]
    c.same_on_all_ranks(weights, f"{tag}: weights after set_team")
    return weights


class Recorder(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.batches: list[dict] = []

    def on_train_batch_end(self, batch, logs=None):
        self.batches.append(dict(logs))


def test_fit_matches_global_batch(keras_session, capsys):
    c = Checks()
    r, n = keras_session
    x, y = global_data(n)
    model = make_model(r)
    initial = register(c, model, 0, n, "fit")
    capsys.readouterr()
    rec = Recorder()
    history = model.fit(
        shard(x, r, n), shard(y, r, n), batch_size=B, epochs=2, shuffle=False,
        verbose=2, callbacks=[mk.GlobalMetrics(per_batch=True), rec],
    )  # fmt: skip
    printed = capsys.readouterr().out
    ref = reference_model(initial)
    ref_rec = Recorder()
    ref_history = ref.fit(
        x, y, batch_size=n * B, epochs=2, shuffle=False, verbose=0, callbacks=[ref_rec]
    )
    c.same_on_all_ranks(model.get_weights(), "fit: weights after training")
    c.true(mc.check_buffers_match(model.get_weights()) == 0, "fit: check_buffers_match")
    check_close(c, model.get_weights(), ref.get_weights(), "fit")
    c.true(len(rec.batches) == len(ref_rec.batches) == 2 * STEPS, "fit: batch count")
    for i, (got, want) in enumerate(zip(rec.batches, ref_rec.batches)):
        check_logs_close(c, got, want, f"fit: logs of batch {i}")
    for epoch in range(2):
        check_logs_close(
            c,
            {k: v[epoch] for k, v in history.history.items()},
            {k: v[epoch] for k, v in ref_history.history.items()},
            f"fit: logs of epoch {epoch}",
        )
    if r == 0:
        c.true("Epoch 2/2" in printed and "loss" in printed, f"rank 0 printed {printed!r}")
    else:
        c.true(printed == "", f"rank {r} should print nothing, printed {printed!r}")
    c.finish()


def test_train_on_batch(keras_session):
    c = Checks()
    r, n = keras_session
    x, y = global_data(n, seed=1)
    xs, ys = shard(x, r, n), shard(y, r, n)
    model = make_model(100 + r)
    initial = register(c, model, 1, n, "train_on_batch")
    ref = reference_model(initial)
    for s in range(STEPS):
        logs = model.train_on_batch(xs[s * B : (s + 1) * B], ys[s * B : (s + 1) * B])
        ref_logs = ref.train_on_batch(
            x[s * n * B : (s + 1) * n * B], y[s * n * B : (s + 1) * n * B]
        )
    c.true(np.all(np.isfinite(logs)) and np.all(np.isfinite(ref_logs)), "train_on_batch: logs")
    c.same_on_all_ranks(model.get_weights(), "train_on_batch: weights after training")
    check_close(c, model.get_weights(), ref.get_weights(), "train_on_batch")
    c.finish()


def mse_grads(model: keras.Model, x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x) - y))
    return tape.gradient(loss, model.trainable_variables)


@pytest.mark.parametrize("mode", ["function_apply", "eager_apply_gradients"])
def test_custom_loop(keras_session, mode):
    """A loop of the user's own: GradientTape, then optimizer.apply (in a tf.function)
    or optimizer.apply_gradients (eagerly) on the compiled model's optimizer."""
    c = Checks()
    r, n = keras_session
    x, y = global_data(n, seed=2)
    xs, ys = shard(x, r, n), shard(y, r, n)
    model = make_model(200 + r)
    initial = register(c, model, 0, n, mode)
    optimizer = model.optimizer

    def step(xb, yb):
        grads = mse_grads(model, xb, yb)
        if mode == "function_apply":
            optimizer.apply(grads, model.trainable_variables)
        else:
            optimizer.apply_gradients(zip(grads, model.trainable_variables))

    if mode == "function_apply":
        step = tf.function(step)
    ref = reference_model(initial)
    for s in range(STEPS):
        step(tf.constant(xs[s * B : (s + 1) * B]), tf.constant(ys[s * B : (s + 1) * B]))
        grads = mse_grads(ref, x[s * n * B : (s + 1) * n * B], y[s * n * B : (s + 1) * n * B])
        ref.optimizer.apply(grads, ref.trainable_variables)
    c.same_on_all_ranks(model.get_weights(), f"{mode}: weights after training")
    check_close(c, model.get_weights(), ref.get_weights(), mode)
    c.finish()


def test_traced_loop_with_restored_iterations_syncs_weights(keras_session):
    """An optimizer whose iterations are already past 0 (restored from a checkpoint, or
    trained before init), different weights on every rank, a traced custom loop: the
    first update still broadcasts rank 0's weights, and training equals the reference."""
    c = Checks()
    r, n = keras_session
    x, y = global_data(n, seed=5)
    xs, ys = shard(x, r, n), shard(y, r, n)
    model = make_model(500 + r)  # not registered: the first update syncs it
    optimizer = model.optimizer
    optimizer.build(model.trainable_variables)
    optimizer.iterations.assign(7 + r)  # as each rank's own checkpoint left it
    initial = comm_world().bcast([w.copy() for w in model.get_weights()], root=0)

    @tf.function
    def step(xb, yb):
        optimizer.apply(mse_grads(model, xb, yb), model.trainable_variables)

    ref = reference_model(initial)
    for s in range(STEPS):
        step(tf.constant(xs[s * B : (s + 1) * B]), tf.constant(ys[s * B : (s + 1) * B]))
        grads = mse_grads(ref, x[s * n * B : (s + 1) * n * B], y[s * n * B : (s + 1) * n * B])
        ref.optimizer.apply(grads, ref.trainable_variables)
    c.same_on_all_ranks(model.get_weights(), "restored iterations: weights after training")
    check_close(c, model.get_weights(), ref.get_weights(), "restored iterations")
    c.finish()


def test_lazily_built_model(keras_session):
    """A Sequential without Input is built inside the first traced step: its weights are
    broadcast in that step's graph, before the first update, and stay identical."""
    c = Checks()
    r, n = keras_session
    x, y = global_data(n, seed=3)
    model = make_model(300 + r, built=False)
    mk.set_team(model, 1)
    calls = mc.team_stats(1)["calls"]
    model.fit(shard(x, r, n), shard(y, r, n), batch_size=B, epochs=1, shuffle=False, verbose=0)
    made = mc.team_stats(1)["calls"] - calls
    # N > 1: the in-graph broadcast, the gradient reductions, the epoch's metrics. One
    # rank: only the in-graph broadcast, on the model's team (weights and vectors, a request
    # each); the averages over one rank are their inputs.
    if n > 1:
        c.true(made >= 1 + STEPS + 1, f"lazy: team 1 made {made} collectives, want >= {STEPS + 2}")
    else:
        c.true(made == 2, f"lazy: one rank made {made} collectives on team 1, want 2")
    c.same_on_all_ranks(model.get_weights(), "lazy: weights after training")
    c.true(mc.check_buffers_match(model.get_weights()) == 0, "lazy: check_buffers_match")
    c.finish()


# Keras' own h5 writer warns under NumPy 2 (keras/src/backend/tensorflow/core.py).
@pytest.mark.filterwarnings("ignore:__array__ implementation:DeprecationWarning")
def test_helpers(keras_session):
    c = Checks()
    r, n = keras_session
    # Linear scaling, and the warm-up schedule from lr to n * lr.
    c.true(mk.scale_learning_rate(0.1) == pytest.approx(0.1 * n), "scale_learning_rate")
    sched = mk.scale_learning_rate(0.1, warmup_steps=10)
    got = [float(sched(s)) for s in (0, 5, 10, 20)]
    want = [0.1, 0.1 * (1 + (n - 1) / 2), 0.1 * n, 0.1 * n]
    c.true(np.allclose(got, want, rtol=1e-6), f"warm-up schedule {got}, want {want}")
    again = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(sched))
    c.true(float(again(5)) == pytest.approx(got[1]), "WarmupSchedule round trip")
    # The checkpoint callback writes on rank 0 only.
    tmp = tempfile.mkdtemp(prefix="ml_comm_keras_") if r == 0 else None
    path = comm_world().bcast(tmp and os.path.join(tmp, "ckpt.weights.h5"), root=0)
    cb = mk.ModelCheckpoint(path, save_weights_only=True)
    c.true(
        isinstance(cb, keras.callbacks.ModelCheckpoint) == (r == 0),
        f"ModelCheckpoint on rank {r} is {type(cb).__name__}",
    )
    x, y = global_data(n, steps=1, seed=4)
    model = make_model(400)  # the same weights everywhere; registered on team 0
    mk.set_team(model)
    c.true(mk.get_team(model) == 0, "get_team")
    model.fit(shard(x, r, n), shard(y, r, n), batch_size=B, epochs=1, verbose=0, callbacks=[cb])
    comm_world().barrier()
    if r == 0:
        c.true(os.path.exists(path), "rank 0 wrote no checkpoint")
        shutil.rmtree(tmp)
    # Misuse fails at once, with a message that says what to do.
    uncompiled = keras.Sequential([keras.Input((D_IN,)), keras.layers.Dense(1)])
    c.raises(mc.MLCommError, mk.set_team, uncompiled, words=["compile"])
    c.raises(ValueError, mk.set_team, model, 7, words=["team"])
    c.finish()


def test_pipelined_team(keras_session):
    """train_on_batch on a team pipelined for 3 of 4 steps (ksteps=-1, max_steps=4):
    step 0 applies zeros, steps 1 and 2 the previous step's average gradient, step 3
    (synchronous again) the averages of steps 2 and 3; checked against SGD applied by
    hand to single-process gradients of the global batches at the weights each step saw."""
    c = Checks()
    r, n = keras_session
    steps = 4
    x, y = global_data(n, steps=steps, seed=3)
    xs, ys = shard(x, r, n), shard(y, r, n)
    model = make_model(300 + r)
    initial = register(c, model, 1, n, "pipelined")
    mc.config_team(1, 0, -1, steps)
    try:
        for s in range(steps):
            model.train_on_batch(xs[s * B : (s + 1) * B], ys[s * B : (s + 1) * B])
    finally:
        mc.config_team(1, 0, 0, 0)
    ref = reference_model(initial)

    def grads_at(weights, s):
        ref.set_weights(weights)
        xg, yg = x[s * n * B : (s + 1) * n * B], y[s * n * B : (s + 1) * n * B]
        return [g.numpy() for g in mse_grads(ref, xg, yg)]

    def sgd(weights, *grads):
        return [w - LR * sum(g[i] for g in grads) for i, w in enumerate(weights)]

    w0 = initial  # step 0: zero update
    g0, g1 = grads_at(w0, 0), grads_at(w0, 1)
    w1 = sgd(w0, g0)  # step 1
    g2 = grads_at(w1, 2)
    w2 = sgd(w1, g1)  # step 2
    g3 = grads_at(w2, 3)
    w3 = sgd(w2, g2, g3)  # step 3: drains the pipeline
    c.same_on_all_ranks(model.get_weights(), "pipelined: weights after training")
    check_close(c, model.get_weights(), w3, "pipelined")
    c.finish()


# case: (every rank's arguments, the last rank's changes, the name the error gives)
FIT_ON_LAST_RANK = {
    "epochs": ({}, {"epochs": 2}, "epochs: "),
    "validation": ({}, {"validation_split": 0.5}, "validation: "),
    "validation_freq": (
        {"validation_split": 0.5, "validation_freq": [1, 2]},
        {"validation_freq": [2]},
        "validation_freq: ",
    ),
    "per-batch metrics": (
        {},
        {"callbacks": [mk.GlobalMetrics(per_batch=True)]},
        "per-batch metrics: ",
    ),
    "validation_freq without validation": ({}, {"validation_freq": 2}, None),
    "batch_size": ({}, {"batch_size": 4}, "batch_size: "),
}


@pytest.mark.parametrize("case", sorted(FIT_ON_LAST_RANK))
def test_fit_arguments_that_differ_fail_on_every_rank(keras_session, case):
    """fit's arguments that decide its collective calls, given otherwise on the last
    rank: every rank's fit raises MismatchError naming the argument before any step (the
    weights stay those of the start), and a fit with equal arguments runs after it. A
    validation_freq without validation, which Keras does not read, is not compared."""
    rank, nranks = keras_session
    if nranks == 1:
        pytest.skip("one rank agrees with itself")
    c = Checks()
    model = make_model(0)
    x, y = global_data(1)
    at_start = [w.copy() for w in model.get_weights()]
    common, last, named = FIT_ON_LAST_RANK[case]
    mine = {"epochs": 1, "validation_split": 0.0, "validation_freq": 1, "batch_size": 2}
    mine.update(common)
    if rank == nranks - 1:
        mine.update(last)
    try:
        model.fit(x, y, shuffle=False, verbose=0, **mine)
    except mc.MismatchError as e:
        c.true(named is not None and named in str(e), f"{case}: names it: {e}")
        c.true(f"rank {nranks - 1}: " in str(e), f"{case}: names the last rank: {e}")
    else:
        c.true(named is None, f"{case} given otherwise on the last rank: fit raised nothing")
    for i, (w, w0) in enumerate(zip(model.get_weights(), at_start)):
        changed = not np.array_equal(w, w0)
        c.true(changed == (named is None), f"{case}: weight {i} changed: {changed}")
    model.fit(x, y, batch_size=2, shuffle=False, verbose=0, epochs=1)
    c.same_on_all_ranks(model.get_weights(), f"{case}: weights after a fit with equal arguments")
    c.finish()


def test_pipelined_team_realigns_after_a_step_failed_on_one_rank(keras_session):
    """On a pipelined team (ksteps=0) the last rank's step 2 fails before any gradient
    exists (check_numerics finds a NaN in its input) and the rank goes on. Its next step
    carries its step's number, so the others' reduction of step 2 finds them a step
    behind: their step 3 raises a MismatchError naming that rank, and their next reduction
    meets its. Every rank applies the same averages in the same order, the failed step's
    on none, and the weights are bit-identical again after step 3. Checked against SGD by
    hand, where the last rank's gradients of step 3 come from the weights it still had
    (one update behind)."""
    c = Checks()
    r, n = keras_session
    steps, failing, last = 5, 2, n - 1
    x, y = global_data(n, steps=steps, seed=5)
    xs, ys = shard(x, r, n), shard(y, r, n)
    model = make_model(500 + r, checks_input=True)
    initial = register(c, model, 1, n, "pipelined, failed step")
    mc.config_team(1, 0, 0, 100)
    raised = {}
    try:
        for s in range(steps):
            xb = xs[s * B : (s + 1) * B].copy()
            if r == last and s == failing:
                xb[0, 0] = np.nan
            try:
                model.train_on_batch(xb, ys[s * B : (s + 1) * B])
            except Exception as exc:  # noqa: BLE001 - recorded, checked below
                raised[s] = exc
    finally:
        mc.config_team(1, 0, 0, 0)
    if r == last:
        c.true(list(raised) == [failing], f"the last rank raised at steps {sorted(raised)}")
        c.true(isinstance(raised.get(failing), tf.errors.InvalidArgumentError), "its own error")
    elif n > 1:
        c.true(list(raised) == [failing + 1], f"rank {r} raised at steps {sorted(raised)}")
        error = raised.get(failing + 1)
        c.true(isinstance(error, mc.MismatchError), f"a MismatchError, got {error!r}")
        text = str(error)
        said = f"rank {last} is at step" in text and "(1 step behind)" in text
        c.true(said, f"names the rank a step ahead: {text[:300]}")
    ref = reference_model(initial)

    def shard_grads(weights, rank, s):  # rank's rows of global batch s
        ref.set_weights(weights)
        rows = slice(s * n * B + rank * B, s * n * B + (rank + 1) * B)
        return [g.numpy() for g in mse_grads(ref, x[rows], y[rows])]

    def average(weights_of_rank, s):
        per_rank = [shard_grads(weights_of_rank(q), q, s) for q in range(n)]
        return [sum(g[i] for g in per_rank) / n for i in range(len(per_rank[0]))]

    def sgd(weights, *grads):
        return [w - LR * sum(g[i] for g in grads) for i, w in enumerate(weights)]

    w0 = initial  # step 0 enters the pipeline: a zero update
    a0 = average(lambda q: w0, 0)
    a1 = average(lambda q: w0, 1)
    w1 = sgd(w0, a0)  # step 1
    w2 = sgd(w1, a1)  # step 2 on the others, step 3 on the last rank
    a3 = average(lambda q: w1 if q == last else w2, 3)
    want = sgd(w2, a3)  # step 4 (step 4's own average is still in flight)
    c.same_on_all_ranks(model.get_weights(), "weights after training")
    check_close(c, model.get_weights(), want, "pipelined, failed step")
    c.finish()
