"""mc.broadcast with framework="tensorflow": new tensors holding root's values, from
every root, for every dtype, from variables (assigned too) and tensors, in eager mode,
inside tf.function and in a tf.compat.v1 graph."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from mpi_helpers import DTYPES, Checks, expected_average, make_input
from tf_helpers import (
    MODES,
    check_kind,
    module_session_fixture,
    run_in_mode,
    tf_dtype,
    to_numpy,
)

import ml_comm as mc

pytestmark = pytest.mark.mpi

tf_session = module_session_fixture()


def specs(n: int) -> list[tuple]:
    """(shape, dtype, seed): every dtype, 0-d, empty, odd and multi-segment sizes."""
    shapes = [(), (0,), (7,), (n + 1, 3), (1001,), (8195,)]
    out = []
    for i, dt in enumerate(DTYPES):
        for j, s in enumerate(shapes):
            if s == (8195,) and dt not in (np.float32, np.float16):
                continue  # two large ones are enough
            out.append((s, dt, 10 * i + j))
    return out


@pytest.mark.parametrize("mode", MODES)
def test_tensors_from_every_root(tf_session, mode):
    """A mixed-dtype list of tensors, once per root; a graph is built per root and
    run twice."""
    c = Checks()
    r, n = tf_session.rank, tf_session.nranks
    sp = specs(n)
    arrays = [make_input(r, s, d, seed) for s, d, seed in sp]
    for root in range(n):
        results = run_in_mode(mode, lambda t, root=root: mc.broadcast(t, root=root), [arrays] * 2)
        for run, outs in enumerate(results):
            c.true(len(outs) == len(sp), f"{mode} root {root}: {len(outs)} results")
            for i, ((s, d, seed), o) in enumerate(zip(sp, outs)):
                want = make_input(root, s, d, seed)
                c.equal(o, want, f"{mode} root {root} run {run} value {i} ({np.dtype(d).name}{s})")
        c.same_on_all_ranks(results[0], f"{mode} root {root}")
    c.finish()


@pytest.mark.parametrize("mode", MODES)
def test_variables_assigned_from_every_root(tf_session, mode):
    """Variables of every dtype: broadcast assigns root's values to them and returns
    them as new tensors; a script that drops the result (eagerly, in tf.function) still
    has root's values. In a v1 graph, running the results runs the assignments."""
    c = Checks()
    r, n = tf_session.rank, tf_session.nranks
    sp = [((4, 3), dt, i) for i, dt in enumerate(DTYPES)] + [((1001,), np.float32, 9)]
    for root in range(n):
        own = [make_input(r, s, d, seed + 100 * root) for s, d, seed in sp]
        want = [make_input(root, s, d, seed + 100 * root) for s, d, seed in sp]
        if mode == "v1":
            graph = tf.Graph()
            with graph.as_default():
                variables = [tf.Variable(a) for a in own]
                new = mc.broadcast(variables, root=root)
                init = tf.compat.v1.global_variables_initializer()
            with tf.compat.v1.Session(graph=graph) as sess:
                sess.run(init)
                before = sess.run(variables)
                got_new = sess.run(new)
                assigned = sess.run(variables)
        else:
            variables = [tf.Variable(a) for a in own]
            before = [v.numpy() for v in variables]

            def bcast(variables=variables, root=root):
                return mc.broadcast(variables, root=root)

            fn = bcast if mode == "eager" else tf.function(bcast)
            got_new = [to_numpy(t) for t in fn()]
            assigned = [v.numpy() for v in variables]
            dropped = [tf.Variable(a) for a in own]

            def drop_result(dropped=dropped, root=root):
                mc.broadcast(dropped, root=root)  # the variables' assignment is all that runs

            (drop_result if mode == "eager" else tf.function(drop_result))()
            for i, (v, w) in enumerate(zip(dropped, want)):
                c.equal(v.numpy(), w, f"{mode} root {root} variable {i}: result dropped")
        for i, (b, g, a, w) in enumerate(zip(before, got_new, assigned, want)):
            what = f"{mode} root {root} variable {i} ({np.dtype(sp[i][1]).name})"
            c.equal(b, own[i], f"{what}: before the broadcast")
            c.equal(g, w, f"{what}: broadcast result")
            c.equal(a, w, f"{what}: assigned by the broadcast")
        c.true(mc.check_buffers_match(assigned) == 0, f"{mode} root {root}: check_buffers_match")
    c.finish()


def test_keras_variables_assigned(tf_session):
    """A Keras model's variables (not tf.Variables) are assigned too: the two-line
    serial-script change works without a loop over the results."""
    import keras

    c = Checks()
    r, n = tf_session.rank, tf_session.nranks

    def model_drawn_with_seed(seed: int):
        keras.utils.set_random_seed(seed)
        layers = [keras.Input((3,)), keras.layers.Dense(4), keras.layers.Dense(2)]
        return keras.Sequential(layers)

    model = model_drawn_with_seed(r)
    mc.broadcast(model.trainable_variables, root=n - 1)
    weights = [v.numpy() for v in model.trainable_variables]
    root_model = model_drawn_with_seed(n - 1)
    for i, (w, want) in enumerate(zip(weights, root_model.get_weights())):
        c.equal(w, want, f"Keras variable {i}")
    c.same_on_all_ranks(weights, "Keras variables")
    c.finish()


def test_single_value_and_types(tf_session):
    """A single variable or tensor (not in a list) gives a single tensor back; the
    results are tf.Tensors of the input dtype and shape."""
    c = Checks()
    r, n = tf_session.rank, tf_session.nranks
    root = n - 1
    v = tf.Variable(make_input(r, (5, 2), np.float64, 1))
    t = tf.constant(make_input(r, (3,), np.int32, 2))
    for value, (shape, dt, seed) in [(v, ((5, 2), np.float64, 1)), (t, ((3,), np.int32, 2))]:
        out = mc.broadcast(value, root=root)
        c.true(isinstance(out, tf.Tensor), f"broadcast(single) returned {type(out).__name__}")
        c.true(out.dtype == tf_dtype(dt), f"dtype {out.dtype}, want {np.dtype(dt).name}")
        c.equal(to_numpy(out), make_input(root, shape, dt, seed), f"single {np.dtype(dt).name}")
    outs = mc.broadcast((v, t), root=root)  # a tuple works like a list
    c.true(isinstance(outs, list) and len(outs) == 2, f"broadcast(tuple) returned {outs!r}")

    # v holds root's values since the first broadcast, on every rank
    c.equal(v.numpy(), make_input(root, (5, 2), np.float64, 1), "single variable assigned")
    own = tf.Variable(make_input(r, (5, 2), np.float64, 3))  # this rank's, not root's yet

    @tf.function
    def single():
        return mc.broadcast(own, root=0)

    c.equal(single().numpy(), make_input(0, (5, 2), np.float64, 3), "single in tf.function")
    c.equal(own.numpy(), make_input(0, (5, 2), np.float64, 3), "assigned in tf.function")
    c.finish()


@pytest.mark.parametrize("mode", ["function", "v1"])
def test_broadcast_then_gradients_in_one_graph(tf_session, mode):
    """A graph that broadcasts and reduces on the same team (the first training step
    of a tf.function that also syncs the weights). tf.function runs the stateful ops
    in program order; the v1 graph orders them with a control dependency (without
    one, ranks may run the two in different orders: see the report of this suite)."""
    c = Checks()
    r, n = tf_session.rank, tf_session.nranks
    a = make_input(r, (1001,), np.float32, 1)
    b = make_input(r, (17,), np.int64, 2)

    def fn(t):
        x = mc.broadcast(t[0], root=n - 1)
        with tf.control_dependencies([x] if mode == "v1" else []):
            return [x] + mc.gradients([t[0] * 2, t[1]])

    for run, outs in enumerate(run_in_mode(mode, fn, [[a, b]] * 2)):
        c.equal(outs[0], make_input(n - 1, (1001,), np.float32, 1), f"{mode} run {run} bcast")
        stack = np.stack([make_input(k, (1001,), np.float32, 1) * 2 for k in range(n)])
        want = np.sum(stack, axis=0, dtype=np.float32) / np.float32(n)
        c.equal(outs[1], want, f"{mode} run {run} gradient 0")
        c.equal(outs[2], expected_average((17,), np.int64, n, 2), f"{mode} run {run} gradient 1")
    c.finish()


@pytest.mark.parametrize("mode", ["eager", "function"])
def test_a_root_out_of_range_on_one_rank_fails_on_every_rank(tf_session, mode):
    """One rank's root that no rank has: the op fails on every rank with
    InvalidArgumentError, read as ml_comm's BadArgumentError, naming that rank (eagerly and
    traced), instead of the others waiting; the variable keeps its value."""
    c = Checks()
    r, n = tf_session.rank, tf_session.nranks
    last = n - 1
    v = tf.Variable(tf.fill([3], float(r)))
    call = lambda: mc.broadcast([v], root=-1 if r == last else 0)  # noqa: E731
    run = tf.function(call) if mode == "function" else call
    words = (f"rank {last}: root -1, which no rank has (ranks 0..{last})",)
    e = c.raises(tf.errors.InvalidArgumentError, run, words=words)
    check_kind(c, e, tf.errors.InvalidArgumentError, mc.BadArgumentError, mode)
    c.equal(v.numpy(), np.full(3, r, np.float32), "untouched")
    mc.broadcast([v], root=last)
    c.equal(v.numpy(), np.full(3, last, np.float32), "after")
    c.finish()
