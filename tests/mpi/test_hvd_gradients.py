"""ml_comm.horovod's gradients of allreduce (grouped too), broadcast, allgather, alltoall and
reducescatter, against finite differences of the job's loss L = sum over ranks r of
<w_r, f(x)_r>, each rank with weights of its own. Horovod defines each gradient as a fixed
multiple c of dL/dx: c = 1 for allreduce and alltoall, 1/size for broadcast and allgather
(the upstream gradients are averaged), size for reducescatter. The collectives are
linear, so one step gives the exact derivative; inputs and steps are multiples of the
rank count, so averages divide exactly: every comparison is exact."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from hvd_helpers import hvd_session  # noqa: F401
from mpi_helpers import Checks, comm_world

import ml_comm.horovod.tensorflow as hvd

pytestmark = pytest.mark.mpi


def rows_of(rank: int, n: int, name: str) -> int:
    if name == "allgather":
        return rank + 1  # every rank a different number of rows
    return 2 * n if name in ("alltoall", "reducescatter_sum", "reducescatter_average") else 2


def collective(name: str, n: int, rank: int):
    """f(x) for one rank, and Horovod's factor c."""
    if name == "allreduce_sum":
        return (lambda x: hvd.allreduce(x, op=hvd.Sum)), 1.0
    if name == "allreduce_average":
        return (lambda x: hvd.allreduce(x, op=hvd.Average)), 1.0
    if name == "grouped_allreduce":
        return (lambda x: tf.concat(hvd.grouped_allreduce([x[:1], 3 * x[1:]], op=hvd.Sum), 0)), 1.0
    if name == "broadcast":
        return (lambda x: hvd.broadcast(x, n - 1)), 1.0 / n
    if name == "allgather":
        return (lambda x: hvd.allgather(x)), 1.0 / n
    if name == "alltoall":
        splits = [(rank + d) % 3 for d in range(n)]
        splits[-1] += 2 * n - sum(splits)
        return (lambda x: hvd.alltoall(x, splits=splits)[0]), 1.0
    if name == "reducescatter_sum":
        return (lambda x: hvd.reducescatter(x, op=hvd.Sum)), float(n)
    if name == "reducescatter_average":
        return (lambda x: hvd.reducescatter(x, op=hvd.Average)), float(n)
    raise ValueError(name)


NAMES = [
    "allreduce_sum",
    "allreduce_average",
    "grouped_allreduce",
    "broadcast",
    "allgather",
    "alltoall",
    "reducescatter_sum",
    "reducescatter_average",
]


def weights(rank: int, shape) -> np.ndarray:
    count = int(np.prod(shape))
    return (np.arange(count) % 5 + rank + 1).astype(np.float64).reshape(shape)


@pytest.mark.parametrize("mode", ["eager", "function"])
@pytest.mark.parametrize("name", NAMES)
def test_gradient_against_finite_differences(hvd_session, name, mode):  # noqa: F811
    rank, n = hvd_session
    c = Checks()
    comm = comm_world()
    f, factor = collective(name, n, rank)
    # Multiples of the rank count, and steps of it: averages divide exactly too.
    step = float(n)
    x0 = (np.arange(2 * rows_of(rank, n, name)) % 7 + 3 * rank).astype(np.float64) * step
    x0 = x0.reshape(rows_of(rank, n, name), 2)

    def analytic(x, w):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = f(x)
        return tape.gradient(y, x, output_gradients=w)

    run = analytic if mode == "eager" else tf.function(analytic)
    w = weights(rank, f(tf.constant(x0)).shape)  # (tf.function may not know the rows)
    got = run(tf.constant(x0), tf.constant(w)).numpy()

    def job_loss(x):
        y = f(tf.constant(x)).numpy()
        return comm.allreduce(float(np.sum(weights(rank, y.shape) * y)))

    # Every rank perturbs in turn, one element at a time; all ranks call the collective.
    sizes = comm.allgather(x0.size)
    want = np.zeros_like(x0)
    for q in range(n):
        for i in range(sizes[q]):
            loss = []
            for sign in (1.0, -1.0):
                x = x0.copy()
                if q == rank:
                    x.reshape(-1)[i] += sign * step
                loss.append(job_loss(x))
            if q == rank:
                want.reshape(-1)[i] = (loss[0] - loss[1]) / (2 * step)
    c.equal(got, factor * want, f"{name} ({mode}): gradient = {factor:g} x dL/dx")
    c.finish()
