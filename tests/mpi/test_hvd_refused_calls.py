"""ml_comm.horovod's own argument checks, made before ml_comm.tensorflow builds any op, when
only one rank fails them (a None, an op or a process set the others do not name, a dtype
broadcast cannot carry): that rank raises its own error, eagerly or while tracing a
tf.function; every other rank's matching op fails at once with InvalidArgumentError
(ml_comm's BadArgumentError) naming that rank, instead of waiting for an op the rank never
runs; then every rank goes on in step (exact results after each case).

The last rank makes the bad call; at 1 rank there is no other rank to tell."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest
import tensorflow as tf
from hvd_helpers import hvd_session  # noqa: F401
from mpi_helpers import Checks
from tf_helpers import check_kind

import ml_comm as mc
import ml_comm.horovod.tensorflow as hvd

pytestmark = pytest.mark.mpi


@dataclass(frozen=True)
class Case:
    name: str
    good: Callable[[], object]  # the call of the ranks whose arguments are right
    bad: Callable[[], object]  # the last rank's
    local: tuple[type, str]  # the last rank's own error: its class and words
    told: str  # what the other ranks' error says of the last rank


def _slices() -> tf.IndexedSlices:
    return tf.IndexedSlices(tf.ones([2, 3]), tf.constant([0, 2]), tf.constant([4, 3]))


FAILED_CHECK = "its call raised before it reached the other ranks"
VARIABLES = [tf.Variable(1.0), tf.Variable(2.0)]  # made once: a tf.function makes none
CASES = [
    Case(
        "allreduce of a None",
        lambda: hvd.allreduce(tf.ones([4])),
        lambda: hvd.allreduce(None),
        (mc.BadArgumentTypeError, "allreduce's tensor is None"),
        "an argument is None, not an array",
    ),
    Case(
        "grouped_allreduce with a None",
        lambda: hvd.grouped_allreduce([tf.ones([4]), tf.ones([2])]),
        lambda: hvd.grouped_allreduce([tf.ones([4]), None]),
        (mc.BadArgumentTypeError, "grouped_allreduce's tensors[1] is None"),
        "tensor 1 of its list is None, not an array",
    ),
    Case(
        "grouped_allreduce of IndexedSlices and a None",
        lambda: hvd.grouped_allreduce([_slices(), tf.ones([2])]),
        lambda: hvd.grouped_allreduce([_slices(), None]),
        (mc.BadArgumentTypeError, "grouped_allreduce's tensors[1] is None"),
        "an argument is None, not an array",  # a call of its own, after the slices'
    ),
    Case(
        "broadcast_variables with a None",
        # In a tf.function it returns an op, which a tf.function may not return.
        lambda: hvd.broadcast_variables(VARIABLES, 0) and None,
        lambda: hvd.broadcast_variables([VARIABLES[0], None], 0) and None,
        (mc.BadArgumentTypeError, "broadcast_variables' variables[1] is None"),
        "tensor 1 of its list is None, not an array",
    ),
    Case(
        "broadcast of a None",
        lambda: hvd.broadcast(tf.ones([4]), 0),
        lambda: hvd.broadcast(None, 0),
        (mc.BadArgumentTypeError, "broadcast's tensor is None"),
        "an argument is None, not an array",
    ),
    Case(
        "allreduce with Adasum",
        lambda: hvd.allreduce(tf.ones([4]), op=hvd.Sum),
        lambda: hvd.allreduce(tf.ones([4]), op=hvd.Adasum),
        (NotImplementedError, "op=Adasum is not supported"),
        FAILED_CHECK,
    ),
    Case(
        "grouped_allreduce of an unknown op",
        lambda: hvd.grouped_allreduce([tf.ones([4]), tf.ones([2])], op=hvd.Max),
        lambda: hvd.grouped_allreduce([tf.ones([4]), tf.ones([2])], op=7),
        (ValueError, "op must be one of"),
        FAILED_CHECK,
    ),
    Case(
        "allreduce of IndexedSlices with Max",
        lambda: hvd.allreduce(_slices(), op=hvd.Sum),
        lambda: hvd.allreduce(_slices(), op=hvd.Max),
        (NotImplementedError, "supports op=Sum and op=Average only"),
        FAILED_CHECK,
    ),
    Case(
        "allgather of a None",
        lambda: hvd.allgather(tf.ones([3, 2])),
        lambda: hvd.allgather(None),
        (mc.BadArgumentTypeError, "allgather's tensor is None"),
        "an argument is None, not an array",
    ),
    Case(
        "reducescatter with Max",
        lambda: hvd.reducescatter(tf.ones([8, 2]), op=hvd.Sum),
        lambda: hvd.reducescatter(tf.ones([8, 2]), op=hvd.Max),
        (NotImplementedError, "reducescatter supports op=Sum and op=Average"),
        FAILED_CHECK,
    ),
    Case(
        "alltoall of no tensor",
        lambda: hvd.alltoall(tf.ones([12, 2])),
        lambda: hvd.alltoall(object()),
        (mc.BadArgumentTypeError, "alltoall's tensor is not a tensor"),
        "an argument is not an array",
    ),
    Case(
        "broadcast of strings",
        lambda: hvd.broadcast(tf.ones([3]), 0),
        lambda: hvd.broadcast(tf.constant(["a", "b", "c"]), 0),
        (mc.BadArgumentTypeError, "cannot broadcast a tensor of dtype string"),
        "an argument has a dtype the call does not take",
    ),
    Case(
        "broadcast on another process set",
        lambda: hvd.broadcast(tf.ones([3]), 0),
        lambda: hvd.broadcast(tf.ones([3]), 0, process_set=object()),
        (NotImplementedError, "global process set only"),
        FAILED_CHECK,
    ),
]


def call(mode: str, fn):
    return fn() if mode == "eager" else tf.function(fn)()


def still_works(c: Checks, rank: int, n: int, mode: str) -> None:
    out = call(mode, lambda: hvd.allreduce(tf.constant([float(rank), 1.0]), op=hvd.Sum))
    c.equal(out.numpy(), np.array([n * (n - 1) / 2, n], np.float32), f"{mode}: allreduce after")


@pytest.mark.parametrize("mode", ["eager", "function"])
@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_one_rank_fails_a_horovod_check(hvd_session, case, mode):  # noqa: F811
    rank, n = hvd_session
    if n < 2:
        pytest.skip("one rank has no other rank to tell")
    c = Checks()
    last = n - 1
    if rank == last:
        kind, words = case.local
        c.raises(kind, call, mode, case.bad, words=(words,))
    else:
        start = time.monotonic()
        told = (f"rank {last}: {case.told}",)
        e = c.raises(tf.errors.InvalidArgumentError, call, mode, case.good, words=told)
        # Without the refusal the others would wait until the stall watchdog (60 s, then
        # 1800 s); 30 s leaves room for the first tf.function's trace at 4 ranks on 2 cores.
        c.true(time.monotonic() - start < 30, "the error came only after the stall watchdog")
        check_kind(c, e, tf.errors.InvalidArgumentError, mc.BadArgumentError, mode)
    still_works(c, rank, n, mode)
    c.finish()


@pytest.mark.parametrize("call", ["broadcast_object", "allgather_object"])
def test_one_rank_names_another_process_set_for_an_object(hvd_session, call):  # noqa: F811
    """The objects travel over mpi4py, which no watchdog sees: the last rank's process set
    travels with them, and every rank raises, naming it, instead of the others waiting
    for good; the next call is exact."""
    rank, n = hvd_session
    if n < 2:
        pytest.skip("one rank has no other rank to tell")
    c = Checks()
    fn = getattr(hvd, call)
    process_set = object() if rank == n - 1 else hvd.global_process_set
    told = (f"{call}: rank {n - 1}: process_set=",)
    c.raises(NotImplementedError, fn, rank, process_set=process_set, words=told)
    c.equal(np.array(hvd.allgather_object(rank)), np.arange(n), "allgather_object after")
    c.finish()


def test_an_empty_list_makes_no_call_to_refuse(hvd_session):  # noqa: F811
    """An empty list makes no call on any rank: where only the last rank's check fails,
    it raises and tells nothing, and the next call pairs as written."""
    rank, n = hvd_session
    c = Checks()
    if rank == n - 1:
        c.raises(NotImplementedError, hvd.grouped_allreduce, [], op=hvd.Adasum)
        c.raises(NotImplementedError, hvd.broadcast_, [], 0, process_set=object())
    else:
        c.true(hvd.grouped_allreduce([], op=hvd.Sum) == [], "grouped_allreduce([])")
        c.true(hvd.broadcast_([], 0) == [], "broadcast_([])")
    still_works(c, rank, n, "eager")
    c.finish()
