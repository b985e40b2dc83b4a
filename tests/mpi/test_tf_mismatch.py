"""TensorFlow ops of ranks that disagree (different gradient sizes or counts) fail on
every rank with the core's message, for the fused op of eager mode and for the keyed
groups of tf.function, instead of hanging; the team then keeps working."""

from __future__ import annotations

import time

import numpy as np
import pytest
import tensorflow as tf
from mpi_helpers import Checks, expected_average, make_input
from tf_helpers import check_kind, module_session_fixture, to_numpy

import ml_comm as mc

pytestmark = pytest.mark.mpi

tf_session = module_session_fixture()


def call(mode, fn):
    return fn() if mode == "eager" else tf.function(fn)()


def expect_mismatch(c: Checks, mode: str, grads):
    """gradients(grads) raises on this rank: TensorFlow's FailedPreconditionError, of
    ml_comm's MismatchError (eagerly the error raised is one already)."""
    e = c.raises(
        tf.errors.FailedPreconditionError,
        call,
        mode,
        lambda: mc.gradients(grads),
        words=("ranks disagree",),
    )
    check_kind(c, e, tf.errors.FailedPreconditionError, mc.MismatchError, mode)
    if mode == "eager":
        c.true(isinstance(e, mc.MismatchError), f"eager: raised {type(e)}")
    return e


def still_works(c: Checks, session, mode: str) -> None:
    grads = [make_input(session.rank, s, np.float32, 9 + i) for i, s in enumerate([(3, 4), (500,)])]
    out = call(mode, lambda: mc.gradients([tf.constant(g) for g in grads]))
    for i, s in enumerate([(3, 4), (500,)]):
        want = expected_average(s, np.float32, session.nranks, 9 + i)
        c.equal(to_numpy(out[i]), want, f"{mode}: gradients[{i}] after the mismatch")


@pytest.mark.parametrize("mode", ["eager", "function"])
def test_gradient_sizes_differ(tf_session, mode):
    if tf_session.nranks < 2:
        pytest.skip("a mismatch needs at least 2 ranks (this run has 1)")
    c = Checks()
    last = tf_session.nranks - 1
    n = 300 + (tf_session.rank == last)
    grads = [tf.ones([n]), tf.ones([7])]
    e = expect_mismatch(c, mode, grads)
    text = str(e)
    c.true(f"rank {last} submitted 2 tensors, 308 float32 elements" in text, text)
    c.true("submitted 2 tensors, 307 float32 elements" in text, text)
    still_works(c, tf_session, mode)
    c.finish()


@pytest.mark.parametrize("mode", ["eager", "function"])
def test_same_sizes_other_dimensions(tf_session, mode):
    """17 x 1311 on rank 0 against 17 x 23 x 57 elsewhere: one element count, other
    tensors (Horovod's test_horovod_allreduce_error makes the same call)."""
    if tf_session.nranks < 2:
        pytest.skip("a mismatch needs at least 2 ranks (this run has 1)")
    c = Checks()
    shape = [17, 1311] if tf_session.rank == 0 else [17, 23, 57]
    e = expect_mismatch(c, mode, [tf.ones(shape), tf.ones([7])])
    text = str(e)
    c.true("submitted 2 tensors, 22294 float32 elements" in text, text)
    c.true(
        "but the tensors' shapes (their dimensions) differ between rank 0 and rank" in text, text
    )
    still_works(c, tf_session, mode)
    c.finish()


@pytest.mark.parametrize("mode", ["eager", "function"])
def test_only_none_against_gradients(tf_session, mode):
    """A rank whose gradients are all None (nothing of its loss reached the variables)
    still makes the call: every rank fails it, instead of the others averaging their
    gradients with that rank's next step's."""
    if tf_session.nranks < 2:
        pytest.skip("a mismatch needs at least 2 ranks (this run has 1)")
    c = Checks()
    last = tf_session.nranks - 1
    grads = [None, None] if tf_session.rank == last else [tf.ones([4]), tf.ones([3])]
    e = expect_mismatch(c, mode, grads)
    text = str(e)
    want = f"rank {last} submitted no tensors (a list that was empty or held only None)"
    c.true(want in text, text)
    still_works(c, tf_session, mode)
    c.finish()


@pytest.mark.parametrize("mode", ["eager", "function"])
def test_only_none_everywhere(tf_session, mode):
    c = Checks()
    out = call(mode, lambda: mc.gradients([None, None]))
    c.true(list(out) == [None, None], f"{mode}: gradients([None, None]) gave {out}")
    still_works(c, tf_session, mode)
    c.finish()


@pytest.mark.parametrize("mode", ["eager", "function"])
def test_number_of_gradients_differs(tf_session, mode):
    if tf_session.nranks < 2:
        pytest.skip("a mismatch needs at least 2 ranks (this run has 1)")
    c = Checks()
    grads = [tf.ones([4]) for _ in range(3 if tf_session.rank == 0 else 2)]
    e = expect_mismatch(c, mode, grads)
    c.true("rank 0 submitted 3 tensors, 12 float32" in str(e), str(e))
    still_works(c, tf_session, mode)
    c.finish()


@pytest.mark.parametrize("mode", ["eager", "function"])
@pytest.mark.parametrize(
    "last_rank_extra,want_last",
    [
        (
            tf.float64,
            "float32 elements (average, part 1 of 2; the call's dtypes: float32, float64)",
        ),
        (tf.int32, "float32 elements (average, part 1 of 2; the call's dtypes: float32, int32)"),
    ],
)
def test_dtype_sets_differ(tf_session, mode, last_rank_extra, want_last):
    """Before: the shared float32 part agreed, and the last rank's extra op waited
    forever (the stall watchdog only named it). Now the first part fails everywhere."""
    if tf_session.nranks < 2:
        pytest.skip("a mismatch needs at least 2 ranks (this run has 1)")
    c = Checks()
    last = tf_session.nranks - 1
    grads = [tf.ones([4]), tf.ones([7])]
    if tf_session.rank == last:
        grads.append(tf.ones([5], last_rank_extra))
    start = time.monotonic()
    e = expect_mismatch(c, mode, grads)
    c.true(time.monotonic() - start < 10, f"took {time.monotonic() - start:.1f} s")
    text = str(e)
    others = "rank 0" if last == 1 else f"ranks 0-{last - 1}"
    c.true(f"{others} submitted 2 tensors, 11 float32 elements (average)" in text, text)
    c.true(f"rank {last} submitted 2 tensors, 11 {want_last}" in text, text)
    still_works(c, tf_session, mode)
    c.finish()


@pytest.mark.parametrize("mode", ["eager", "function"])
def test_same_dtype_count_other_dtypes(tf_session, mode):
    if tf_session.nranks < 2:
        pytest.skip("a mismatch needs at least 2 ranks (this run has 1)")
    c = Checks()
    other = tf.int64 if tf_session.rank == 0 else tf.float64
    grads = [tf.ones([4]), tf.ones([3], other)]
    e = expect_mismatch(c, mode, grads)
    text = str(e)
    c.true("the call's dtypes: float32, int64" in text, text)
    c.true("the call's dtypes: float32, float64" in text, text)
    still_works(c, tf_session, mode)
    c.finish()
