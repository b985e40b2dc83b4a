"""A training step that fails part-way (an op raises after some of its gradients were
submitted, or before any of them exists): the step's open gradient group is cancelled,
its tokens are freed, and the next steps are exact and return; where only one rank's
step failed, every rank raises and none hangs.

The failing step holds its second gradient back in a py-function until the first one's
submit has run, then fails a check_numerics on it, as a NaN check in a real step would;
the early-failing step fails a check on its input, which every gradient comes from.
"""

from __future__ import annotations

import ctypes
import time

import numpy as np
import pytest
import tensorflow as tf
from mpi_helpers import Checks, expected_average, make_input
from tf_helpers import check_kind, module_session_fixture

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


MIXED = [((300,), np.float32), ((200,), np.float64), ((90,), np.float64)]


def make_mixed_step(rank: int):
    """A step of two gradient dtypes (a group each). With bad set, rank 0's float32
    gradient has another size (the ranks' float32 groups disagree: ml_comm's own error,
    on every rank). The float32 gradient comes late on every rank, so that the float64
    group opens first everywhere, and rank 0 holds its last float64 gradient back
    longer still: its float64 group is open, and gets cancelled, when the step fails
    there, while on the other ranks it is complete."""

    def hold(x, seconds):
        time.sleep(float(seconds))
        return x

    def held(x, seconds, shape):
        x = tf.numpy_function(hold, [x, seconds], x.dtype, stateful=True)
        x.set_shape(shape)
        return x

    @tf.function
    def step(first, second, third, bad):
        late = tf.where(bad, 0.3, 0.0)
        first = held(first, late, first.shape)
        third = held(third, late * (5.0 if rank == 0 else 0.0), MIXED[2][0])
        return mc.gradients([first, second, third])

    return step


def mixed_inputs(rank: int, seed: int, bad: bool = False) -> list[tf.Tensor]:
    shapes = [s for s, _ in MIXED]
    if bad and rank == 0:
        shapes[0] = (shapes[0][0] + 1,)
    return [
        tf.constant(make_input(rank, s, d, seed=seed + i))
        for i, (s, (_, d)) in enumerate(zip(shapes, MIXED))
    ]


def test_multi_dtype_step_failing_on_a_mismatch_then_clean_steps(tf_session):
    """The float32 group fails its agreement check on every rank; the float64 group is
    cancelled on rank 0 only (complete elsewhere). Every rank raises in that step, and
    the next steps are exact: no rank keeps a record of the failure that the others
    lack."""
    c = Checks()
    r, n = tf_session.rank, tf_session.nranks
    step = make_mixed_step(r)
    start = time.monotonic()
    try:
        step(*mixed_inputs(r, 300, bad=True), tf.constant(True))
        c.true(n == 1, "the step with disagreeing float32 groups raised")
    except tf.errors.FailedPreconditionError as e:
        c.true("disagree" in str(e) or "failed on rank 0" in str(e), f"ml_comm's error: {e}")
        check_kind(c, e, tf.errors.FailedPreconditionError, mc.MismatchError, "mixed step")
    c.true(time.monotonic() - start < 60, "the failed step returned promptly")
    for k in range(CLEAN_STEPS):
        try:
            out = step(*mixed_inputs(r, 10 * k), tf.constant(False))
        except tf.errors.OpError as e:
            c.true(False, f"clean step {k} after the failed one: {e}")
            break
        for i, (s, d) in enumerate(MIXED):
            want = expected_average(s, d, n, seed=10 * k + i)
            c.equal(out[i].numpy(), want, f"clean step {k} gradient {i}")
    c.finish()


def fail_on_rank_0_then_clean_steps(tf_session, step, own_error: str, seed: int) -> None:
    """Two steps that fail on rank 0 only (its own error, `own_error` in it), each followed
    by clean steps: every rank raises in the failed step, the others naming rank 0, the
    step returns promptly, the clean steps are exact, and no token is left."""
    c = Checks()
    r, n = tf_session.rank, tf_session.nranks
    for attempt in range(2):
        start = time.monotonic()
        try:
            step(inputs_for(r, seed + attempt), tf.constant(r == 0))
            c.true(False, f"attempt {attempt}: the step in which rank 0 failed raised here too")
        except tf.errors.InvalidArgumentError as e:
            c.true(r == 0 and own_error in str(e), f"rank 0's own error: {e}")
        except tf.errors.FailedPreconditionError as e:
            c.true(r != 0, f"rank 0 raised its step's own error, not ml_comm's: {e}")
            c.true("failed on rank 0" in str(e), f"the error names rank 0: {e}")
            # the ranks disagree on whether the step failed
            check_kind(c, e, tf.errors.FailedPreconditionError, mc.MismatchError, "rank 0 failed")
        c.true(time.monotonic() - start < 60, f"attempt {attempt}: the step returned promptly")
        check_clean_steps(c, step, r, n, f"after rank 0's failed step {attempt}")
    left = pending_tokens()
    c.true(left == 0, f"no tokens left after the failed steps (left: {left})")
    c.finish()


def test_failed_step_on_one_rank_fails_every_rank_in_that_step(tf_session):
    """Rank 0's step fails after its first submit: every rank raises in that same step
    (none returns the sums in which rank 0's missing gradients were zeros), the other
    ranks' errors name rank 0, and the next steps are exact on every rank."""
    if tf_session.nranks == 1:
        pytest.skip("needs two ranks")
    step = make_step()
    step(inputs_for(tf_session.rank, 0), tf.constant(False))  # traced and run once cleanly
    fail_on_rank_0_then_clean_steps(tf_session, step, "second gradient", seed=200)


def make_early_failing_step():
    """A tf.function step whose every gradient comes from an input checked first: with
    fail set, the check fails (after a moment, as a loss computed first would) before any
    gradient exists, so no submit runs on that rank."""

    def hold(x):
        time.sleep(0.3)
        return x

    @tf.function
    def step(inputs, fail):
        poison = tf.where(fail, tf.constant(np.nan, tf.float32), tf.constant(0.0, tf.float32))
        late = tf.numpy_function(hold, [poison], tf.float32, stateful=True)
        late.set_shape(())  # the gradients keep their shapes: one keyed group
        checked = tf.debugging.check_numerics(late, "the step's loss")
        return mc.gradients([x + checked for x in inputs])

    return step


def test_step_failing_before_its_first_submit_on_one_rank_fails_every_rank(tf_session):
    """Rank 0's step fails before any of its gradients exists: its group, opened at the
    step's start, is cancelled, so every rank raises in that step (the others naming rank
    0) instead of rank 0's next step pairing with the others' current one, and the next
    steps are exact on every rank."""
    if tf_session.nranks == 1:
        pytest.skip("needs two ranks")
    step = make_early_failing_step()
    step(inputs_for(tf_session.rank, 0), tf.constant(False))  # traced and run once cleanly
    fail_on_rank_0_then_clean_steps(tf_session, step, "the step's loss", seed=400)
