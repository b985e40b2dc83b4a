"""mc.average: one array averaged in place over all ranks and returned."""

from __future__ import annotations

import numpy as np
import pytest
from mpi_helpers import (
    DTYPE_IDS,
    DTYPES,
    SIZE_SPECS,
    Checks,
    average_of,
    expected_average,
    make_input,
)

import ml_comm as mc

pytestmark = pytest.mark.mpi


def check_average(c: Checks, session, shape, dtype, seed=0, team=0, tag=""):
    a = make_input(session.rank, shape, dtype, seed)
    address = a.__array_interface__["data"][0]
    out = mc.average(a, team=team)
    what = f"{tag} average({np.dtype(dtype).name}{tuple(np.shape(a))})"
    c.true(out is a, f"{what} returned {type(out).__name__} that is not the input array")
    c.true(
        a.__array_interface__["data"][0] == address, f"{what}: input array's buffer was replaced"
    )
    c.equal(a, expected_average(shape, dtype, session.nranks, seed), what)
    c.same_on_all_ranks([a], what)


@pytest.mark.parametrize("size", list(SIZE_SPECS), ids=[f"size={s}" for s in SIZE_SPECS])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_in_place(session, dtype, size):
    c = Checks()
    check_average(c, session, (SIZE_SPECS[size](session.nranks),), dtype)
    c.finish()


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_shapes(session, dtype):
    """0-d, empty and multi-dimensional arrays keep their shape."""
    c = Checks()
    n = session.nranks
    for i, shape in enumerate([(), (0,), (0, 5), (3, 4), (2, 3, 5), (n, n + 1), (17, 1, 19)]):
        check_average(c, session, shape, dtype, seed=i, tag=f"shape {shape}")
    c.finish()


def test_second_team(session):
    c = Checks()
    for i, dt in enumerate(DTYPES):
        check_average(c, session, (1001,), dt, seed=i, team=1, tag="team 1")
    c.finish()


@pytest.mark.parametrize("dtype", [np.int32, np.int64], ids=["int32", "int64"])
def test_integer_average_truncates_toward_zero(session, dtype):
    """Rank 0 holds the whole sum, the others zeros: sum / n must round toward zero
    for negative sums (C division), not toward -inf."""
    c = Checks()
    n = session.nranks
    sums = np.array([-1, 1, -2, 2, -3, 3, -5, 5, -7, 7, -11, 11, 0, -(n + 1), n + 1], dtype)
    a = sums.copy() if session.rank == 0 else np.zeros_like(sums)
    out = mc.average(a)
    stack = np.stack([sums] + [np.zeros_like(sums)] * (n - 1))
    want = average_of(stack, dtype, n)
    c.true(out is a, "average did not return its input")
    c.equal(a, want, f"{np.dtype(dtype).name} truncation")
    if n > 1:  # the helper itself: -1 / n is 0, not -1
        c.true(want[0] == 0 and want[13] == -1, f"expected values wrong: {want}")
    c.finish()


def test_half_precision_rounding(session):
    """float16 / bfloat16: divide in float32 and round once, e.g. 7/3 and 1/3."""
    c = Checks()
    n = session.nranks
    for dt in (DTYPES[2], DTYPES[3]):
        sums = np.array([1, -1, 7, -7, 2, 5, 11, 13, 0], np.float32)
        a = (sums if session.rank == 0 else np.zeros_like(sums)).astype(dt)
        mc.average(a)
        want = (sums / np.float32(n)).astype(dt)
        c.equal(a, want, f"{dt.name} rounding")
    c.finish()


def test_large_in_place(session):
    c = Checks()
    check_average(c, session, (150_001,), np.float32, seed=9, tag="large")
    check_average(c, session, (30_011,), DTYPES[3], seed=10, tag="large")
    c.finish()


def test_view_of_larger_array(session):
    """A contiguous slice is averaged in place inside its base array; the elements
    around it are untouched."""
    c = Checks()
    base = make_input(session.rank, (300,), np.float64, seed=3)
    orig = base.copy()
    view = base[100:201]
    out = mc.average(view)
    c.true(out is view, "average did not return its input view")
    want = expected_average((300,), np.float64, session.nranks, seed=3)[100:201]
    c.equal(base[100:201], want, "view")
    c.equal(base[:100], orig[:100], "elements before the view")
    c.equal(base[201:], orig[201:], "elements after the view")
    c.finish()


def test_fortran_ordered_in_place(session):
    """A Fortran-contiguous array is one block too: averaged in place, layout kept."""
    c = Checks()
    a = np.asfortranarray(make_input(session.rank, (7, 9), np.float32, 4))
    out = mc.average(a)
    c.true(out is a and a.flags.f_contiguous, "Fortran array not averaged in place")
    c.equal(np.ascontiguousarray(a), expected_average((7, 9), np.float32, session.nranks, 4), "F")
    c.finish()
