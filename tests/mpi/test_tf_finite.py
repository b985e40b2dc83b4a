"""ML_COMM_CHECK_FINITE=1 with TensorFlow: a NaN or Inf in one rank's gradient fails
the step on every rank (tf.errors.InvalidArgumentError, of ml_comm's NonFiniteError,
naming the rank and the tensor's place in the fused reduction: weights first, last
gradient first, then vectors), both for the fused op of eager mode and for the keyed
groups of tf.function, whose reduction then waits for all of its gradients before it
starts."""

from __future__ import annotations

import os

import numpy as np
import pytest
import tensorflow as tf
from mpi_helpers import Checks, expected_average, make_input
from tf_helpers import check_kind, tf_ml_comm_session, to_numpy

import ml_comm as mc

pytestmark = pytest.mark.mpi


@pytest.fixture(scope="module")
def tf_session():
    os.environ["ML_COMM_CHECK_FINITE"] = "1"
    try:
        with tf_ml_comm_session() as s:
            os.environ.pop("ML_COMM_CHECK_FINITE")
            yield s
    finally:
        os.environ.pop("ML_COMM_CHECK_FINITE", None)


@pytest.mark.parametrize("mode", ["eager", "function"])
def test_nan_in_one_rank_fails_everywhere(tf_session, mode):
    if tf_session.nranks == 1:
        pytest.skip("at one rank the TensorFlow ops return their input without the core")
    c = Checks()
    last = tf_session.nranks - 1
    shapes = [(3, 4), (500,), (7,)]
    good = [make_input(tf_session.rank, s, np.float32, i) for i, s in enumerate(shapes)]
    bad = [g.copy() for g in good]
    if tf_session.rank == last:
        bad[0][1, 2] = np.nan  # gradients[0]: the only weight (2-D), first in the layout

    def run(arrays):
        fn = lambda: mc.gradients([tf.constant(a) for a in arrays])  # noqa: E731
        return fn() if mode == "eager" else tf.function(fn)()

    e = c.raises(tf.errors.InvalidArgumentError, run, bad, words=("NaN or Inf",))
    check_kind(c, e, tf.errors.InvalidArgumentError, mc.NonFiniteError, mode)
    c.true(f"rank {last} tensor 0" in str(e), str(e))
    out = run(good)  # the team still works, and finite inputs pass
    for i, s in enumerate(shapes):
        want = expected_average(s, np.float32, tf_session.nranks, i)
        c.equal(to_numpy(out[i]), want, f"{mode}: gradients[{i}]")
    c.finish()


@pytest.mark.parametrize("mode", ["eager", "function"])
def test_pipelined_team_recovers_after_one_failed_step(tf_session, mode):
    """A pipelined call whose reduction fails (a NaN on one rank) makes the next call,
    the one that would return it, raise on every rank; the calls after that work
    again: the pipeline starts afresh (zeros, then the previous call's average)."""
    rank, n, last = tf_session.rank, tf_session.nranks, tf_session.nranks - 1
    shape = (6,)
    zeros = np.zeros(shape, np.float32)
    step = lambda ts: mc.gradients(ts, 1)  # noqa: E731
    if mode == "function":
        step = tf.function(step)

    def call(seed, nan=False):
        a = make_input(rank, shape, np.float32, seed)
        if nan and rank == last:
            a[1] = np.nan
        return to_numpy(step([tf.constant(a)])[0])

    c = Checks()
    mc.config_team(1, mc.ALG_AUTO, 0, 100)  # pipelined from the first call
    try:
        c.equal(call(0), zeros, f"{mode}: call 0 (entering the pipeline)")
        c.equal(call(1, nan=True), expected_average(shape, np.float32, n, 0), f"{mode}: call 1")
        e = c.raises(tf.errors.InvalidArgumentError, call, 2, words=("NaN or Inf",))
        check_kind(c, e, tf.errors.InvalidArgumentError, mc.NonFiniteError, mode)
        c.equal(call(3), zeros, f"{mode}: call 3 (the pipeline starts afresh)")
        for seed in (4, 5):
            want = expected_average(shape, np.float32, n, seed - 1)
            c.equal(call(seed), want, f"{mode}: call {seed} returns call {seed - 1}'s average")
    finally:
        mc.config_team(1, mc.ALG_AUTO, 0, 0)
    c.finish()


@pytest.mark.parametrize("mode", ["eager", "function"])
def test_leaving_the_pipeline_after_a_failed_step(tf_session, mode):
    """A failure just before the draining call: the call that would return the failed
    reduction raises; the draining call then returns its own average (as NumPy does)."""
    rank, n, last = tf_session.rank, tf_session.nranks, tf_session.nranks - 1
    shape = (5,)
    step = lambda ts: mc.gradients(ts, 1)  # noqa: E731
    if mode == "function":
        step = tf.function(step)

    def call(seed, nan=False):
        a = make_input(rank, shape, np.float64, seed)
        if nan and rank == last:
            a[0] = np.inf
        return to_numpy(step([tf.constant(a)])[0])

    c = Checks()
    mc.config_team(1, mc.ALG_AUTO, -1, 4)  # pipelined, synchronous for the last 1 of 4
    try:
        c.equal(call(0), np.zeros(shape), f"{mode}: call 0 (entering the pipeline)")
        c.equal(call(1, nan=True), expected_average(shape, np.float64, n, 0), f"{mode}: call 1")
        e = c.raises(tf.errors.InvalidArgumentError, call, 2, words=("NaN or Inf",))
        check_kind(c, e, tf.errors.InvalidArgumentError, mc.NonFiniteError, mode)
        c.equal(call(3), expected_average(shape, np.float64, n, 3), f"{mode}: call 3 (draining)")
        c.equal(call(4), expected_average(shape, np.float64, n, 4), f"{mode}: call 4 (sync)")
    finally:
        mc.config_team(1, mc.ALG_AUTO, 0, 0)
    c.finish()
