"""Graphs that outlive their ml_comm session: a tf.function or tf.compat.v1 graph built
before mc.finalize() and run after it fails with a TensorFlow error that says what
happened (finalize), never a crash or a hang; after a new mc.init() the old graphs
still fail, new ones work. Each test here runs its own init/finalize (no module
fixture), so it must not share a module with one."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from mpi_helpers import Checks, expected_average, make_input
from tf_helpers import check_kind, tf_ml_comm_session, to_numpy

import ml_comm as mc

pytestmark = pytest.mark.mpi


class Graphs:
    """One computation of each kind, built while a session is live."""

    def __init__(self, rank):
        self.a = tf.constant(make_input(rank, (1001,), np.float32, 1))
        self.b = tf.constant(make_input(rank, (7,), np.int64, 2))
        self.grouped = tf.function(lambda a, b: mc.gradients([a, b])).get_concrete_function(
            self.a, self.b
        )  # static shapes: one submit/wait pair per gradient
        self.fused = tf.function(
            lambda a, b: mc.gradients([a, b]),
            input_signature=[tf.TensorSpec(None, tf.float32), tf.TensorSpec(None, tf.int64)],
        ).get_concrete_function()  # unknown shapes: the fused op
        self.bcast = tf.function(lambda a, b: mc.broadcast([a, b], root=0)).get_concrete_function(
            self.a, self.b
        )
        self.graph = tf.Graph()
        with self.graph.as_default():
            pa = tf.compat.v1.placeholder(tf.float32, [1001])
            pb = tf.compat.v1.placeholder(tf.int64, [7])
            self.v1_out = mc.gradients([pa, pb])
            self.v1_feed = {pa: self.a.numpy(), pb: self.b.numpy()}
        self.sess = tf.compat.v1.Session(graph=self.graph)

    def runners(self):
        return {
            "tf.function (keyed group)": lambda: self.grouped(self.a, self.b),
            "tf.function (fused, unknown shapes)": lambda: self.fused(self.a, self.b),
            "tf.function broadcast": lambda: self.bcast(self.a, self.b),
            "compat.v1 session": lambda: self.sess.run(self.v1_out, self.v1_feed),
        }


def check_results(c, outs, kind, rank, n, tag):
    outs = [to_numpy(o) for o in outs]
    if "broadcast" in kind:
        want = [make_input(0, (1001,), np.float32, 1), make_input(0, (7,), np.int64, 2)]
    else:
        want = [expected_average((1001,), np.float32, n, 1), expected_average((7,), np.int64, n, 2)]
    for i, (o, w) in enumerate(zip(outs, want)):
        c.equal(o, w, f"{tag} {kind} result {i}")


# Graphs whose ops are MlCommGroupSubmit/Wait pairs (static shapes).


def expect_finalized_error(c, n, kind, run, tag):
    """run() must raise a TensorFlow error mentioning finalize; at one rank a gradients
    graph holds no ml_comm op (the average over one rank is the input), so it runs."""
    if n == 1 and "broadcast" not in kind:
        check_results(c, run(), kind, 0, n, tag)
        return
    try:
        run()
    except tf.errors.OpError as e:
        c.true("finalize" in e.message, f"{tag} {kind}: error does not mention finalize: {e}")
        check_kind(c, e, tf.errors.FailedPreconditionError, mc.StateError, f"{tag} {kind}")
        return
    except Exception as e:  # noqa: BLE001 - a Python error is the failure
        c.true(False, f"{tag} {kind}: raised {type(e).__name__}: {e}, want a tf.errors.OpError")
        return
    c.true(False, f"{tag} {kind}: ran without an error")


def test_graphs_built_before_finalize():
    c = Checks()
    with tf_ml_comm_session() as s:
        rank, n = s.rank, s.nranks
        graphs = Graphs(rank)
        for kind, run in graphs.runners().items():
            check_results(c, run(), kind, rank, n, "while live")
    # after finalize: TensorFlow errors, no crash, no hang
    for kind, run in graphs.runners().items():
        expect_finalized_error(c, n, kind, run, "after finalize")
    c.raises(mc.StateError, mc.gradients, [graphs.a], words=("init",))
    c.raises(mc.StateError, mc.broadcast, [graphs.a], words=("init",))
    graphs.sess.close()
    c.finish()


def test_old_graphs_fail_after_a_new_init():
    """Graphs of a finalized session still fail after a new init(), on every rank, for
    every init/finalize cycle; graphs built in the new session work."""
    c = Checks()
    for cycle in range(4):
        with tf_ml_comm_session() as s:
            rank, n = s.rank, s.nranks
            graphs = Graphs(rank)
        with tf_ml_comm_session():
            for kind, run in graphs.runners().items():
                expect_finalized_error(c, n, kind, run, f"cycle {cycle}")
            fresh = Graphs(rank)
            for kind, run in fresh.runners().items():
                check_results(c, run(), kind, rank, n, f"cycle {cycle} new graphs")
            fresh.sess.close()
        graphs.sess.close()
    c.finish()


def test_init_finalize_cycles_with_graphs():
    """Three init/finalize cycles, each building and running its own graphs."""
    c = Checks()
    for cycle in range(3):
        with tf_ml_comm_session() as s:
            g = Graphs(s.rank)
            for kind, run in g.runners().items():
                check_results(c, run(), kind, s.rank, s.nranks, f"cycle {cycle}")
            g.sess.close()
    c.finish()
