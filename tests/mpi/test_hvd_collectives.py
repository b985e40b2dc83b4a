"""ml_comm.horovod's collectives as Horovod documents them, exact integer-valued inputs:
Sum vs Average (= sum / size), pre- and postscale factors, fp16 compression, integer
tensors, grouped calls, eager and in tf.function; broadcast of every variable dtype;
objects; what is not supported raises. The rules of mpi_helpers.py hold."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from hvd_helpers import horovod_average, hvd_session  # noqa: F401
from mpi_helpers import Checks

import ml_comm as mc
import ml_comm.horovod.tensorflow as hvd

pytestmark = pytest.mark.mpi


def ramp(rank, n=5, dtype=np.float32):
    return (np.arange(n) + 10 * rank).astype(dtype)


def total(nranks, n=5, dtype=np.float32):
    return sum(ramp(r, n, np.float64) for r in range(nranks)).astype(dtype)


@pytest.mark.parametrize("mode", ["eager", "function"])
def test_sum_average_and_scaling(hvd_session, mode):  # noqa: F811
    rank, n = hvd_session
    c = Checks()

    def calls(x, i, odd):
        return [
            hvd.allreduce(x, op=hvd.Sum),
            hvd.allreduce(x),  # Average by default
            hvd.allreduce(x, average=False),
            hvd.allreduce(x, op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.25),
            hvd.allreduce(x, op=hvd.Sum, compression=hvd.Compression.fp16),
            hvd.allreduce(i, op=hvd.Sum),
            *hvd.grouped_allreduce([x, i], op=hvd.Sum),
            hvd.allreduce(odd, op=hvd.Sum, compression=hvd.Compression.fp16),
        ]

    run = tf.function(calls) if mode == "function" else calls
    odd = tf.constant([2049.0, 3.0], tf.float32)  # 2049 has no float16: it travels as 2048
    x, i = tf.constant(ramp(rank)), tf.constant(ramp(rank, 3, np.int64))
    out = [o.numpy() for o in run(x, i, odd)]
    want = total(n)
    c.equal(out[0], want, "Sum")
    c.equal(out[1], horovod_average(want, n), "Average: sum times 1/size")
    c.equal(out[2], want, "average=False")
    c.equal(out[3], want * np.float32(0.5), "prescale 2 postscale 0.25: half the sum")
    c.equal(out[4], want, "fp16 compression (exact small integers), cast back")
    c.equal(out[5], total(n, 3, np.int64), "int64 Sum")
    c.equal(out[6], want, "grouped float32")
    c.equal(out[7], total(n, 3, np.int64), "grouped int64")
    c.equal(out[8], np.array([2048.0 * n, 3.0 * n], np.float32), "fp16 compression used")
    c.finish()


def test_unsupported_ops_raise_naming_the_alternative(hvd_session):  # noqa: F811
    c = Checks()
    x = tf.constant([1.0])
    c.raises(NotImplementedError, hvd.allreduce, x, op=hvd.Adasum, words=["Average"])
    c.raises(ValueError, hvd.allreduce, x, average=True, op=hvd.Sum, words=["supersedes"])
    c.raises(NotImplementedError, hvd.allreduce, x, process_set=object(), words=["global"])
    c.raises(NotImplementedError, hvd.ProcessSet, [0], words=["global process set"])
    c.raises(NotImplementedError, hvd.join, words=["equal_steps"])
    c.raises(RuntimeError, hvd.broadcast_global_variables, 0, words=["broadcast_variables"])
    c.finish()


VARIABLE_DTYPES = [
    tf.bool,
    tf.int8,
    tf.uint8,
    tf.int16,
    tf.uint16,
    tf.int32,
    tf.uint32,
    tf.int64,
    tf.uint64,
    tf.float16,
    tf.bfloat16,
    tf.float32,
    tf.float64,
    tf.complex64,
    tf.complex128,
]


def test_broadcast_every_variable_dtype(hvd_session):  # noqa: F811
    rank, n = hvd_session
    c = Checks()
    root = n - 1

    def values(r, dtype):
        base = np.arange(6).reshape(2, 3) + r
        if dtype == tf.bool:
            return base % 2 == 0
        if dtype.is_complex:
            return (base + 1j * base).astype(dtype.as_numpy_dtype)
        return base.astype(dtype.as_numpy_dtype)

    for dtype in VARIABLE_DTYPES:
        got = hvd.broadcast(tf.constant(values(rank, dtype)), root).numpy()
        c.equal(got, values(root, dtype), f"broadcast {dtype.name}")
    variables = [tf.Variable(values(rank, d)) for d in VARIABLE_DTYPES]
    hvd.broadcast_variables(variables, root_rank=0)
    for v, d in zip(variables, VARIABLE_DTYPES):
        c.equal(v.numpy(), values(0, d), f"broadcast_variables {d.name}")
    c.finish()


def test_objects(hvd_session):  # noqa: F811
    rank, n = hvd_session
    c = Checks()
    c.true(hvd.broadcast_object({"rank": rank}, root_rank=n - 1) == {"rank": n - 1}, "object")
    c.true(hvd.allgather_object(("r", rank)) == [("r", r) for r in range(n)], "allgather_object")
    c.true(hvd.broadcast_object_fn(root_rank=0)([rank]) == [0], "broadcast_object_fn")
    c.finish()


def test_objects_that_fail_on_one_rank_fail_on_every_rank(hvd_session):  # noqa: F811
    """An object one rank cannot pickle, or a root one rank names differently: every rank
    raises, naming the rank, instead of the others waiting in the collective; then the
    session goes on."""
    rank, n = hvd_session
    c = Checks()
    last = n - 1

    def unpicklable():  # a local function has no importable name
        return rank

    mine = unpicklable if rank == last else rank
    c.raises(
        mc.BadArgumentError,
        hvd.broadcast_object,
        mine,
        root_rank=last,
        words=(f"rank {last}'s object cannot be pickled",),
    )
    c.raises(mc.BadArgumentError, hvd.allgather_object, mine, words=(f"rank {last}: ",))
    c.raises(
        mc.BadArgumentError,
        hvd.broadcast_object,
        rank,
        root_rank=n if rank == last else 0,
        words=(f"rank {last}: root {n} is out of range",),
    )
    if n > 1:
        c.raises(
            mc.MismatchError,
            hvd.broadcast_object,
            rank,
            root_rank=min(rank, 1),
            words=("different roots",),
        )
    c.true(hvd.allgather_object(rank) == list(range(n)), "allgather_object afterwards")
    c.finish()


def test_average_is_one_fused_reduction(hvd_session):  # noqa: F811
    rank, n = hvd_session
    c = Checks()
    before = mc.team_stats(0)["calls"]
    hvd.grouped_allreduce([tf.constant(ramp(rank)), tf.constant(ramp(rank, 7))])
    calls = mc.team_stats(0)["calls"] - before
    c.true(calls == (1 if n > 1 else 0), f"{calls} team calls for one grouped allreduce")
    c.finish()


@pytest.mark.parametrize("mode", ["eager", "function"])
def test_gather_scatter_alltoall_and_elementwise_ops(hvd_session, mode):  # noqa: F811
    rank, n = hvd_session
    c = Checks()

    def rows(r):  # rank r has r + 1 rows (uneven first dimensions)
        return (np.arange((r + 1) * 2).reshape(r + 1, 2) + 100 * r).astype(np.float32)

    def calls(mine, full, send):
        splits = tf.constant([(rank + d) % 2 for d in range(n)], tf.int32)
        received, counts = hvd.alltoall(send[: tf.reduce_sum(splits)], splits=splits)
        return [
            hvd.allgather(mine),
            *hvd.grouped_allgather([mine, mine * 2]),
            hvd.reducescatter(full, op=hvd.Sum),
            hvd.reducescatter(full),
            hvd.allreduce(mine[:1], op=hvd.Min),
            hvd.allreduce(mine[:1], op=hvd.Max),
            hvd.allreduce(mine[:1] + 1, op=hvd.Product),
            received,
            counts,
        ]

    run = tf.function(calls) if mode == "function" else calls
    full = np.arange(n * 2 * 3).reshape(n * 2, 3).astype(np.float32) + rank
    send = (np.arange(n) + 10 * rank).astype(np.int32)
    out = [o.numpy() for o in run(tf.constant(rows(rank)), tf.constant(full), tf.constant(send))]
    gathered = np.concatenate([rows(r) for r in range(n)])
    c.equal(out[0], gathered, "allgather of uneven first dimensions")
    c.equal(out[1], gathered, "grouped_allgather 1")
    c.equal(out[2], gathered * 2, "grouped_allgather 2")
    summed = sum(np.arange(n * 6).reshape(n * 2, 3).astype(np.float32) + r for r in range(n))
    c.equal(out[3], summed[2 * rank : 2 * rank + 2], "reducescatter Sum: this rank's rows")
    mine = summed[2 * rank : 2 * rank + 2]
    c.equal(out[4], horovod_average(mine, n), "reducescatter Average")
    firsts = [rows(r)[:1] for r in range(n)]
    c.equal(out[5], np.minimum.reduce(firsts), "Min")
    c.equal(out[6], np.maximum.reduce(firsts), "Max")
    c.equal(out[7], np.multiply.reduce([f + 1 for f in firsts]), "Product")
    # rank s sends (s + d) % 2 of its first values to rank d, in order.
    want = []
    for s in range(n):
        before = sum((s + d) % 2 for d in range(rank))
        want += list((np.arange(n) + 10 * s)[before : before + (s + rank) % 2])
    c.equal(out[8], np.array(want, np.int32), "alltoall received rows")
    c.equal(out[9], np.array([(s + rank) % 2 for s in range(n)], np.int32), "received splits")
    c.finish()


def test_sync_batch_normalization_uses_every_ranks_batch(hvd_session):  # noqa: F811
    rank, n = hvd_session
    c = Checks()
    layer = hvd.SyncBatchNormalization(momentum=0.0)
    x = tf.constant([[-(1.0 + rank)], [1.0 + rank]])  # mean 0 over all ranks
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = layer(x, training=True)
    c.true(tape.gradient(y, x) is not None, "a gradient through the reduced moments")
    c.equal(layer.moving_mean.numpy(), np.zeros(1, np.float32), "global mean")
    shifted = hvd.SyncBatchNormalization(momentum=0.0)  # rank r's mean r + 1: not the job's
    shifted(tf.constant([[float(rank)], [rank + 2.0]]), training=True)
    want_mean = np.array([(n + 1) / 2], np.float32)
    c.equal(shifted.moving_mean.numpy(), want_mean, "global mean of ranks' different means")
    squares = sum((1.0 + r) ** 2 for r in range(n))
    want = np.float32(2 * squares) / np.float32(2 * n)
    c.equal(layer.moving_variance.numpy(), np.array([want], np.float32), "global variance")
    c.finish()
