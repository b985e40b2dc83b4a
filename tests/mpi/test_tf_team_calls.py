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
