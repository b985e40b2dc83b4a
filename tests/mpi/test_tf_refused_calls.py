"""The TensorFlow front end's arguments that only one rank finds wrong (a string tensor
among the gradients, something that is no tensor, a None to broadcast or to gather, an
unknown op): that rank raises
its own error before it builds any op, eagerly or while tracing a tf.function; every other
rank's matching op fails at once with InvalidArgumentError (ml_comm's BadArgumentError)
naming that rank and the argument, instead of waiting for an op the rank never runs; then
every rank goes on in step (an exact average after each case).

The last rank makes the bad call; at 1 rank there is no other rank to tell."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest
import tensorflow as tf
from mpi_helpers import Checks, expected_average, make_input
from tf_helpers import check_kind, module_session_fixture, to_numpy

import ml_comm as mc
import ml_comm.tensorflow as mtf

pytestmark = pytest.mark.mpi

tf_session = module_session_fixture()


@dataclass(frozen=True)
class Case:
    name: str
    good: Callable[[], object]  # the call of the ranks whose arguments are right
    bad: Callable[[], object]  # the last rank's
    local: str  # what the last rank's own error says
    told: str  # what the other ranks' error says of the last rank


def _ones(*sizes: int) -> list[tf.Tensor]:
    return [tf.ones([n]) for n in sizes]


CASES = [
    Case(
        "gradient of dtype string",
        lambda: mc.gradients(_ones(4, 3)),
        lambda: mc.gradients(_ones(4) + [tf.constant(["a", "b", "c"])]),
        "cannot reduce dtype string",
        "tensor 1 of its list has a dtype the call does not take",
    ),
    Case(
        # Large enough for several of the team's segments on the good ranks.
        "gradient that is no tensor, among large ones",
        lambda: mc.gradients(_ones(70000, 30011)),
        lambda: mc.gradients([object()] + _ones(30011)),
        "gradients[0] is not a tensor",
        "tensor 0 of its list is not an array",
    ),
    Case(
        "gradients not a list",
        lambda: mc.gradients(_ones(4, 3)),
        lambda: mc.gradients({"w": tf.ones([4])}),
        "gradients takes a list of tensors, got dict",
        "an argument is of a type the call does not take",
    ),
    Case(
        "allreduce of an unknown op",
        lambda: mtf.allreduce(tf.ones([5]), "max"),
        lambda: mtf.allreduce(tf.ones([5]), "mean"),
        "op must be one of",
        "an argument failed the call's check",
    ),
    Case(
        "allgather of a None",
        lambda: mtf.allgather(tf.ones([3, 2])),
        lambda: mtf.allgather(None),
        "allgather's tensor is None",
        "an argument is None, not an array",
    ),
    Case(
        "allgather of strings",
        lambda: mtf.allgather(tf.ones([3, 2])),
        lambda: mtf.allgather(tf.constant([["a", "b"]])),
        "cannot move dtype string",
        "an argument has a dtype the call does not take",
    ),
    Case(
        "reducescatter of no tensor",
        lambda: mtf.reducescatter(tf.ones([8, 2])),
        lambda: mtf.reducescatter(object()),
        "reducescatter's tensor is not a tensor",
        "an argument is not an array",
    ),
    Case(
        "reducescatter of bools",
        lambda: mtf.reducescatter(tf.ones([8, 2])),
        lambda: mtf.reducescatter(tf.ones([8, 2], tf.bool)),
        "cannot reduce dtype bool",
        "an argument has a dtype the call does not take",
    ),
    Case(
        "alltoall splits of no tensor",
        lambda: mtf.alltoall(tf.ones([12, 2])),
        lambda: mtf.alltoall(tf.ones([12, 2]), splits=object()),
        "alltoall's splits is not a tensor",
        "an argument is not an array",
    ),
    Case(
        "broadcast of a None",
        lambda: mc.broadcast(_ones(2, 5)),
        lambda: mc.broadcast(_ones(2) + [None]),
        "broadcast values[1] is None",
        "tensor 1 of its list is None, not an array",
    ),
]


def call(mode: str, fn):
    return fn() if mode == "eager" else tf.function(fn)()


def still_works(c: Checks, session, mode: str) -> None:
    shapes = [(3, 4), (500,)]
    grads = [make_input(session.rank, s, np.float32, 9 + i) for i, s in enumerate(shapes)]
    out = call(mode, lambda: mc.gradients([tf.constant(g) for g in grads]))
    for i, s in enumerate(shapes):
        want = expected_average(s, np.float32, session.nranks, 9 + i)
        c.equal(to_numpy(out[i]), want, f"{mode}: gradients[{i}] after the refused call")


@pytest.mark.parametrize("mode", ["eager", "function"])
@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_one_rank_refuses_its_call(tf_session, case, mode):
    if tf_session.nranks < 2:
        pytest.skip("one rank has no other rank to tell")
    c = Checks()
    last = tf_session.nranks - 1
    if tf_session.rank == last:
        c.raises(mc.BadArgumentError, call, mode, case.bad, words=(case.local,))
    else:
        told = (f"rank {last}: {case.told}",)
        e = c.raises(tf.errors.InvalidArgumentError, call, mode, case.good, words=told)
        c.true("No rank moved any data" in str(e), str(e))
        check_kind(c, e, tf.errors.InvalidArgumentError, mc.BadArgumentError, mode)
        if mode == "eager":
            c.true(isinstance(e, mc.BadArgumentError), f"eager: raised {type(e)}")
    still_works(c, tf_session, mode)
    c.finish()
