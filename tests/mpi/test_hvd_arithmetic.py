"""ml_comm.horovod's arithmetic and returns where Horovod defines them, exact integer-valued
inputs: every dtype Horovod reduces (uint8 ... float64) under Sum, Average (the sum times
1/size as Horovod scales: float32 times float32(1/3) is not float32 / 3, integers are
truncated toward zero), Min, Max and Product; 16-bit floats scaled in float32; a sparse
integer Average in floating point; alltoall's return; bool moved by broadcast, allgather
and alltoall; in-place broadcast in a tf.compat.v1 graph. The rules of mpi_helpers.py
hold."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from hvd_helpers import horovod_average, horovod_scaled, hvd_session  # noqa: F401
from mpi_helpers import REDUCED_DTYPES, Checks, make_input

import ml_comm.horovod.tensorflow as hvd
from ml_comm.horovod.ops import OP_NAMES

pytestmark = pytest.mark.mpi

HOROVOD_DTYPES = [d for d in REDUCED_DTYPES if d.name != "bfloat16"] + [np.dtype("bfloat16")]


def reference(op, stack: np.ndarray, dtype: np.dtype) -> np.ndarray:
    wide = np.int64 if dtype.kind in "iu" else np.float64
    if op == hvd.Min:
        return stack.min(axis=0)
    if op == hvd.Max:
        return stack.max(axis=0)
    if op == hvd.Product:
        return stack.astype(wide).prod(axis=0).astype(dtype)  # integers wrap around
    summed = stack.astype(wide).sum(axis=0).astype(dtype)  # exact, wrapped as the core's
    return summed if op == hvd.Sum else horovod_average(summed, stack.shape[0])


@pytest.mark.parametrize("dtype", HOROVOD_DTYPES, ids=str)
@pytest.mark.parametrize("grouped", [False, True], ids=["allreduce", "grouped"])
def test_every_dtype_and_op(hvd_session, dtype, grouped):  # noqa: F811
    rank, n = hvd_session
    c = Checks()
    for op in (hvd.Sum, hvd.Average, hvd.Min, hvd.Max, hvd.Product):
        if op == hvd.Average and dtype.itemsize == 2 and dtype.kind == "f":
            continue  # 16-bit float averages round at every step: checked through sums
        shapes = [(7,), (3, 4)]
        mine = [make_input(rank, s, dtype, k) for k, s in enumerate(shapes)]
        if op == hvd.Product:  # -1, 1, 2 and 0 keep products exact in every dtype
            mine = [(m.astype(np.int64) % 4 - 1).astype(dtype) for m in mine]
        tensors = [tf.constant(m) for m in mine]
        if grouped:
            out = hvd.grouped_allreduce(tensors, op=op)
        else:
            out = [hvd.allreduce(t, op=op) for t in tensors]
        for k, (shape, got) in enumerate(zip(shapes, out)):
            stack = np.stack([make_input(q, shape, dtype, k) for q in range(n)])
            if op == hvd.Product:
                stack = (stack.astype(np.int64) % 4 - 1).astype(dtype)
            what = f"{OP_NAMES[op]} of {dtype.name}{shape}"
            c.true(got.dtype == tf.as_dtype(dtype), f"{what}: dtype {got.dtype.name}")
            c.equal(got.numpy(), reference(op, stack, dtype), what)
    c.finish()


@pytest.mark.parametrize("dtype", [np.float16, "bfloat16"], ids=str)
def test_half_floats_scale_in_float32(hvd_session, dtype):  # noqa: F811
    """prescale and postscale multiply 16-bit floats in float32 and round once, as
    Horovod's CPU path does: a factor such as 0.3 rounded to float16 first would give
    other values."""
    rank, n = hvd_session
    c = Checks()
    dtype = np.dtype(dtype)
    x = np.arange(1, 33, dtype=np.float32).astype(dtype) * dtype.type(3)
    factor = 0.3
    pre = hvd.allreduce(tf.constant(x), op=hvd.Sum, prescale_factor=factor)
    scaled = (x.astype(np.float32) * np.float32(factor)).astype(dtype)
    summed = np.zeros_like(scaled)
    for _ in range(n):  # the core's sum: float32 additions rounded to the dtype each time
        summed = (summed.astype(np.float32) + scaled.astype(np.float32)).astype(dtype)
    c.equal(pre.numpy(), summed, f"{dtype.name} prescale")
    post = hvd.reducescatter(tf.constant(np.tile(x, n)), op=hvd.Sum, postscale_factor=factor)
    total = np.zeros_like(x)
    for _ in range(n):
        total = (total.astype(np.float32) + x.astype(np.float32)).astype(dtype)
    want = (total.astype(np.float32) * np.float32(factor)).astype(dtype)
    c.equal(post.numpy(), want, f"{dtype.name} reducescatter postscale")
    rounded_first = (total * dtype.type(factor)).astype(dtype)
    c.true(not np.array_equal(want, rounded_first), "the check tells the two roundings apart")
    c.finish()


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=str)
@pytest.mark.parametrize("arithmetic_optimization", [True, False], ids=["optimized", "plain"])
def test_graph_scaling_is_horovods(hvd_session, dtype, arithmetic_optimization):  # noqa: F811
    """In a tf.compat.v1 graph with tf.test's session settings, the factors and the Average
    give Horovod's values whether TensorFlow's arithmetic optimizer (which reorders float
    multiplications) runs or not. Only rank 0 sends values, so every sum is exact and
    the scaling alone rounds."""
    from tensorflow.core.protobuf import rewriter_config_pb2 as rewriter

    rank, n = hvd_session
    c = Checks()
    x = np.random.default_rng(7).uniform(-100, 100, (4 * n, 3)).astype(dtype)
    mine = x if rank == 0 else np.zeros_like(x)
    factor = 0.6172
    config = tf.compat.v1.ConfigProto()
    options = config.graph_options.rewrite_options
    options.constant_folding = rewriter.RewriterConfig.OFF
    options.arithmetic_optimization = (
        rewriter.RewriterConfig.ON if arithmetic_optimization else rewriter.RewriterConfig.OFF
    )
    with tf.Graph().as_default(), tf.compat.v1.Session(config=config) as sess:
        t = tf.compat.v1.placeholder(tf.as_dtype(dtype), x.shape)
        calls = [
            hvd.reducescatter(t, op=hvd.Sum, prescale_factor=factor),
            hvd.allreduce(t, op=hvd.Sum, postscale_factor=factor),
            hvd.allreduce(t, op=hvd.Average),
            hvd.grouped_allreduce([t], op=hvd.Average, postscale_factor=factor)[0],
        ]
        got = sess.run(calls, {t: mine})
    mine_rows = slice(4 * rank, 4 * rank + 4)
    c.equal(got[0], horovod_scaled(x, float(np.float32(factor)))[mine_rows], "prescale")
    c.equal(got[1], horovod_scaled(x, float(np.float32(factor))), "postscale")
    c.equal(got[2], horovod_average(x, n), "Average")
    c.equal(got[3], horovod_average(x, n, factor), "Average with postscale")
    c.finish()


def test_sparse_integer_average_is_floating(hvd_session):  # noqa: F811
    """Horovod divides the gathered values with TensorFlow's true division: int32 values
    average to float64."""
    rank, n = hvd_session
    c = Checks()
    values = tf.constant([[rank + 1, 2 * rank]], tf.int32)
    sparse = tf.IndexedSlices(values, tf.constant([rank]), tf.constant([n, 2]))
    out = hvd.allreduce(sparse, op=hvd.Average)
    c.true(out.values.dtype == tf.float64, f"values dtype {out.values.dtype.name}")
    want = np.array([[q + 1, 2 * q] for q in range(n)], np.float64) / n
    c.equal(out.values.numpy(), want, "averaged values")
    c.equal(out.indices.numpy(), np.arange(n, dtype=np.int32), "indices")
    c.finish()


def test_alltoall_returns_splits_only_when_given(hvd_session):  # noqa: F811
    rank, n = hvd_session
    c = Checks()
    x = tf.constant(make_input(rank, (2 * n, 3), np.float32))
    alone = hvd.alltoall(x)
    c.true(isinstance(alone, tf.Tensor), f"without splits: {type(alone).__name__}")
    want = np.concatenate(
        [make_input(q, (2 * n, 3), np.float32)[2 * rank : 2 * rank + 2] for q in range(n)]
    )
    c.equal(alone.numpy(), want, "equal parts")
    received, splits = hvd.alltoall(x, splits=[2] * n)
    c.equal(received.numpy(), want, "with splits")
    c.true(splits.dtype == tf.int32, f"received splits dtype {splits.dtype.name}")
    c.equal(splits.numpy(), np.full(n, 2, np.int32), "received splits")
    c.finish()


def test_bool_moves(hvd_session):  # noqa: F811
    rank, n = hvd_session
    c = Checks()
    flags = tf.constant(make_input(rank, (2 * n, 2), np.bool_))
    c.equal(
        hvd.broadcast(flags, n - 1).numpy(), make_input(n - 1, (2 * n, 2), np.bool_), "broadcast"
    )
    want = np.concatenate([make_input(q, (2 * n, 2), np.bool_) for q in range(n)])
    c.equal(hvd.allgather(flags).numpy(), want, "allgather")
    parts = [make_input(q, (2 * n, 2), np.bool_)[2 * rank : 2 * rank + 2] for q in range(n)]
    c.equal(hvd.alltoall(flags).numpy(), np.concatenate(parts), "alltoall")
    c.finish()


def test_v1_graph_broadcast_in_place(hvd_session):  # noqa: F811
    """In a tf.compat.v1 graph the tensors broadcast_ returns run the assignment."""
    rank, n = hvd_session
    c = Checks()
    with tf.Graph().as_default(), tf.compat.v1.Session() as sess:
        var = tf.compat.v1.Variable(np.full(3, rank, np.int8))
        sess.run(var.initializer)
        (value,) = hvd.broadcast_([var], n - 1)
        c.equal(sess.run(value), np.full(3, n - 1, np.int8), "broadcast_'s value")
        c.equal(sess.run(var), np.full(3, n - 1, np.int8), "the variable after broadcast_")
    c.finish()
