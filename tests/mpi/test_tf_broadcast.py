"""mc.broadcast with framework="tensorflow": new tensors holding root's values, from
every root, for every dtype, from variables and tensors, in eager mode, inside
tf.function and in a tf.compat.v1 graph."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from mpi_helpers import DTYPES, Checks, expected_average, make_input
from tf_helpers import MODES, module_session_fixture, run_in_mode, tf_dtype, to_numpy

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
    """Variables of every dtype: broadcast returns new tensors (the variables keep their
    own values until the caller assigns), assigning them gives root's values."""
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
                assign = tf.group(*[v.assign(b) for v, b in zip(variables, new)])
                init = tf.compat.v1.global_variables_initializer()
            with tf.compat.v1.Session(graph=graph) as sess:
                sess.run(init)
                got_new = sess.run(new)
                kept = sess.run(variables)
                sess.run(assign)
                assigned = sess.run(variables)
        else:
            variables = [tf.Variable(a) for a in own]

            def bcast(variables=variables, root=root):
                return mc.broadcast(variables, root=root)

            fn = bcast if mode == "eager" else tf.function(bcast)
            got_new = [to_numpy(t) for t in fn()]
            kept = [v.numpy() for v in variables]
            for v, b in zip(variables, got_new):
                v.assign(b)
            assigned = [v.numpy() for v in variables]
        for i, (a, k, g, w) in enumerate(zip(assigned, kept, got_new, want)):
            what = f"{mode} root {root} variable {i} ({np.dtype(sp[i][1]).name})"
            c.equal(g, w, f"{what}: broadcast result")
            c.equal(k, own[i], f"{what}: changed before the assignment")
            c.equal(a, w, f"{what}: after the assignment")
        c.true(mc.check_buffers_match(assigned) == 0, f"{mode} root {root}: check_buffers_match")
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

    @tf.function
    def single():
        return mc.broadcast(v, root=0)

    c.equal(single().numpy(), make_input(0, (5, 2), np.float64, 1), "single value in tf.function")
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
