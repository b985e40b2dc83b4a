"""ml_comm.horovod when the ranks call differently, eager and in tf.function: every rank
raises a clear error at once (never a hang, never the wrong tensors paired) and the
next calls work. Wrong alltoall splits on one rank, rows of another shape in an
allgather or reducescatter, and calls made in a rank-dependent order. The rules of
mpi_helpers.py hold: which calls are made depends on the rank only in their order, as
the case under test."""

from __future__ import annotations

import time

import numpy as np
import pytest
import tensorflow as tf
from hvd_helpers import hvd_session  # noqa: F401
from mpi_helpers import Checks
from tf_helpers import check_kind

import ml_comm as mc
import ml_comm.horovod.tensorflow as hvd

pytestmark = pytest.mark.mpi

MODES = ["eager", "function"]


@pytest.fixture
def pair(hvd_session):  # noqa: F811
    if hvd_session[1] < 2:
        pytest.skip("ranks that differ need at least 2 ranks (this run has 1)")
    return hvd_session


def run(mode: str, fn, *args):
    """fn(*args), eagerly or as a tf.function traced for this call."""
    return (tf.function(fn) if mode == "function" else fn)(*args)


def expect_error(
    c: Checks,
    mode: str,
    fn,
    *args,
    words=(),
    kind: tuple[type, type] = (tf.errors.FailedPreconditionError, mc.MismatchError),
) -> str:
    """Every rank raises a TensorFlow error within 10 s whose text holds every word, of
    `kind`: TensorFlow's class and ml_comm's (by default: ranks that disagree)."""
    start = time.monotonic()
    e = c.raises(kind[0], run, mode, fn, *args)
    c.true(time.monotonic() - start < 10, "the error came only after the stall watchdog's wait")
    check_kind(c, e, *kind, mode)
    text = str(e) if e is not None else ""
    for w in words:
        c.true(w in text, f"the message lacks {w!r}: {text!r}")
    return text


def still_works(c: Checks, rank: int, n: int) -> None:
    out = hvd.allgather(tf.fill([rank, 2], rank)).numpy()
    want = np.concatenate([np.full((q, 2), q, np.int32) for q in range(n)])
    c.equal(out, want, "allgather afterwards")
    c.equal(hvd.allreduce(tf.constant([float(rank)]), op=hvd.Sum).numpy(),
            np.array([n * (n - 1) / 2], np.float32), "allreduce afterwards")  # fmt: skip


@pytest.mark.parametrize("mode", MODES)
def test_alltoall_bad_splits_fail_on_every_rank(pair, mode):
    """The last rank's splits add up to more rows than it has: every rank fails at once,
    naming that rank; splits of the wrong number and no splits for rows that do not
    divide evenly alike."""
    rank, n = pair
    c = Checks()
    last = n - 1
    x = tf.ones([n, 2], tf.float32)
    sums = [1] * (n - 1) + [2 if rank == last else 1]
    words = (
        "invalid alltoall arguments",
        f"rank {last}: splits add up to {n + 1} rows, the input has {n}",
    )
    bad = (tf.errors.InvalidArgumentError, mc.BadArgumentError)  # arguments, on every rank
    expect_error(c, mode, lambda t: hvd.alltoall(t, splits=sums), x, words=words, kind=bad)
    count = [1] * (n + 1 if rank == last else n)
    words = (f"rank {last}: {n + 1} splits for {n} ranks",)
    expect_error(c, mode, lambda t: hvd.alltoall(t, splits=count), x, words=words, kind=bad)
    rows = tf.ones([n + 1 if rank == last else n, 2], tf.float32)
    words = (f"rank {last}: no splits, and its {n + 1} rows do not divide by the {n} ranks",)
    expect_error(c, mode, lambda t: hvd.alltoall(t), rows, words=words, kind=bad)
    still_works(c, rank, n)
    c.finish()


@pytest.mark.parametrize("mode", MODES)
def test_rows_of_another_shape_fail_on_every_rank(pair, mode):
    """Rows of 2x3 and of 3x2 elements (the same length): named with each rank's shape."""
    rank, n = pair
    c = Checks()
    last = n - 1
    x = tf.ones([2, 3, 2] if rank == last else [2, 2, 3], tf.float32)
    words = (f"rank {last} submitted", "of shape (3, 2)", "of shape (2, 3)")
    expect_error(c, mode, hvd.allgather, x, words=words)
    expect_error(c, mode, lambda t: hvd.reducescatter(t, op=hvd.Sum), x, words=words)
    still_works(c, rank, n)
    c.finish()


@pytest.mark.parametrize("mode", MODES)
def test_a_scalar_on_one_rank_fails_on_every_rank(pair, mode):
    """hvd.allgather of a scalar on the last rank only (tf.squeeze of a last batch of one
    row, say): every rank fails at once, naming that rank."""
    rank, n = pair
    c = Checks()
    x = tf.constant(1.0) if rank == n - 1 else tf.ones([2], tf.float32)
    words = ("invalid allgather arguments", f"rank {n - 1}: a 0-d tensor")
    bad = (tf.errors.InvalidArgumentError, mc.BadArgumentError)
    expect_error(c, mode, hvd.allgather, x, words=words, kind=bad)
    still_works(c, rank, n)
    c.finish()


@pytest.mark.parametrize("mode", MODES)
def test_a_root_out_of_range_on_one_rank_fails_on_every_rank(pair, mode):
    """hvd.broadcast with a root no rank has on the last rank only: every rank fails at
    once, naming that rank and its root."""
    rank, n = pair
    c = Checks()
    words = ("invalid broadcast arguments", f"rank {n - 1}: root {n}, which no rank has")
    bad = (tf.errors.InvalidArgumentError, mc.BadArgumentError)
    root = n if rank == n - 1 else 0
    expect_error(c, mode, lambda x: hvd.broadcast(x, root), tf.ones([2]), words=words, kind=bad)
    still_works(c, rank, n)
    c.finish()


@pytest.mark.parametrize("mode", MODES)
def test_rank_dependent_call_order_fails_loudly(pair, mode):
    """Even ranks allreduce then allgather, odd ranks the other way round; then two
    allreduces of different shapes in swapped order. Each call fails on every rank,
    naming both calls; no rank gets a result."""
    rank, n = pair
    c = Checks()
    a = tf.constant(np.arange(5, dtype=np.float32) + rank)
    b = tf.constant(np.arange(14, dtype=np.float32).reshape(7, 2))

    def reduce_then_gather(a, b):
        return hvd.allreduce(a, op=hvd.Sum), hvd.allgather(b)

    def gather_then_reduce(a, b):
        return hvd.allgather(b), hvd.allreduce(a, op=hvd.Sum)

    mixed = reduce_then_gather if rank % 2 == 0 else gather_then_reduce
    words = ("ranks disagree", "(allgather", "(sum")
    expect_error(c, mode, mixed, a, b, words=words)
    if mode == "eager":  # the second calls meet each other's first, and fail alike
        second = (lambda: hvd.allgather(b)) if rank % 2 == 0 else (lambda: hvd.allreduce(a))
        expect_error(c, mode, second, words=("ranks disagree", "(allgather"))

    def swapped(a, b):
        first, then = (a, b) if rank % 2 == 0 else (b, a)
        return hvd.allreduce(first, op=hvd.Sum), hvd.allreduce(then, op=hvd.Sum)

    expect_error(c, mode, swapped, a, b, words=("ranks disagree", "5 float32", "14 float32"))
    if mode == "eager":
        expect_error(
            c, mode, lambda: hvd.allreduce(b if rank % 2 == 0 else a), words=("ranks disagree",)
        )
    still_works(c, rank, n)
    c.finish()


LABELLED = ["names in another order", "op", "prescale_factor", "postscale_factor", "tape op",
            "gradient_predivide_factor"]  # fmt: skip


@pytest.mark.parametrize("case", LABELLED)
@pytest.mark.parametrize("mode", MODES)
def test_sums_that_differ_only_in_name_op_or_factors_fail_on_every_rank(pair, mode, case):
    """The last rank's call is of the same shape as the others' but Horovod would pair or
    reduce it otherwise (tensors named in another order, Sum against Average, other
    scale factors): every rank fails at once, naming the ranks apart, instead of
    averaging unrelated tensors or returning different results per rank."""
    rank, n = pair
    c = Checks()
    last = rank == n - 1
    x = tf.constant(np.arange(4, dtype=np.float32) + rank)
    w = tf.Variable([1.0, 2.0])

    def call():
        if case == "names in another order":
            names = ["b", "a"] if last else ["a", "b"]
            return [hvd.allreduce(x, name=name) for name in names]
        if case == "op":
            return hvd.allreduce(x, op=hvd.Sum if last else hvd.Average)
        if case in ("prescale_factor", "postscale_factor"):
            return hvd.allreduce(x, op=hvd.Sum, **{case: 2.0 if last else 1.0})
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(w * w)
        if case == "tape op":
            tape = hvd.DistributedGradientTape(tape, op=hvd.Sum if last else hvd.Average)
        else:
            tape = hvd.DistributedGradientTape(tape, gradient_predivide_factor=2.0 if last else 1.0)
        return tape.gradient(loss, [w])

    others = "rank 0" if n == 2 else f"ranks 0-{n - 2}"
    words = ("ranks disagree", "labels (ml_comm.horovod", f"between {others} and rank {n - 1}")
    expect_error(c, mode, call, words=words)
    if mode == "eager" and case == "names in another order":  # the second calls, alike
        expect_error(c, mode, lambda: hvd.allreduce(x, name="a" if last else "b"), words=words)
    still_works(c, rank, n)
    c.finish()


@pytest.mark.parametrize("mode", MODES)
def test_tape_with_no_gradients_on_one_rank_fails_on_every_rank(pair, mode):
    """The last rank's loss does not reach the variable (its tape gives only None): its
    DistributedGradientTape still makes a call, of no tensors, so every rank fails it
    instead of the others pairing their gradients with that rank's next step's."""
    rank, n = pair[0], pair[1]
    c = Checks()
    w = tf.Variable([1.0, 2.0])
    connected = rank != n - 1

    def step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(w * w) if connected else tf.constant(3.0)
        return hvd.DistributedGradientTape(tape).gradient(loss, [w])

    expect_error(c, mode, step, words=(f"rank {n - 1} submitted no tensors",))
    still_works(c, rank, n)
    c.finish()
