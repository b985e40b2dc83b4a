"""ml_comm.tensorflow.allgather / reducescatter / alltoall / allreduce(op): exact results for
every dtype, eager and inside tf.function (several collectives in one function, run twice),
uneven first dimensions with a rank of no rows, rows not divisible by the ranks, uneven
splits; gradients as Horovod defines them; a mismatch named on every rank."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from mpi_helpers import REDUCED_DTYPES, Checks, make_input
from tf_helpers import check_kind, module_session_fixture, run_in_mode

import ml_comm as mc
import ml_comm.tensorflow as mtf

pytestmark = pytest.mark.mpi

tf_session = module_session_fixture()
MODES = ["eager", "function"]


def rows_of(rank: int) -> int:
    return (rank * 3) % 4 + (rank > 0) * rank  # rank 0: none


@pytest.mark.parametrize("mode", MODES)
def test_allgather_rows_carried_by_the_counts(tf_session, direct_4k, mode):
    """Rows within the 4 KiB direct payload come with the counts (no ring after them), rows
    past it on one rank take the ring on every rank: exact either way, eager and inside
    tf.function."""
    c = Checks()
    r, n = tf_session.rank, tf_session.nranks
    small = make_input(r, (rows_of(r), 3), np.float32, 4)
    large = make_input(r, (400 if r == n - 1 else rows_of(r), 3), np.float32, 5)  # 4,800 bytes
    results = run_in_mode(mode, lambda ts: [mtf.allgather(t) for t in ts], [[small, large]] * 2)
    for run, (got_small, got_large) in enumerate(results):
        want = np.concatenate([make_input(q, (rows_of(q), 3), np.float32, 4) for q in range(n)])
        c.equal(got_small, want, f"{mode} run {run}: rows carried")
        want = [
            make_input(q, (400 if q == n - 1 else rows_of(q), 3), np.float32, 5) for q in range(n)
        ]
        c.equal(got_large, np.concatenate(want), f"{mode} run {run}: rows on the ring")
    c.finish()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", REDUCED_DTYPES, ids=str)
def test_collectives_in_one_call(tf_session, dtype, mode):
    c = Checks()
    r, n = tf_session.rank, tf_session.nranks
    rows = 2 * n + 1  # not divisible by n
    splits = [(r + 2 * d) % 3 for d in range(n)]

    def fn(ts):
        gathered = mtf.allgather(ts[0])
        scattered = mtf.reducescatter(ts[1], op="sum")
        received, received_splits = mtf.alltoall(ts[2], splits=splits)
        biggest = mtf.allreduce(ts[1], op="max")
        return [gathered, scattered, received, received_splits, biggest]

    inputs = [
        make_input(r, (rows_of(r), 3), dtype, 1),
        make_input(r, (rows, 2), dtype, 2),
        make_input(r, (sum(splits), 2), dtype, 3),
    ]
    results = run_in_mode(mode, fn, [inputs, inputs])
    stack = np.stack([make_input(q, (rows, 2), dtype, 2) for q in range(n)])
    wide = np.int64 if np.dtype(dtype).kind in "iu" else np.float64
    total = stack.astype(wide).sum(axis=0).astype(dtype)  # integers wrap around
    shares = [rows // n + (1 if q < rows % n else 0) for q in range(n)]
    first = sum(shares[:r])
    sent = {q: [(q + 2 * d) % 3 for d in range(n)] for q in range(n)}

    def block(q):  # rank q's rows for this rank
        rows_q = make_input(q, (sum(sent[q]), 2), dtype, 3)
        start = sum(sent[q][:r])
        return rows_q[start : start + sent[q][r]]

    for run, (gathered, scattered, received, received_splits, biggest) in enumerate(results):
        what = f"{mode} run {run} {np.dtype(dtype).name}"
        want = np.concatenate([make_input(q, (rows_of(q), 3), dtype, 1) for q in range(n)])
        c.equal(gathered, want, f"{what}: allgather")
        c.equal(scattered, total[first : first + shares[r]], f"{what}: reducescatter")
        c.equal(received, np.concatenate([block(q) for q in range(n)]), f"{what}: alltoall")
        c.equal(received_splits, np.array([sent[q][r] for q in range(n)], np.int64), what)
        c.equal(biggest, stack.max(axis=0), f"{what}: allreduce max")
    c.finish()


@pytest.mark.parametrize("mode", MODES)
def test_bool_is_moved_never_reduced(tf_session, mode):
    """bool travels through allgather, alltoall and broadcast; the reductions' ops do not
    take it (TensorFlow names the dtype when the op is made, on every rank alike)."""
    c = Checks()
    r, n = tf_session.rank, tf_session.nranks
    mine = make_input(r, (rows_of(r), 3), np.bool_)
    even = make_input(r, (2 * n, 3), np.bool_, 1)

    def fn(ts):
        return [mtf.allgather(ts[0]), mtf.alltoall(ts[1])[0], mc.broadcast(ts[1], root=n - 1)]

    for run, (gathered, received, root_values) in enumerate(
        run_in_mode(mode, fn, [[mine, even]] * 2)
    ):
        want = np.concatenate([make_input(q, (rows_of(q), 3), np.bool_) for q in range(n)])
        c.equal(gathered, want, f"{mode} run {run}: allgather of bool")
        want = np.concatenate(
            [make_input(q, (2 * n, 3), np.bool_, 1)[2 * r : 2 * r + 2] for q in range(n)]
        )
        c.equal(received, want, f"{mode} run {run}: alltoall of bool")
        c.equal(root_values, make_input(n - 1, (2 * n, 3), np.bool_, 1), f"{mode}: broadcast")
    for reduce in (lambda t: mtf.allreduce(t, op="max"), lambda t: mtf.reducescatter(t, op="sum")):
        # Made eagerly the op fails with InvalidArgumentError, traced with TypeError.
        with pytest.raises((TypeError, tf.errors.InvalidArgumentError), match="bool"):
            run_in_mode(mode, lambda ts, reduce=reduce: [reduce(ts[0])], [[even]])
    with pytest.raises(TypeError, match="cannot reduce dtype bool"):
        mc.gradients([tf.constant(even)])
    c.finish()


@pytest.mark.parametrize("mode", MODES)
def test_gradients(tf_session, mode):
    c = Checks()
    r, n = tf_session.rank, tf_session.nranks
    x0 = np.arange(2 * (r + 1), dtype=np.float32).reshape(r + 1, 2) + r
    y0 = np.arange(4 * n, dtype=np.float32).reshape(2 * n, 2)

    def grads(x, y):
        with tf.GradientTape(persistent=True) as tape:
            tape.watch([x, y])
            g = mtf.allgather(x)
            weights = tf.reshape(tf.range(tf.size(g), dtype=tf.float32), tf.shape(g))
            loss_g = tf.reduce_sum(g * weights)
            s = mtf.reducescatter(y, op="sum")
            loss_s = tf.reduce_sum(s) * float(r + 1)
            a = mtf.allreduce(y, op="sum")
            loss_a = tf.reduce_sum(a) * float(r + 1)
        return [tape.gradient(loss_g, x), tape.gradient(loss_s, y), tape.gradient(loss_a, y)]

    if mode == "eager":
        gx, gy_s, gy_a = grads(tf.constant(x0), tf.constant(y0))
    else:
        gx, gy_s, gy_a = tf.function(grads)(tf.constant(x0), tf.constant(y0))
    # allgather: this rank's rows of the upstream gradient averaged over the ranks (the
    # weights are the same on every rank, so the average is the weights).
    first = sum(q + 1 for q in range(r))
    weights = np.arange(2 * sum(q + 1 for q in range(n)), dtype=np.float32).reshape(-1, 2)
    c.equal(gx.numpy(), weights[first : first + r + 1], f"{mode}: allgather gradient")
    # reducescatter sum: every rank's upstream gradient (q + 1 on its rows), gathered, times n.
    shares = [2 * n // n] * n
    want = np.concatenate([np.full((shares[q], 2), (q + 1) * n, np.float32) for q in range(n)])
    c.equal(gy_s.numpy(), want, f"{mode}: reducescatter gradient")
    # allreduce sum: the upstream gradients summed over the ranks.
    c.equal(gy_a.numpy(), np.full((2 * n, 2), n * (n + 1) / 2, np.float32), f"{mode}: allreduce")
    c.finish()


@pytest.mark.parametrize("mode", MODES)
def test_a_scalar_on_one_rank_fails_on_every_rank(tf_session, mode):
    """One rank's 0-d tensor in a collective of rows: the op fails on every rank with
    InvalidArgumentError, read as ml_comm's BadArgumentError, naming that rank (eagerly
    and traced), instead of the others waiting; the team keeps working."""
    c = Checks()
    r, n = tf_session.rank, tf_session.nranks
    last = n - 1
    x = tf.constant(1.0) if r == last else tf.ones((n, 2))
    calls = [lambda: mtf.allgather(x), lambda: mtf.reducescatter(x), lambda: mtf.alltoall(x)]
    for k, call in enumerate(calls):
        run = tf.function(call) if mode == "function" else call
        e = c.raises(tf.errors.InvalidArgumentError, run, words=(f"rank {last}: a 0-d tensor",))
        check_kind(c, e, tf.errors.InvalidArgumentError, mc.BadArgumentError, f"{mode} call {k}")
    out = mtf.allgather(tf.fill((r, 1), r))
    c.equal(out.numpy(), np.concatenate([np.full((q, 1), q, np.int32) for q in range(n)]), "after")
    c.finish()


def test_mismatch_named_on_every_rank(tf_session):
    c = Checks()
    r, n = tf_session.rank, tf_session.nranks
    if n < 2:
        pytest.skip("a mismatch needs at least 2 ranks")
    x = tf.ones((4, 3))
    call = (lambda: mtf.reducescatter(x, "sum")) if r == n - 1 else (lambda: mtf.allgather(x))
    e = c.raises(tf.errors.FailedPreconditionError, call, words=("ranks disagree",))
    c.true(isinstance(e, mc.MismatchError), f"eagerly raised as {type(e)}")
    check_kind(c, e, tf.errors.FailedPreconditionError, mc.MismatchError, "collectives")
    text = str(e)
    c.true("(allgather" in text and "(reducescatter, sum" in text, f"message: {text}")
    out = mtf.allgather(tf.fill((r, 1), r))
    c.equal(out.numpy(), np.concatenate([np.full((q, 1), q, np.int32) for q in range(n)]), "after")
    c.finish()
