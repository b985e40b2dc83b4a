"""Bad input raises the documented exception on every rank, before anything is sent,
and the process stays usable: each test ends with a valid call checked exactly.

Every rank makes every bad call (validation happens before communication, so all
ranks raise together and stay in step)."""

from __future__ import annotations

import numpy as np
import pytest
from mpi_helpers import DTYPES, NTEAMS, Checks, expected_average, make_input

import ml_comm as mc

pytestmark = pytest.mark.mpi

UNSUPPORTED = [
    np.dtype(np.complex64),
    np.dtype(np.uint8),
    np.dtype(np.bool_),
    np.dtype(object),
    np.dtype(np.int16),
    np.dtype(np.uint64),
]
UNSUPPORTED_IDS = [d.name for d in UNSUPPORTED]
READ_ONLY_WORDS = ["read-only", "readonly", "writeable", "writable"]


def still_usable(c: Checks, session, tag):
    """A valid gradients + average + broadcast after the error, checked exactly."""
    g = make_input(session.rank, (67,), np.float32, 1)
    out = mc.gradients([g, make_input(session.rank, (2,), np.int64, 2)])
    c.equal(out[0], expected_average((67,), np.float32, session.nranks, 1), f"{tag}: gradients")
    c.equal(out[1], expected_average((2,), np.int64, session.nranks, 2), f"{tag}: gradients")
    a = make_input(session.rank, (5,), np.float64, 3)
    mc.average(a)
    c.equal(a, expected_average((5,), np.float64, session.nranks, 3), f"{tag}: average")
    b = [make_input(session.rank, (4,), np.int32, 4)]
    mc.broadcast(b, root=session.nranks - 1)
    c.equal(b[0], make_input(session.nranks - 1, (4,), np.int32, 4), f"{tag}: broadcast")


def bad_array(dtype, shape=(6,)):
    if dtype is object:
        return np.array([1.0] * int(np.prod(shape)), dtype=object).reshape(shape)
    return np.ones(shape, dtype=dtype)


def test_error_class():
    assert issubclass(mc.MLCommError, RuntimeError)


@pytest.mark.parametrize("team", [NTEAMS, NTEAMS + 5, -1], ids=["nteams", "nteams+5", "-1"])
def test_team_out_of_range(session, team):
    c = Checks()
    g = make_input(session.rank, (5,), np.float32)
    # The message names the team and the valid range (0..nteams-1 / 0 to nteams).
    for fn, args in [
        (mc.gradients, ([g],)),
        (mc.average, (g.copy(),)),
    ]:
        e = c.raises(ValueError, fn, *args, team=team, words=[str(team)])
        if e is not None:
            rest = str(e).replace(str(team), "")
            c.true(
                str(NTEAMS - 1) in rest or str(NTEAMS) in rest,
                f"{fn.__name__}(team={team}) message does not give the valid range: {e}",
            )
    c.raises(ValueError, mc.config_team, team, mc.ALG_AUTO, 10, 10, words=[str(team)])
    still_usable(c, session, f"team={team}")
    c.finish()


@pytest.mark.parametrize("dtype", UNSUPPORTED, ids=UNSUPPORTED_IDS)
def test_unsupported_dtype(session, dtype):
    c = Checks()
    good = make_input(session.rank, (9,), np.float32)
    bad = bad_array(dtype)
    c.raises(TypeError, mc.gradients, [bad], words=[dtype.name])
    # The bad array last in a list of good ones: nothing may have been sent.
    c.raises(TypeError, mc.gradients, [good, good.copy(), bad], words=[dtype.name])
    c.raises(TypeError, mc.average, bad_array(dtype), words=[dtype.name])
    c.raises(TypeError, mc.broadcast, [good.copy(), bad_array(dtype)], words=[dtype.name])
    c.equal(good, make_input(session.rank, (9,), np.float32), "good input was modified")
    still_usable(c, session, dtype.name)
    c.finish()


def test_unsupported_dtype_0d_and_empty(session):
    c = Checks()
    c.raises(TypeError, mc.gradients, [np.zeros((), np.complex128)], words=["complex128"])
    c.raises(TypeError, mc.gradients, [np.zeros((0,), np.uint8)], words=["uint8"])
    c.raises(TypeError, mc.average, np.zeros((0,), np.int8), words=["int8"])
    still_usable(c, session, "0-d / empty unsupported")
    c.finish()


def test_bad_types(session):
    c = Checks()
    c.raises(TypeError, mc.gradients, None)
    c.raises(TypeError, mc.gradients, [None])
    c.raises(TypeError, mc.gradients, ["abc"])
    c.raises(TypeError, mc.average, None)
    c.raises(TypeError, mc.average, [1.0, 2.0])
    c.raises(TypeError, mc.broadcast, None)
    c.raises(TypeError, mc.broadcast, [None])
    still_usable(c, session, "bad types")
    c.finish()


@pytest.mark.parametrize("dtype", [DTYPES[0], DTYPES[3], DTYPES[5]], ids=lambda d: d.name)
def test_non_contiguous(session, dtype):
    c = Checks()
    base = make_input(session.rank, (20,), dtype)
    c.raises(ValueError, mc.average, base[::2], words=["contiguous"])
    c.raises(ValueError, mc.broadcast, [base[1::3]], words=["contiguous"])
    c.raises(ValueError, mc.broadcast, [base[:4].copy(), base[::2]], words=["contiguous"])
    grid = make_input(session.rank, (6, 8), dtype)
    c.raises(ValueError, mc.average, grid[:, :3], words=["contiguous"])
    c.equal(base, make_input(session.rank, (20,), dtype), "strided source modified")
    still_usable(c, session, "non-contiguous")
    c.finish()


@pytest.mark.parametrize("dtype", [DTYPES[1], DTYPES[2], DTYPES[4]], ids=lambda d: d.name)
def test_read_only(session, dtype):
    c = Checks()
    ro = make_input(session.rank, (11,), dtype)
    ro.setflags(write=False)
    c.raises(ValueError, mc.average, ro, words=READ_ONLY_WORDS)
    c.raises(ValueError, mc.broadcast, [ro], words=READ_ONLY_WORDS)
    w = make_input(session.rank, (3,), dtype)
    c.raises(ValueError, mc.broadcast, [w, ro], words=READ_ONLY_WORDS)
    c.equal(w, make_input(session.rank, (3,), dtype), "writable array modified by failed call")
    # gradients does not write its inputs: read-only inputs are fine there.
    out = mc.gradients([ro])
    c.equal(out[0], expected_average((11,), dtype, session.nranks), "gradients of read-only")
    still_usable(c, session, "read-only")
    c.finish()


@pytest.mark.parametrize("which", ["n", "n+3", "-1"])
def test_root_out_of_range(session, which):
    c = Checks()
    n = session.nranks
    root = {"n": n, "n+3": n + 3, "-1": -1}[which]
    v = make_input(session.rank, (5,), np.float32)
    c.raises(ValueError, mc.broadcast, [v], root=root, words=[str(root)])
    c.equal(v, make_input(session.rank, (5,), np.float32), "buffer modified by failed broadcast")
    still_usable(c, session, f"root={root}")
    c.finish()


def test_config_team_bad_algorithm(session):
    c = Checks()
    c.raises(ValueError, mc.config_team, 0, 12345, 10, 10)
    c.raises(ValueError, mc.config_team, 0, -1, 10, 10)
    still_usable(c, session, "bad algorithm")
    c.finish()


def test_init_twice(session):
    """init while initialised raises MLCommError; the running session is unharmed."""
    c = Checks()
    c.raises(mc.MLCommError, mc.init, 1, 1, 100)
    c.raises(mc.MLCommError, mc.init, 2, 2, 4096, chunk_bytes=256)
    still_usable(c, session, "init twice")
    c.finish()


def test_many_errors_in_a_row(session):
    """Error paths leave nothing behind: many of them, then valid calls."""
    c = Checks()
    g = make_input(session.rank, (5,), np.float32)
    for _ in range(50):
        c.raises(ValueError, mc.gradients, [g], team=NTEAMS)
        c.raises(TypeError, mc.gradients, [g, np.zeros(3, np.complex64)])
        c.raises(ValueError, mc.average, g[::2])
    still_usable(c, session, "after 150 errors")
    c.finish()
