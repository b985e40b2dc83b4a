"""Bad input, as a table: every bad call raises the documented exception type with a
message that says what was wrong and what to do, on every rank, before anything is
sent; the process stays usable (after each case a valid gradients + average +
broadcast is checked exactly) and buffers of the failed call are unmodified.

Every rank makes every bad call (validation happens before communication, so all
ranks raise together and stay in step). Life-cycle errors (init arguments, calls
before init / after finalize) are in test_bad_init.py.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest
from mpi_helpers import (
    DTYPES,
    MSGLEN,
    NTEAMS,
    Checks,
    average_of,
    expected_average,
    make_input,
)

import ml_comm as mc

pytestmark = pytest.mark.mpi

# The classes of arguments that are wrong on this rank: also TypeError and ValueError.
BAD_TYPE = mc.BadArgumentTypeError
BAD_VALUE = mc.BadArgumentError

UNSUPPORTED = [
    np.dtype(np.complex64),
    np.dtype(np.uint32),
    np.dtype(object),
    np.dtype(np.uint64),
    np.dtype(np.float128) if hasattr(np, "float128") else np.dtype(np.complex128),
    np.dtype("datetime64[s]"),
]
REDUCED_LIST = "float32, float64, float16, bfloat16, int32, int64, uint8, int8, uint16, int16"
SUPPORTED_LIST = REDUCED_LIST + ", bool"
ALGS = r"0 \(auto\), 1 \(ring\), 2 \(recursive_doubling\), 3 \(rabenseifner\)"
CONTIGUOUS_HINT = (
    r"is not contiguous; ml_comm reduces it in place as one block "
    r"\(pass numpy\.ascontiguousarray\(array\) and use the returned array\)"
)
READ_ONLY_HINT = (
    r"is read-only; ml_comm writes the result into it in place "
    r"\(pass a writeable copy, e\.g\. array\.copy\(\)\)"
)


@dataclass(frozen=True)
class Case:
    """call(session) makes the bad call; pattern (a regex, or a function of the
    session giving one) must be found in the message."""

    id: str
    call: Callable
    exc: type
    pattern: str | Callable


def x(s, n=5, dtype=np.float32, seed=0):
    return make_input(s.rank, (n,), dtype, seed)


def bad_array(dtype, n=6):
    return np.zeros(n, dtype=dtype)


def read_only(s):
    a = x(s, 11)
    a.setflags(write=False)
    return a


def team_range(t):
    return (
        rf"team {t} is out of range: this job has teams 0\.\.{NTEAMS - 1} "
        r"\(set their number with init\(nteams=\.\.\.\)\)"
    )


def _cases() -> list[Case]:
    # fmt: off
    cases = [
        # --- wrong types
        Case("gradients(None)", lambda s: mc.gradients(None), BAD_TYPE,
             r"^gradients takes a list of numpy arrays, got NoneType$"),
        Case("gradients(array)", lambda s: mc.gradients(x(s)), BAD_TYPE,
             r"^gradients takes a list of numpy arrays, got ndarray$"),
        Case("gradients(dict)", lambda s: mc.gradients({"w": x(s)}), BAD_TYPE,
             r"^gradients takes a list of numpy arrays, got dict$"),
        Case("gradients([None])", lambda s: mc.gradients([None]), BAD_TYPE,
             r"^gradients\[0\] must be a numpy\.ndarray, got NoneType$"),
        Case("gradients([ok, str])", lambda s: mc.gradients([x(s), "abc"]), BAD_TYPE,
             r"^gradients\[1\] must be a numpy\.ndarray, got str$"),
        Case("gradients([list])", lambda s: mc.gradients([[1.0, 2.0]]), BAD_TYPE,
             r"^gradients\[0\] must be a numpy\.ndarray, got list$"),
        Case("average(None)", lambda s: mc.average(None), BAD_TYPE,
             r"^average must be a numpy\.ndarray, got NoneType$"),
        Case("average(list)", lambda s: mc.average([1.0, 2.0]), BAD_TYPE,
             r"^average must be a numpy\.ndarray, got list$"),
        Case("average(scalar)", lambda s: mc.average(np.float32(3)), BAD_TYPE,
             r"^average is a NumPy scalar \(float32\), which cannot be changed in place; "
             r"pass a 0-d array instead \(numpy\.array\(x\)\) and read the result from it$"),
        Case("allreduce_sum(np.int64)", lambda s: mc.allreduce_sum(np.int64(3)), BAD_TYPE,
             r"^allreduce_sum is a NumPy scalar \(int64\), which cannot be changed in place"),
        Case("broadcast(scalar)", lambda s: mc.broadcast(np.float64(3)), BAD_TYPE,
             r"^broadcast value 0 is a NumPy scalar \(float64\), which cannot be changed in place"),
        Case("broadcast([ok, scalar])", lambda s: mc.broadcast([x(s), np.int32(3)]), BAD_TYPE,
             r"^broadcast value 1 is a NumPy scalar \(int32\), which cannot be changed in place"),
        Case("gradients([ok, complex scalar])",
             lambda s: mc.gradients([x(s), np.complex64(1)]), BAD_TYPE,
             r"^ml_comm cannot reduce dtype complex64"),
        Case("allreduce_sum(int)", lambda s: mc.allreduce_sum(3), BAD_TYPE,
             r"^allreduce_sum must be a numpy\.ndarray, got int$"),
        Case("broadcast(None)", lambda s: mc.broadcast(None), BAD_TYPE,
             r"^broadcast takes a list of numpy arrays, got NoneType$"),
        Case("broadcast(dict)", lambda s: mc.broadcast({"w": x(s)}), BAD_TYPE,
             r"^broadcast takes a list of numpy arrays, got dict$"),
        Case("broadcast([None])", lambda s: mc.broadcast([None]), BAD_TYPE,
             r"^broadcast value 0 must be a numpy\.ndarray, got NoneType$"),
        Case("broadcast([ok, int])", lambda s: mc.broadcast([x(s), 5]), BAD_TYPE,
             r"^broadcast value 1 must be a numpy\.ndarray, got int$"),
        Case("check_buffers_match(None)", lambda s: mc.check_buffers_match(None), BAD_TYPE,
             r"^check_buffers_match takes a numpy array or a list of them, got NoneType$"),
        Case("check_buffers_match([ok, None])",
             lambda s: mc.check_buffers_match([x(s), None]), BAD_TYPE,
             r"^check_buffers_match value 1 must be a numpy\.ndarray, got NoneType$"),
        # --- roots
        *[
            Case(f"broadcast(root={name})", lambda s, f=f: mc.broadcast([x(s)], root=f(s.nranks)),
                 BAD_VALUE,
                 lambda s, f=f: rf"root {f(s.nranks)}, which no rank has "
                                rf"\(ranks 0\.\.{s.nranks - 1}\)")
            for name, f in [("n", lambda n: n), ("n+3", lambda n: n + 3), ("-1", lambda n: -1)]
        ],
        *[
            Case(f"broadcast(root={root!r})", lambda s, r=root: mc.broadcast([x(s)], root=r),
                 BAD_TYPE, rf"^root must be an int, got {type(root).__name__}$")
            for root in ["0", 0.0, True, None]
        ],
        # --- non-contiguous and read-only buffers of the in-place calls
        Case("average(strided)", lambda s: mc.average(x(s, 20)[::2]), BAD_VALUE,
             "^average " + CONTIGUOUS_HINT),
        Case("allreduce_sum(column slice)",
             lambda s: mc.allreduce_sum(make_input(s.rank, (6, 8), np.int32)[:, :3]),
             BAD_VALUE, "^allreduce_sum " + CONTIGUOUS_HINT),
        Case("broadcast([ok, strided])", lambda s: mc.broadcast([x(s), x(s, 20)[1::3]]),
             BAD_VALUE, "^broadcast value 1 " + CONTIGUOUS_HINT),
        Case("average(read-only)", lambda s: mc.average(read_only(s)), BAD_VALUE,
             "^average " + READ_ONLY_HINT),
        Case("allreduce_sum(read-only)", lambda s: mc.allreduce_sum(read_only(s)), BAD_VALUE,
             "^allreduce_sum " + READ_ONLY_HINT),
        Case("broadcast([ok, read-only])", lambda s: mc.broadcast([x(s), read_only(s)]),
             BAD_VALUE, "^broadcast value 1 " + READ_ONLY_HINT),
        # --- config_team
        Case("config_team(alg=12345)", lambda s: mc.config_team(0, 12345, 10, 10), BAD_VALUE,
             rf"^config_team: alg 12345 is not an algorithm; use one of {ALGS}$"),
        Case("config_team(alg=-1)", lambda s: mc.config_team(0, -1, 10, 10), BAD_VALUE,
             rf"^config_team: alg -1 is not an algorithm; use one of {ALGS}$"),
        Case("config_team(alg='ring')", lambda s: mc.config_team(0, "ring", 10, 10), BAD_TYPE,
             r"^config_team: alg must be an int, got str$"),
        Case("config_team(ksteps=1.5)", lambda s: mc.config_team(0, 0, 1.5, 10), BAD_TYPE,
             r"^config_team: ksteps must be an int, got float$"),
        Case("config_team(max_steps=None)", lambda s: mc.config_team(0, 0, 1, None), BAD_TYPE,
             r"^config_team: max_steps must be an int, got NoneType$"),
        Case("config_team(max_steps=-1)", lambda s: mc.config_team(0, 0, 0, -1), BAD_VALUE,
             r"^config_team: max_steps must be >= 0, got -1$"),
        Case("config_team(ksteps=-5, max_steps=2)", lambda s: mc.config_team(0, 0, -5, 2),
             BAD_VALUE,
             r"^config_team: ksteps=-5 asks for the last 5 steps to be synchronous, "
             r"more than max_steps=2$"),
        Case("config_team(ksteps=2**70)", lambda s: mc.config_team(0, 0, 2**70, 2**70),
             BAD_VALUE, rf"^config_team: ksteps={2**70} does not fit in a 64-bit integer$"),
        Case("config_team(verbosity=3)", lambda s: mc.config_team(0, 0, 1, 1, verbosity=3),
             BAD_VALUE, r"^config_team: verbosity must be 0, 1 or 2, got 3$"),
        Case("config_team(perf_freq=0)", lambda s: mc.config_team(0, 0, 1, 1, perf_freq=0),
             BAD_VALUE, r"^config_team: perf_freq must be >= 1, got 0$"),
        # --- init while initialised: the running session is unharmed
        Case("init twice", lambda s: mc.init(1, 1, 100), mc.StateError,
             r"^ml_comm is already initialised; call ml_comm\.finalize\(\) before init\(\) again$"),
        Case("init twice, other settings", lambda s: mc.init(2, 2, 4096, chunk_bytes=256),
             mc.StateError, r"^ml_comm is already initialised"),
    ]
    # --- team ids, for every call that takes one
    team_calls = {
        "gradients": lambda s, t: mc.gradients([x(s)], team=t),
        "average": lambda s, t: mc.average(x(s), team=t),
        "allreduce_sum": lambda s, t: mc.allreduce_sum(x(s), team=t),
        "config_team": lambda s, t: mc.config_team(t, mc.ALG_AUTO, 10, 10),
        "team_settings": lambda s, t: mc.team_settings(t),
        "team_stats": lambda s, t: mc.team_stats(t),
    }
    for name, call in team_calls.items():
        for t in (NTEAMS, NTEAMS + 5, -1, np.int64(NTEAMS)):
            cases.append(
                Case(f"{name}(team={t!r})", lambda s, c=call, t=t: c(s, t), BAD_VALUE,
                     "^" + team_range(t) + "$")
            )
        for t in ("0", 1.0, True, None):
            cases.append(
                Case(f"{name}(team={t!r})", lambda s, c=call, t=t: c(s, t), BAD_TYPE,
                     rf"^team must be an int, got {type(t).__name__}$")
            )
    # --- dtypes the core does not reduce, alone, after good tensors, in every call
    for dt in UNSUPPORTED:
        msg = rf"^ml_comm cannot reduce dtype {re.escape(str(dt))}; supported: {REDUCED_LIST}$"
        moved = rf"^ml_comm cannot move dtype {re.escape(str(dt))}; supported: {SUPPORTED_LIST}$"
        cases += [
            Case(f"gradients([{dt}])", lambda s, d=dt: mc.gradients([bad_array(d)]),
                 BAD_TYPE, msg),
            Case(f"gradients([ok, ok, {dt}])",
                 lambda s, d=dt: mc.gradients([x(s), x(s, 3, np.int64), bad_array(d)]),
                 BAD_TYPE, msg),
            Case(f"average({dt})", lambda s, d=dt: mc.average(bad_array(d)), BAD_TYPE, msg),
            Case(f"allreduce_sum({dt})", lambda s, d=dt: mc.allreduce_sum(bad_array(d)),
                 BAD_TYPE, msg),
            Case(f"broadcast([ok, {dt}])", lambda s, d=dt: mc.broadcast([x(s), bad_array(d)]),
                 BAD_TYPE, moved),
        ]
    cases += [
        Case("gradients([0-d complex128])", lambda s: mc.gradients([np.zeros((), np.complex128)]),
             BAD_TYPE, r"^ml_comm cannot reduce dtype complex128"),
        Case("gradients([empty uint32])", lambda s: mc.gradients([np.zeros((0,), np.uint32)]),
             BAD_TYPE, r"^ml_comm cannot reduce dtype uint32"),
        Case("average(empty uint64)", lambda s: mc.average(np.zeros((0,), np.uint64)), BAD_TYPE,
             r"^ml_comm cannot reduce dtype uint64"),
    ]
    # --- bool is moved, never reduced: every reduction names it and what moves it
    bool_msg = (r"^ml_comm cannot reduce dtype bool \(broadcast, allgather and alltoall move "
                rf"it\); reductions take {REDUCED_LIST}$")
    flags = np.dtype(np.bool_)
    cases += [
        Case("gradients([bool])", lambda s: mc.gradients([bad_array(flags)]), BAD_TYPE, bool_msg),
        Case("gradients([ok, bool])", lambda s: mc.gradients([x(s), bad_array(flags)]),
             BAD_TYPE, bool_msg),
        Case("average(bool)", lambda s: mc.average(bad_array(flags)), BAD_TYPE, bool_msg),
        Case("allreduce_sum(bool)", lambda s: mc.allreduce_sum(bad_array(flags)), BAD_TYPE,
             bool_msg),
    ]
    # fmt: on
    return cases


CASES = _cases()
assert len({c.id for c in CASES}) == len(CASES), "duplicate case ids"


def still_usable(c: Checks, s, tag):
    """A valid gradients + average + broadcast after the error, checked exactly."""
    g = make_input(s.rank, (67,), np.float32, 1)
    out = mc.gradients([g, make_input(s.rank, (2,), np.int64, 2)])
    c.equal(out[0], expected_average((67,), np.float32, s.nranks, 1), f"{tag}: gradients")
    c.equal(out[1], expected_average((2,), np.int64, s.nranks, 2), f"{tag}: gradients")
    a = make_input(s.rank, (5,), np.float64, 3)
    mc.average(a)
    c.equal(a, expected_average((5,), np.float64, s.nranks, 3), f"{tag}: average")
    b = [make_input(s.rank, (4,), np.int32, 4)]
    mc.broadcast(b, root=s.nranks - 1)
    c.equal(b[0], make_input(s.nranks - 1, (4,), np.int32, 4), f"{tag}: broadcast")


def check_raises(c: Checks, case: Case, s) -> None:
    pattern = case.pattern(s) if callable(case.pattern) else case.pattern
    try:
        case.call(s)
    except Exception as e:  # noqa: BLE001 - the type is checked below
        c.true(
            type(e) is case.exc,
            f"{case.id}: raised {type(e).__name__}({e}), want {case.exc.__name__}",
        )
        c.true(re.search(pattern, str(e)), f"{case.id}: message {str(e)!r} !~ {pattern!r}")
        return
    c.true(False, f"{case.id}: did not raise, want {case.exc.__name__}")


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_call(session, case):
    c = Checks()
    check_raises(c, case, session)
    still_usable(c, session, case.id)
    c.finish()


def test_error_class():
    assert issubclass(mc.MLCommError, RuntimeError)


def test_failed_calls_modify_nothing(session):
    """Buffers handed to a call that fails validation keep their values, even when the
    bad one comes last in the list (nothing may have been sent or written)."""
    c = Checks()
    s = session
    good = [make_input(s.rank, (9,), dt, k) for k, dt in enumerate(DTYPES)]
    ro = read_only(s)
    for call in (
        lambda: mc.broadcast([*good, np.zeros(3, np.complex64)]),
        lambda: mc.broadcast([*good, x(s, 20)[::2]]),
        lambda: mc.broadcast([*good, ro], root=s.nranks - 1),
        lambda: mc.broadcast(good, root=s.nranks),
        lambda: mc.gradients([*good, np.zeros(3, np.uint32)]),
        lambda: mc.gradients(good, team=NTEAMS),
    ):
        try:
            call()
            c.true(False, "a bad call did not raise")
        except (TypeError, ValueError):
            pass
    for k, (g, dt) in enumerate(zip(good, DTYPES)):
        c.equal(g, make_input(s.rank, (9,), dt, k), f"buffer {k} ({dt}) modified")
    still_usable(c, s, "after failed calls")
    c.finish()


@pytest.mark.parametrize("dtype", DTYPES, ids=[d.name for d in DTYPES])
def test_gradients_accept_read_only_and_strided_inputs(session, dtype):
    """gradients does not write its inputs: read-only, strided and Fortran-ordered
    inputs are fine there, and the results are exact."""
    c = Checks()
    s = session
    ro = make_input(s.rank, (11,), dtype)
    ro.setflags(write=False)
    strided = make_input(s.rank, (40,), dtype, 2)[::3]
    fortran = np.asfortranarray(make_input(s.rank, (5, 7), dtype, 3))
    out = mc.gradients([ro, strided, fortran])
    c.equal(out[0], expected_average((11,), dtype, s.nranks), "read-only")
    want = np.stack([make_input(r, (40,), dtype, 2)[::3] for r in range(s.nranks)])
    c.equal(out[1], average_of(want, dtype, s.nranks), "strided")
    c.equal(out[2], expected_average((5, 7), dtype, s.nranks, 3), "Fortran-ordered")
    c.finish()


def test_gradient_list_larger_than_msglen_streams(session):
    """msglen only sizes the fusion buffer: a list of many tensors, and single tensors,
    far larger than it go through it in windows, exactly."""
    c = Checks()
    s = session
    specs = [((1000 + k,), DTYPES[k % 6], k) for k in range(12)]  # ~3x MSGLEN per dtype
    specs.append(((3 * MSGLEN + 5,), np.float32, 99))
    out = mc.gradients([make_input(s.rank, sh, dt, seed) for sh, dt, seed in specs])
    for k, ((sh, dt, seed), o) in enumerate(zip(specs, out)):
        c.equal(o, expected_average(sh, dt, s.nranks, seed), f"tensor {k}")
    c.finish()


def test_config_team_after_use_is_allowed(session):
    """config_team may be called again after a team has reduced (on every rank at the
    same point): later calls use the new algorithm, results stay exact."""
    c = Checks()
    s = session
    try:
        for alg in (mc.ALG_RING, mc.ALG_RECURSIVE_DOUBLING, mc.ALG_RABENSEIFNER, mc.ALG_AUTO):
            mc.config_team(1, alg, 0, 0)
            c.true(
                mc.team_settings(1)["algorithm"] == alg,
                f"team_settings algorithm {mc.team_settings(1)['algorithm']}, want {alg}",
            )
            out = mc.gradients([make_input(s.rank, (777,), np.float32, alg)], team=1)
            c.equal(out[0], expected_average((777,), np.float32, s.nranks, alg), f"alg {alg}")
    finally:
        mc.config_team(1, mc.ALG_AUTO, 0, 0)
    c.finish()


def test_many_errors_in_a_row(session):
    """Error paths leave nothing behind: many of them, then valid calls."""
    c = Checks()
    g = make_input(session.rank, (5,), np.float32)
    for _ in range(50):
        for case in (CASES[0], CASES[-1]):
            check_raises(c, case, session)
        c.raises(ValueError, mc.average, g[::2])
    still_usable(c, session, "after 150 errors")
    c.finish()


def test_tensorflow_tensor_without_tensorflow_framework(session):
    """A TensorFlow tensor handed to a session started for NumPy: the message says
    which init to use."""
    tf = pytest.importorskip("tensorflow")  # the same answer on every rank
    c = Checks()
    t = tf.constant(x(session))
    for case in (
        Case("gradients([tf])", lambda s: mc.gradients([t]), BAD_TYPE,
             r"^gradients\[0\] must be a numpy\.ndarray, got EagerTensor \(for TensorFlow "
             r"tensors, init ml_comm with framework='tensorflow'\)$"),
        Case("average(tf)", lambda s: mc.average(t), BAD_TYPE,
             r"^average must be a numpy\.ndarray, got EagerTensor \(for TensorFlow tensors"),
    ):  # fmt: skip
        check_raises(c, case, session)
    still_usable(c, session, "TensorFlow tensors")
    c.finish()
