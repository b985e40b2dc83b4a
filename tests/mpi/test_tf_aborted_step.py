"""A training step that fails part-way (an op raises after some of its gradients were
submitted): the step's open gradient group is cancelled, its tokens are freed, and the
next steps are exact and return; where only one rank's step failed, every rank raises
and none hangs.

The failing step holds its second gradient back in a py-function until the first one's
submit has run, then fails a check_numerics on it, as a NaN check in a real step would.
"""

from __future__ import annotations

import ctypes
import time

import numpy as np
import pytest
import tensorflow as tf
from mpi_helpers import Checks, expected_average, make_input
from tf_helpers import module_session_fixture

import ml_comm as mc
from ml_comm.tensorflow import build

pytestmark = pytest.mark.mpi

tf_session = module_session_fixture()

SHAPES = [(300,), (40, 50), (7,)]  # several segments: the group runs on the team's threads
CLEAN_STEPS = 3


def pending_tokens() -> int:
    """Submitted tensors whose reduction or Wait is still to come (the op library's count)."""
    lib = ctypes.CDLL(str(build.build()))  # the library the ops were loaded from
    lib.mlc_tf_pending_tokens.restype = ctypes.c_int64
    return int(lib.mlc_tf_pending_tokens())


def make_step():
    """A tf.function step: the gradients' average; with fail set, the second gradient
    waits until the first was submitted and then fails a numerics check."""

    def hold(x):
        time.sleep(0.3)  # the first gradient's submit runs meanwhile
        return x

    @tf.function
    def step(inputs, fail):
        second = tf.numpy_function(hold, [inputs[1]], tf.float32, stateful=True)
        second.set_shape(inputs[1].shape)
        poison = tf.where(fail, tf.constant(np.nan, tf.float32), tf.constant(0.0, tf.float32))
        second = tf.debugging.check_numerics(second + poison, "the step's second gradient")
        return mc.gradients([inputs[0], second, inputs[2]])

    return step


def inputs_for(rank: int, seed: int) -> list[tf.Tensor]:
    return [
        tf.constant(make_input(rank, s, np.float32, seed=seed + i)) for i, s in enumerate(SHAPES)
    ]


def check_clean_steps(c: Checks, step, rank: int, nranks: int, what: str) -> None:
    for k in range(CLEAN_STEPS):
        start = time.monotonic()
        out = step(inputs_for(rank, 10 * k), tf.constant(False))
        for i, s in enumerate(SHAPES):
            want = expected_average(s, np.float32, nranks, seed=10 * k + i)
            c.equal(out[i].numpy(), want, f"{what}: clean step {k} gradient {i}")
        c.true(time.monotonic() - start < 60, f"{what}: clean step {k} returned promptly")


def test_failed_step_on_every_rank_then_clean_steps(tf_session):
    c = Checks()
    r, n = tf_session.rank, tf_session.nranks
    step = make_step()
    check_clean_steps(c, step, r, n, "before")  # traced and run once cleanly
    for attempt in range(2):
        try:
            step(inputs_for(r, 100 + attempt), tf.constant(True))
            c.true(False, f"the failing step {attempt} raised")
        except tf.errors.InvalidArgumentError as e:
            c.true("second gradient" in str(e), f"the step's own error: {e}")
        check_clean_steps(c, step, r, n, f"after failed step {attempt}")
    left = pending_tokens()
    c.true(left == 0, f"no tokens left after the failed steps (left: {left})")
    c.finish()


def test_failed_step_on_one_rank_fails_every_rank(tf_session):
    """Last in this module: the team stays failed (its ranks disagree on which steps
    failed) until ml_comm.init() again."""
    if tf_session.nranks == 1:
        pytest.skip("needs two ranks")
    c = Checks()
    r = tf_session.rank
    step = make_step()
    step(inputs_for(r, 0), tf.constant(False))  # traced and run once cleanly
    errors = []
    start = time.monotonic()
    for k in range(2):  # the failing step, then the next one
        try:
            step(inputs_for(r, 200 + k), tf.constant(r == 0 and k == 0))
        except (tf.errors.InvalidArgumentError, tf.errors.InternalError) as e:
            errors.append(str(e))
    c.true(time.monotonic() - start < 60, "the two steps returned promptly")
    c.true(len(errors) >= 1, "this rank raised")
    if r != 0:
        c.true(
            any("rank 0 submitted" in e and "failed on this rank" in e for e in errors),
            f"the error names rank 0: {errors}",
        )
    c.finish()


def test_gradients_after_mismatch_still_raise_not_hang(tf_session):
    """Every later request on the team fails on every rank alike (no hang)."""
    if tf_session.nranks == 1:
        pytest.skip("needs two ranks")
    c = Checks()
    x = tf.constant(make_input(tf_session.rank, (5,), np.float32, 1))
    c.raises(tf.errors.InternalError, mc.gradients, [x], words=("rank 0",))
    c.finish()
