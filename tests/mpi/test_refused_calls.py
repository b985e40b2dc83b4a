"""An argument that only one rank finds wrong (a None among its gradients, a read-only
buffer, a collective of rows' input): that rank raises its own error, naming the
argument; every other rank's matching call fails at once with BadArgumentError naming
that rank and the argument, instead of waiting for a request the rank never makes; then
every rank goes on in step (an exact average after each case).

The last rank makes the bad call; at 1 rank there is no other rank to tell."""

from __future__ import annotations

import resource
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest
from ml_comm._core import lib
from mpi_helpers import Checks, expected_average, make_input

import ml_comm as mc

pytestmark = pytest.mark.mpi


def _read_only(n: int) -> np.ndarray:
    a = np.ones(n, np.float32)
    a.flags.writeable = False
    return a


@dataclass(frozen=True)
class Case:
    name: str
    good: Callable[[], object]  # the call of the ranks whose arguments are right
    bad: Callable[[], object]  # the last rank's
    local: type  # what the last rank raises
    told: str  # what the other ranks' error says of the last rank


def _ones(*sizes: int) -> list[np.ndarray]:
    """float32 arrays of ones, one of each size."""
    return [np.ones(n, np.float32) for n in sizes]


CASES = [
    Case(
        "gradient None",
        lambda: mc.gradients(_ones(4, 3)),
        lambda: mc.gradients(_ones(4) + [None]),
        mc.BadArgumentTypeError,
        "tensor 1 of its list is None, not an array",
    ),
    Case(
        # Large enough for the team's threads and the ring on the good ranks.
        "gradient None among large ones",
        lambda: mc.gradients(_ones(70000, 30011)),
        lambda: mc.gradients([None] + _ones(30011)),
        mc.BadArgumentTypeError,
        "tensor 0 of its list is None, not an array",
    ),
    Case(
        # Two dtypes: two requests on the good ranks; the second is dropped with the first.
        "gradient None against two dtypes",
        lambda: mc.gradients(_ones(4) + [np.ones(3, np.float64)]),
        lambda: mc.gradients(_ones(4) + [None]),
        mc.BadArgumentTypeError,
        "tensor 1 of its list is None, not an array",
    ),
    Case(
        "gradient a list",
        lambda: mc.gradients(_ones(4, 3)),
        lambda: mc.gradients(_ones(4) + [[1.0, 2.0, 3.0]]),
        mc.BadArgumentTypeError,
        "tensor 1 of its list is not an array",
    ),
    Case(
        "gradient of dtype object",
        lambda: mc.gradients(_ones(4, 3)),
        lambda: mc.gradients(_ones(4) + [np.array([None] * 3)]),
        mc.BadArgumentTypeError,
        "tensor 1 of its list has a dtype the call does not take",
    ),
    Case(
        "gradients not a list",
        lambda: mc.gradients(_ones(4, 3)),
        lambda: mc.gradients({"w": np.ones(4, np.float32)}),
        mc.BadArgumentTypeError,
        "an argument is of a type the call does not take",
    ),
    Case(
        "average of a read-only array",
        lambda: mc.average(_ones(5)[0]),
        lambda: mc.average(_read_only(5)),
        mc.BadArgumentError,
        "an argument failed the call's check",
    ),
    Case(
        "allreduce of None",
        lambda: mc.allreduce(_ones(5)[0], op="max"),
        lambda: mc.allreduce(None, op="max"),
        mc.BadArgumentTypeError,
        "an argument is None, not an array",
    ),
    Case(
        "check_buffers_match of a None",
        lambda: mc.check_buffers_match(_ones(2, 5)),
        lambda: mc.check_buffers_match(_ones(2) + [None]),
        mc.BadArgumentTypeError,
        "tensor 1 of its list is None, not an array",
    ),
    Case(
        "allgather of None",
        lambda: mc.allgather(np.ones((3, 2), np.float32)),
        lambda: mc.allgather(None),
        mc.BadArgumentTypeError,
        "an argument is None, not an array",
    ),
    Case(
        # Rows past the agreement's payload on the good ranks: a data request follows.
        "allgather of strings against large rows",
        lambda: mc.allgather(np.ones((40000, 3), np.float32)),
        lambda: mc.allgather(np.array([["x"] * 3])),
        mc.BadArgumentTypeError,
        "an argument has a dtype the call does not take",
    ),
    Case(
        "reducescatter of a list",
        lambda: mc.reducescatter(np.ones((8, 2), np.float32)),
        lambda: mc.reducescatter([[1.0, 2.0]] * 8),
        mc.BadArgumentTypeError,
        "an argument is not an array",
    ),
    Case(
        "alltoall of strings",
        lambda: mc.alltoall(np.ones((12, 2), np.float32)),
        lambda: mc.alltoall(np.array([["x", "y"]] * 12)),
        mc.BadArgumentTypeError,
        "an argument has a dtype the call does not take",
    ),
    Case(
        "broadcast of a read-only value",
        lambda: mc.broadcast(_ones(2, 5)),
        lambda: mc.broadcast(_ones(2) + [_read_only(5)]),
        mc.BadArgumentError,
        "tensor 1 of its list failed the call's check",
    ),
]


def still_works(c: Checks, session) -> None:
    shapes = [(5, 3), (301,), ()]
    grads = [make_input(session.rank, s, np.float32, 11 + i) for i, s in enumerate(shapes)]
    out = mc.gradients(grads)
    for i, s in enumerate(shapes):
        want = expected_average(s, np.float32, session.nranks, 11 + i)
        c.equal(out[i], want, f"gradients[{i}] after the refused call")


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_one_rank_refuses_its_call(session, case):
    if session.nranks < 2:
        pytest.skip("one rank has no other rank to tell")
    c = Checks()
    last = session.nranks - 1
    if session.rank == last:
        c.raises(case.local, case.bad)
    else:
        e = c.raises(mc.BadArgumentError, case.good, words=(f"rank {last}: {case.told}",))
        c.true(getattr(e, "status", None) == lib.MLC_ERR_ARG, f"status of {e!r}")
        c.true("(the other ranks' arguments are valid). No rank moved any data" in str(e), str(e))
    still_works(c, session)
    c.finish()


def test_every_rank_refuses_its_call(session):
    """Where every rank finds its argument wrong, each raises its own error."""
    c = Checks()
    c.raises(mc.BadArgumentTypeError, lambda: mc.gradients([None]), words=("gradients[0]",))
    still_works(c, session)
    c.finish()


def test_a_result_one_rank_cannot_allocate(session):
    """The last rank cannot allocate one array's average (its address space capped below
    the result's size): it raises MemoryError, and the others' call fails at once naming
    it, instead of pairing with that rank's next call."""
    if session.nranks < 2:
        pytest.skip("one rank has no other rank to tell")
    c = Checks()
    last = session.nranks - 1
    grad = np.full(25_000_000, 1.0, np.float32)  # 100 MB: the result takes as much again
    mc.gradients([grad[:4]])  # the team's one-array path is bound by its first call
    if session.rank == last:
        with open("/proc/self/statm") as statm:
            mapped = int(statm.read().split()[0]) * resource.getpagesize()
        resource.setrlimit(resource.RLIMIT_AS, (mapped + (40 << 20), resource.RLIM_INFINITY))
        try:
            c.raises(MemoryError, mc.gradients, [grad])
        finally:
            resource.setrlimit(resource.RLIMIT_AS, (resource.RLIM_INFINITY,) * 2)
    else:
        told = (f"rank {last}: its call raised before it reached the other ranks",)
        c.raises(mc.BadArgumentError, mc.gradients, [grad], words=told)
    still_works(c, session)
    c.finish()
