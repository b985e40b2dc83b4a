"""ML_COMM_CHECK_FINITE=1: a reduction whose input holds NaN or Inf on any rank fails
on every rank with a NonFiniteError that names the rank, the tensor (for gradients() its
index in the caller's list) and the step (the team's request number); inputs without
NaN/Inf reduce exactly as without the check, and the team keeps working.

At one rank the check runs too (the scan needs no peer).
"""

from __future__ import annotations

import os
import re

import ml_dtypes
import numpy as np
import pytest
from ml_comm._core import lib
from mpi_helpers import (
    MSGLEN,
    NTEAMS,
    NTHREAD_PER_TEAM,
    Checks,
    expected_average,
    make_input,
    ml_comm_session,
)

import ml_comm as mc

pytestmark = pytest.mark.mpi

FLOATS = [np.float32, np.float64, np.float16, ml_dtypes.bfloat16]
FLOAT_IDS = ["float32", "float64", "float16", "bfloat16"]


@pytest.fixture(scope="module")
def session():
    """This module's own session, initialised with the finite check on."""
    os.environ["ML_COMM_CHECK_FINITE"] = "1"
    try:
        with ml_comm_session(NTHREAD_PER_TEAM, NTEAMS, MSGLEN) as s:
            os.environ.pop("ML_COMM_CHECK_FINITE")
            yield s
    finally:
        os.environ.pop("ML_COMM_CHECK_FINITE", None)


def request_number(text: str) -> int:
    found = re.search(r"team \d+ request (\d+)", text)
    return int(found.group(1)) if found else -1


def expect_nonfinite(c: Checks, fn, *wanted: str) -> str:
    e = c.raises(mc.NonFiniteError, fn, words=("NaN or Inf",))
    c.true(getattr(e, "status", None) == lib.MLC_ERR_NONFINITE, f"status of {e!r}")
    text = str(e) if e is not None else ""
    for w in wanted:
        c.true(w in text, f"the message lacks {w!r}: {text!r}")
    return text


def still_works(c: Checks, session, seed: int = 3) -> None:
    shapes = [(4, 5), (2000,), (1,)]
    grads = [make_input(session.rank, s, np.float32, seed + i) for i, s in enumerate(shapes)]
    out = mc.gradients(grads)
    for i, s in enumerate(shapes):
        c.equal(out[i], expected_average(s, np.float32, session.nranks, seed + i), f"out[{i}]")


@pytest.mark.parametrize("bad_value", [np.nan, np.inf, -np.inf], ids=["nan", "inf", "-inf"])
@pytest.mark.parametrize("count", [4, 20011], ids=["direct", "threads"])
def test_gradients_name_rank_index_and_step(session, bad_value, count):
    c = Checks()
    bad_rank = session.nranks - 1
    grads = [make_input(session.rank, (count,), np.float32, i) for i in range(4)]
    if session.rank == bad_rank:
        grads[2][count // 2] = bad_value
    first = expect_nonfinite(
        c, lambda: mc.gradients(grads), f"rank {bad_rank} gradients[2]", "team 0 request"
    )
    still_works(c, session)  # one request: the step after
    second = expect_nonfinite(c, lambda: mc.gradients(grads), f"rank {bad_rank} gradients[2]")
    c.true(
        request_number(second) == request_number(first) + 2 and request_number(first) > 0,
        f"steps: {request_number(first)}, then {request_number(second)} (want +2)",
    )
    c.finish()


def test_index_in_a_list_of_several_dtypes(session):
    """gradients() reduces one request per dtype; the message names the caller's index."""
    c = Checks()
    grads = [
        np.ones(3, np.float32),
        np.ones(4, np.float64),
        np.ones(5, np.float32),
        np.ones(6, np.float64),
    ]
    if session.rank == 0:
        grads[3][1] = np.nan
        grads[2][0] = np.inf
    expect_nonfinite(c, lambda: mc.gradients(grads), "rank 0 gradients[3]", "rank 0 gradients[2]")
    still_works(c, session)
    c.finish()


def test_several_ranks_and_tensors(session):
    c = Checks()
    grads = [np.ones(8, np.float32) for _ in range(4)]
    for i in range(4):
        if i <= session.rank:
            grads[i][i] = np.nan
    want = [f"rank {r} gradients[{r}]" for r in range(session.nranks)]
    if session.nranks > 2:
        want.append("rank 2 gradients[2] (and 2 more of its tensors)")
    expect_nonfinite(c, lambda: mc.gradients(grads), *want)
    still_works(c, session)
    c.finish()


@pytest.mark.parametrize("count", [5, 300], ids=["direct", "ring"])
@pytest.mark.parametrize("dtype", FLOATS, ids=FLOAT_IDS)
def test_average_every_float_dtype(session, dtype, count):
    c = Checks()
    a = make_input(session.rank, (count,), dtype)
    if session.rank == 0:
        a[count - 1] = np.inf
    before = a.copy()
    expect_nonfinite(c, lambda: mc.average(a), "rank 0 tensor 0")
    c.equal(a, before, "the input after a refused average")
    still_works(c, session)
    c.finish()


@pytest.mark.parametrize("dtype", FLOATS + [np.int32, np.int64], ids=FLOAT_IDS + ["i32", "i64"])
def test_finite_inputs_reduce_exactly(session, dtype):
    """The check refuses no finite input, not even the largest finite values, whose sum
    overflows to Inf: the check looks at the inputs, not at the result."""
    c = Checks()
    for count in (0, 1, 1001, 20011):
        a = make_input(session.rank, (count,), dtype)
        mc.average(a)
        c.equal(a, expected_average((count,), dtype, session.nranks), f"average of {count}")
    big = np.full(9, np.finfo(dtype).max if np.dtype(dtype).kind == "f" else 1, dtype)
    mc.average(big)
    c.true(bool(np.all(big == big[0])), "average of the largest finite value")
    c.finish()


def test_broadcast_is_not_checked(session):
    """Broadcast copies root's values; it is not a reduction and NaN passes through."""
    c = Checks()
    a = np.full(5, np.nan if session.rank == 0 else 1.0, np.float32)
    mc.broadcast([a])
    c.true(bool(np.all(np.isnan(a))), f"broadcast result {a}")
    c.finish()


def test_pipelined_team_recovers_after_one_failed_step(session):
    """As the TensorFlow op does (test_tf_finite.py): the call that would return a failed
    reduction raises on every rank; the pipeline then starts afresh (zeros, then the
    previous call's average), arrays every time, never a list of None."""
    rank, n, last = session.rank, session.nranks, session.nranks - 1
    shape = (6,)
    zeros = np.zeros(shape, np.float32)

    def call(seed, nan=False):
        a = make_input(rank, shape, np.float32, seed)
        if nan and rank == last:
            a[1] = np.nan
        return mc.gradients([a], team=1)[0]

    c = Checks()
    mc.config_team(1, mc.ALG_AUTO, 0, 100)  # pipelined from the first call
    try:
        c.equal(call(0), zeros, "call 0 (entering the pipeline)")
        c.equal(call(1, nan=True), expected_average(shape, np.float32, n, 0), "call 1")
        c.raises(mc.NonFiniteError, call, 2, words=("NaN or Inf",))
        c.equal(call(3), zeros, "call 3 (the pipeline starts afresh)")
        for seed in (4, 5):
            want = expected_average(shape, np.float32, n, seed - 1)
            c.equal(call(seed), want, f"call {seed} returns call {seed - 1}'s average")
    finally:
        mc.config_team(1, mc.ALG_AUTO, 0, 0)
    c.finish()


def test_leaving_the_pipeline_after_a_failed_step(session):
    """A failure just before the draining call: the call that would return the failed
    reduction raises; the draining call then returns its own average, arrays again."""
    rank, n, last = session.rank, session.nranks, session.nranks - 1
    shape = (5,)

    def call(seed, nan=False):
        a = make_input(rank, shape, np.float64, seed)
        if nan and rank == last:
            a[0] = np.inf
        return mc.gradients([a], team=1)[0]

    c = Checks()
    mc.config_team(1, mc.ALG_AUTO, -1, 4)  # pipelined, synchronous for the last 1 of 4
    try:
        c.equal(call(0), np.zeros(shape), "call 0 (entering the pipeline)")
        c.equal(call(1, nan=True), expected_average(shape, np.float64, n, 0), "call 1")
        c.raises(mc.NonFiniteError, call, 2, words=("NaN or Inf",))
        c.equal(call(3), expected_average(shape, np.float64, n, 3), "call 3 (draining)")
        c.equal(call(4), expected_average(shape, np.float64, n, 4), "call 4 (synchronous)")
    finally:
        mc.config_team(1, mc.ALG_AUTO, 0, 0)
    c.finish()
