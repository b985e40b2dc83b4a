"""Numerical equivalence of data-parallel training with serial training.

A small float32 model (dense 64 -> 16 -> 10 on sklearn's digits) is trained with
plain SGD for 20 steps. At N ranks, rank r takes its own slice of b samples of each
global batch of N*b samples and averages its gradients with mc.gradients; every rank
also trains, without ml_comm, a single-process reference on the whole N*b batch of
the same samples. Both start from the same weights (root 0's, after every rank drew
different ones and mc.broadcast made them equal) and must end within 1e-5 relative
(max |w - w_ref| <= 1e-5 * max |w_ref| per variable).

Modes: eager GradientTape, tf.function, a tf.compat.v1 graph (compute_gradients ->
mc.gradients -> apply_gradients, run by a Session), and the paper's listing style:
the same graph run by a MonitoredSession whose SessionRunHook broadcasts after the
session is created.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
import tensorflow as tf
from mpi_helpers import Checks
from sklearn.datasets import load_digits
from tf_helpers import module_session_fixture

import ml_comm as mc

pytestmark = pytest.mark.mpi

tf_session = module_session_fixture()

STEPS = 20
LOCAL_BATCH = 8
LR = 0.2
RTOL = 1e-5
SHAPES = [(64, 16), (16,), (16, 10), (10,)]
NAMES = ["w1", "b1", "w2", "b2"]


@functools.cache
def digits():
    x, y = load_digits(return_X_y=True)
    return (x / 16.0).astype(np.float32), y.astype(np.int64)


def initial_weights(rank: int) -> list[np.ndarray]:
    """Different weights on every rank: the test of the initial broadcast."""
    rng = np.random.default_rng(1234 + rank)
    return [(rng.standard_normal(s) * 0.3).astype(np.float32) for s in SHAPES]


def global_batch(step: int, nranks: int):
    x, y = digits()
    lo = step * nranks * LOCAL_BATCH
    return x[lo : lo + nranks * LOCAL_BATCH], y[lo : lo + nranks * LOCAL_BATCH]


def local_batch(step: int, rank: int, nranks: int):
    x, y = global_batch(step, nranks)
    return x[rank * LOCAL_BATCH : (rank + 1) * LOCAL_BATCH], y[
        rank * LOCAL_BATCH : (rank + 1) * LOCAL_BATCH
    ]


def loss_fn(weights, x, y):
    w1, b1, w2, b2 = weights
    h = tf.tanh(tf.matmul(x, w1) + b1)
    logits = tf.matmul(h, w2) + b2
    return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))


@functools.cache
def reference(nranks: int) -> tuple:
    """One process, no ml_comm, the whole global batch: root 0's initial weights."""
    assert STEPS * nranks * LOCAL_BATCH <= len(digits()[0])
    weights = [tf.Variable(w) for w in initial_weights(0)]
    for step in range(STEPS):
        x, y = global_batch(step, nranks)
        with tf.GradientTape() as tape:
            loss = loss_fn(weights, x, y)
        for v, g in zip(weights, tape.gradient(loss, weights)):
            v.assign_sub(LR * g)
    return tuple(v.numpy() for v in weights)


def check_close(c: Checks, got, tag, nranks):
    for name, w, ref in zip(NAMES, got, reference(nranks)):
        err = float(np.max(np.abs(w - ref)))
        scale = float(np.max(np.abs(ref)))
        c.true(
            err <= RTOL * scale,
            f"{tag}: {name} differs from the single-process reference by {err:.3g} "
            f"(max |w_ref| = {scale:.3g}, allowed {RTOL * scale:.3g})",
        )
    c.true(
        any(not np.array_equal(w, w0) for w, w0 in zip(got, initial_weights(0))),
        f"{tag}: the weights did not change",
    )


def check_broadcast_result(c: Checks, values, tag, nranks):
    """After the broadcast: rank 0's initial weights, identical on every rank."""
    for name, v, want in zip(NAMES, values, initial_weights(0)):
        c.equal(np.asarray(v), want, f"{tag}: {name} after broadcast is not root 0's")
    c.true(mc.check_buffers_match(values) == 0, f"{tag}: check_buffers_match after broadcast")
    c.same_on_all_ranks(values, f"{tag}: weights after broadcast")


def check_start_differs(c: Checks, values, tag, nranks):
    """Collective sanity check: the ranks really started from different weights."""
    got = mc.check_buffers_match(values, flag=0)
    c.true((got == 0) == (nranks == 1), f"{tag}: check_buffers_match before broadcast = {got}")


def check_trained(c: Checks, values, tag, nranks):
    c.true(mc.check_buffers_match(values) == 0, f"{tag}: check_buffers_match after training")
    c.same_on_all_ranks(values, f"{tag}: weights after training")
    check_close(c, values, tag, nranks)


@pytest.mark.parametrize("mode", ["eager", "function"])
def test_tf2_equivalence(tf_session, mode):
    c = Checks()
    r, n = tf_session.rank, tf_session.nranks
    weights = [tf.Variable(w) for w in initial_weights(r)]
    check_start_differs(c, [v.numpy() for v in weights], mode, n)

    def broadcast():
        for v, b in zip(weights, mc.broadcast(weights, root=0)):
            v.assign(b)

    def step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(weights, x, y)
        grads = mc.gradients(tape.gradient(loss, weights))
        for v, g in zip(weights, grads):
            v.assign_sub(LR * g)
        return loss

    if mode == "function":
        broadcast, step = tf.function(broadcast), tf.function(step)
    broadcast()
    check_broadcast_result(c, [v.numpy() for v in weights], mode, n)
    for s in range(STEPS):
        x, y = local_batch(s, r, n)
        step(tf.constant(x), tf.constant(y))
    check_trained(c, [v.numpy() for v in weights], mode, n)
    c.finish()


def broadcast_op(variables):
    """mc.broadcast of the variables as one op that assigns root's values."""
    return tf.group(*[v.assign(b) for v, b in zip(variables, mc.broadcast(variables, 0))])


def build_v1_graph(rank, with_broadcast):
    """The graph of the paper's listings: compute_gradients -> mc.gradients ->
    apply_gradients. with_broadcast: also build the broadcast op, before the training
    op (the hook test builds it after, in the hook's begin())."""
    x = tf.compat.v1.placeholder(tf.float32, [LOCAL_BATCH, 64])
    y = tf.compat.v1.placeholder(tf.int64, [LOCAL_BATCH])
    weights = [
        tf.compat.v1.get_variable(name, initializer=w)
        for name, w in zip(NAMES, initial_weights(rank))
    ]
    bcast_op = broadcast_op(weights) if with_broadcast else None
    loss = loss_fn(weights, x, y)
    opt = tf.compat.v1.train.GradientDescentOptimizer(LR)
    grads_and_vars = opt.compute_gradients(loss, weights)
    grads = mc.gradients([g for g, _ in grads_and_vars])
    train_op = opt.apply_gradients(zip(grads, [v for _, v in grads_and_vars]))
    return x, y, weights, train_op, bcast_op


def test_v1_session_equivalence(tf_session):
    c = Checks()
    r, n = tf_session.rank, tf_session.nranks
    graph = tf.Graph()
    with graph.as_default():
        x, y, weights, train_op, bcast_op = build_v1_graph(r, with_broadcast=True)
        init = tf.compat.v1.global_variables_initializer()
    with tf.compat.v1.Session(graph=graph) as sess:
        sess.run(init)
        check_start_differs(c, sess.run(weights), "v1", n)
        sess.run(bcast_op)
        check_broadcast_result(c, sess.run(weights), "v1", n)
        for s in range(STEPS):
            xs, ys = local_batch(s, r, n)
            sess.run(train_op, {x: xs, y: ys})
        check_trained(c, sess.run(weights), "v1", n)
    c.finish()


class BroadcastHook(tf.compat.v1.train.SessionRunHook):
    """As in the paper's listings: the hook builds the broadcast of the trainable
    variables in begin() (after the training op exists) and runs it once the session
    exists. Running it must need neither the training inputs nor a training step."""

    def __init__(self, check):
        self.check = check

    def begin(self):
        self.weights = tf.compat.v1.trainable_variables()
        self.bcast_op = broadcast_op(self.weights)

    def after_create_session(self, session, coord):
        self.check("before", session.run(self.weights))
        session.run(self.bcast_op)
        self.check("after", session.run(self.weights))


def test_v1_monitored_session_with_hook(tf_session):
    c = Checks()
    r, n = tf_session.rank, tf_session.nranks
    tag = "MonitoredSession"

    def check(when, values):
        if when == "before":
            check_start_differs(c, values, tag, n)
        else:
            check_broadcast_result(c, values, tag, n)

    graph = tf.Graph()
    with graph.as_default():
        x, y, weights, train_op, _ = build_v1_graph(r, with_broadcast=False)
        hook = BroadcastHook(check)
        with tf.compat.v1.train.MonitoredSession(hooks=[hook]) as sess:
            for s in range(STEPS):
                xs, ys = local_batch(s, r, n)
                sess.run(train_op, {x: xs, y: ys})
            final = sess.run(weights)
    c.true(len(hook.weights) == 4, f"{tag}: {len(hook.weights)} trainable variables")
    check_trained(c, final, tag, n)
    c.finish()
