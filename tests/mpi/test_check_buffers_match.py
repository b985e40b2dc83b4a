"""mc.check_buffers_match: 0 when every rank holds identical buffers, else the
number of ranks whose buffers differ from rank 0's. Every rank makes the call;
only the data differs."""

from __future__ import annotations

import numpy as np
import pytest
from mpi_helpers import DTYPE_IDS, DTYPES, Checks, make_input

import ml_comm as mc

pytestmark = pytest.mark.mpi


def same_values(dtype):
    """Rank-independent data (the rank argument is fixed to 0)."""
    shapes = [(), (0,), (1,), (7,), (3, 4), (1001,), (5003,)]
    return [make_input(0, s, dtype, i) for i, s in enumerate(shapes)]


def check_result(c, got, want, what):
    c.true(isinstance(got, (int, np.integer)), f"{what}: returned {type(got).__name__}, want int")
    c.true(got == want, f"{what}: returned {got!r}, want {want}")
    c.true(bool(got) == bool(want), f"{what}: zero-ness wrong ({got!r})")


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_identical_buffers_give_zero(session, dtype):
    c = Checks()
    check_result(c, mc.check_buffers_match(same_values(dtype)), 0, "identical")
    check_result(c, mc.check_buffers_match(same_values(dtype), flag=1), 0, "identical flag=1")
    c.finish()


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_last_rank_differs(session, dtype):
    """Rank n-1 changes one element of the last (multi-segment) buffer when n > 1."""
    c = Checks()
    n = session.nranks
    values = same_values(dtype)
    if n > 1 and session.rank == n - 1:
        values[-1][4321] += values[-1].dtype.type(1)
    check_result(c, mc.check_buffers_match(values), 1 if n > 1 else 0, "last rank differs")
    check_result(c, mc.check_buffers_match(values, flag=0), 1 if n > 1 else 0, "flag=0")
    c.finish()


def test_difference_in_first_element_of_small_buffer(session):
    c = Checks()
    n = session.nranks
    values = same_values(np.dtype(np.float16))
    if n > 1 and session.rank == n - 1:
        values[2][0] = 3
    check_result(c, mc.check_buffers_match(values), 1 if n > 1 else 0, "first element")
    c.finish()


def test_difference_in_0d_array(session):
    c = Checks()
    n = session.nranks
    values = same_values(np.dtype(np.int64))
    if n > 1 and session.rank == n - 1:
        values[0][...] = 12345
    check_result(c, mc.check_buffers_match(values), 1 if n > 1 else 0, "0-d array")
    c.finish()


def test_all_other_ranks_differ(session):
    """Ranks 1..n-1 each hold different data: n-1 ranks differ from rank 0."""
    c = Checks()
    n = session.nranks
    values = [make_input(session.rank, (513,), np.float32, 3), make_input(0, (9,), np.int32, 4)]
    check_result(c, mc.check_buffers_match(values), n - 1, "all others differ")
    c.finish()


def test_mixed_dtypes(session):
    c = Checks()
    n = session.nranks
    values = [make_input(0, (65,), dt, i) for i, dt in enumerate(DTYPES)]
    check_result(c, mc.check_buffers_match(values), 0, "mixed identical")
    if n > 1 and session.rank == n - 1:
        values[3][64] += values[3].dtype.type(1)  # bfloat16
    check_result(c, mc.check_buffers_match(values), 1 if n > 1 else 0, "mixed, bf16 differs")
    c.finish()


def test_buffers_untouched(session):
    c = Checks()
    values = [make_input(session.rank, (300,), np.float64, 1)]
    before = values[0].copy()
    mc.check_buffers_match(values)
    c.equal(values[0], before, "check_buffers_match modified its input")
    c.finish()


def test_numpy_scalars(session):
    """A NumPy scalar alone or in a list is compared like a 0-d array."""
    c = Checks()
    n = session.nranks
    check_result(c, mc.check_buffers_match(np.int64(7)), 0, "equal scalar")
    check_result(c, mc.check_buffers_match([np.float32(1.5), np.zeros(3)]), 0, "equal list")
    mine = np.float32(2.0 if n > 1 and session.rank == n - 1 else 1.0)
    check_result(c, mc.check_buffers_match(mine, flag=0), 1 if n > 1 else 0, "scalar differs")
    check_result(c, mc.check_buffers_match([mine], flag=0), 1 if n > 1 else 0, "in a list")
    c.finish()
