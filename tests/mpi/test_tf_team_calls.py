"""Calls that must run on the caller's team or communicator: a broadcast goes on the
team it is given (the model's, for Keras's first-update broadcast), so that with two
models on two threads it keeps its place among that team's calls on every rank; and
ml_comm.keras.gather gathers over init's communicator, not COMM_WORLD."""

from __future__ import annotations

import contextlib

import keras
import numpy as np
import pytest
import tensorflow as tf
from mpi_helpers import CHUNK_BYTES, Checks, comm_world, make_input, suite_comm

import ml_comm as mc
import ml_comm.keras as mk

pytestmark = pytest.mark.mpi


@contextlib.contextmanager
def two_teams(framework=None):
    mc.init(1, 2, 256, framework, chunk_bytes=CHUNK_BYTES, comm=suite_comm())
    try:
        yield mc.get_rank(), mc.get_nranks()
    finally:
        mc.finalize()


def calls() -> list[int]:
    return [mc.team_stats(t)["calls"] for t in (0, 1)]


@pytest.mark.parametrize("framework", [None, "tensorflow"])
def test_broadcast_runs_on_the_given_team(framework):
    c = Checks()
    with two_teams(framework) as (r, n):
        root = n - 1
        values = [make_input(r, (5,), np.float32, 1), make_input(r, (3,), np.int64, 2)]
        before = calls()
        if framework is None:
            out = mc.broadcast(values, root=root, team=1)
        else:
            out = [v.numpy() for v in mc.broadcast([tf.constant(v) for v in values], root, team=1)]
        after = calls()
        for i, v in enumerate(out):
            c.equal(v, make_input(root, v.shape, v.dtype, i + 1), f"broadcast value {i}")
        c.true(after[0] == before[0], f"team 0 made no call (calls {before[0]} -> {after[0]})")
        c.true(after[1] == before[1] + 2, f"team 1 made one call per dtype: {before} -> {after}")
        c.raises(ValueError, mc.broadcast, values, 0, 2, words=("team",))
    c.finish()


def test_keras_first_update_broadcast_on_the_optimizers_team():
    c = Checks()
    comm_world().barrier()
    mk.init(nthread_per_team=1, nteams=2, msglen=256)
    try:
        r = mc.get_rank()
        keras.utils.set_random_seed(100 + r)  # different initial weights on each rank
        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
        optimizer = mk.distributed_optimizer(keras.optimizers.SGD(0.5), team=1, model=model)
        x = tf.constant(make_input(r, (4, 3), np.float32, 3))
        before = calls()
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(model(x))
        optimizer.apply(tape.gradient(loss, model.trainable_variables), model.trainable_variables)
        after = calls()
        c.true(after[0] == before[0], f"team 0 made no call (calls {before[0]} -> {after[0]})")
        c.true(after[1] > before[1], f"team 1 broadcast and averaged: {before} -> {after}")
        c.same_on_all_ranks([v.numpy() for v in model.weights], "weights after the first update")
    finally:
        mk.finalize()
    c.finish()


def test_gather_uses_inits_communicator():
    """Ranks split in two by parity, each half a job of its own: each half's rank 0
    gathers its half's rows (through COMM_WORLD, world rank 1 would get None)."""
    world = comm_world()
    if world.size == 1:
        pytest.skip("needs two ranks")
    half = world.Split(color=world.rank % 2, key=world.rank)
    c = Checks()
    mc.init(1, 1, 64, chunk_bytes=CHUNK_BYTES, comm=half)
    try:
        rows = mk.gather(np.full((1, 2), world.rank, np.int64))
    finally:
        mc.finalize()
    members = [q for q in range(world.size) if q % 2 == world.rank % 2]
    if half.rank == 0:
        want = np.array([[q, q] for q in members], np.int64)
        c.true(rows is not None, "this half's root received the rows")
        if rows is not None:
            c.equal(rows, want, "gathered rows")
    else:
        c.true(rows is None, "a non-root rank receives None")
    half.Free()
    c.finish()


def test_two_threads_on_one_team_eagerly_raise_and_never_mix():
    """TensorFlow eager `gradients` from two threads on team 0 at once: as NumPy's calls,
    a call either raises (the team is in use by the other thread, or the ranks' threads
    came in another order) or returns its own thread's exact average, never the other's."""
    import threading

    from mpi_helpers import expected_average

    c = Checks()
    rounds = 6
    wrong, raised = [], []
    start = threading.Barrier(2)
    with two_teams("tensorflow") as (r, n):
        mc.broadcast([tf.Variable(tf.zeros(2))], 0)  # the job shares its weights

        def work(seed: int) -> None:
            for k in range(rounds):
                x = tf.constant(make_input(r, (64,), np.float32, seed + k))
                start.wait()
                try:
                    out = mc.gradients([x], team=0)[0].numpy()
                except mc.MLCommError as e:
                    raised.append(str(e))
                    continue
                want = expected_average((64,), np.float32, n, seed + k)
                if out.tobytes() != want.tobytes():
                    wrong.append((seed, k))

        threads = [threading.Thread(target=work, args=(seed,)) for seed in (100, 200)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        x = tf.constant(make_input(r, (3,), np.float32, 7))
        after = mc.gradients([x], team=0)[0].numpy()
        c.equal(after, expected_average((3,), np.float32, n, 7), "after")
    c.true(not wrong, f"results of another thread's call: {wrong[:3]}")
    c.true(len(raised) >= 1 or n == 1, "no call raised: the threads never overlapped")
    named = ("in use by thread", "called from thread", " at call ")
    unnamed = [m for m in raised if not any(words in m for words in named)]
    c.true(not unnamed, f"messages that name no clash of threads: {unnamed}")
    c.finish()


def test_a_second_thread_training_on_a_busy_team_raises_at_once():
    """Keras: while one thread's fit runs on team 0, another thread's train_on_batch on
    team 0 raises at once (their traced steps' ops carry no thread: they would pair across
    threads); the fit goes on and ends with the same weights on every rank."""
    import threading

    c = Checks()
    comm_world().barrier()
    mk.init(nthread_per_team=1, nteams=1, msglen=256)
    try:
        r = mc.get_rank()
        models = []
        for _ in range(2):
            m = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
            m.compile(optimizer="sgd", loss="mse")
            models.append(m)
        x = make_input(r, (8, 3), np.float32, 5)
        y = np.zeros((8, 2), np.float32)
        models[1].train_on_batch(x[:2], y[:2])  # built and traced before the threads
        inside, tried = threading.Event(), threading.Event()
        said: list[str] = []

        class HoldFirstBatch(keras.callbacks.Callback):
            def on_train_batch_begin(self, batch, logs=None):
                if batch == 0:
                    inside.set()
                    tried.wait(60)

        def other() -> None:
            inside.wait(60)
            try:
                models[1].train_on_batch(x[:2], y[:2])
            except mc.MLCommError as e:
                said.append(str(e))
            finally:
                tried.set()

        helper = threading.Thread(target=other, name="other-trainer")
        helper.start()
        models[0].fit(x, y, batch_size=2, epochs=1, verbose=0, callbacks=[HoldFirstBatch()])
        helper.join()
        c.true(len(said) == 1 and "team 0 is in use by thread" in said[0], f"said {said}")
        c.true(not said or "'other-trainer' needs a team of its own" in said[0], f"{said}")
        c.same_on_all_ranks([w for m in models for w in m.get_weights()], "weights")
    finally:
        mk.finalize()
    c.finish()
