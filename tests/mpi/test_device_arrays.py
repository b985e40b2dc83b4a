"""Device arrays (CUDA memory) in mc.average, mc.gradients and mc.broadcast: staged through
pinned host memory piece by piece (csrc/team/staged.c), exact against the host path's
arithmetic, and every bad input failing on every rank. On the CPU suite the arrays live in
fake_cuda.c's memory (device_arrays.py); ML_COMM_TEST_DEVICE_ARRAYS=cupy or torch runs the
same tests on a GPU."""

from __future__ import annotations

import os

import numpy as np
import pytest
from device_arrays import make
from ml_comm._core import ffi, lib
from mpi_helpers import (
    MSGLEN,
    NTEAMS,
    NTHREAD_PER_TEAM,
    REDUCED_DTYPES,
    Checks,
    expected_average,
    make_input,
    ml_comm_session,
)

import ml_comm as mc
from ml_comm.core.errors import BadArgumentError, MLCommError

pytestmark = pytest.mark.mpi

PIECE_BYTES = 1024  # small pieces: a few hundred elements already take several
DEVICE = make()
DTYPES = [d for d in REDUCED_DTYPES if d not in DEVICE.dtypes_left_out]
# Below a piece, a few pieces, and past the fusion window (MSGLEN) over many pieces.
SIZES = [0, 1, 7, 200, 1001, MSGLEN + 1, 20011]


@pytest.fixture(scope="module")
def session():
    settings = {"ML_COMM_CUDA_PIECE_BYTES": str(PIECE_BYTES), "ML_COMM_NUM_CUDA_STREAMS": "3",
                "ML_COMM_CPY_PER_CUDA_STREAM": "3"}  # fmt: skip
    if DEVICE.library:
        settings["ML_COMM_CUDA_LIBRARY"] = DEVICE.library
    os.environ.update(settings)
    try:
        with ml_comm_session(NTHREAD_PER_TEAM, NTEAMS, MSGLEN) as s:
            yield s
    finally:
        for name in settings:
            del os.environ[name]


def results(arrays) -> list[np.ndarray]:
    return [DEVICE.to_host(a) for a in arrays]


@pytest.mark.parametrize("size", SIZES, ids=[f"size={s}" for s in SIZES])
@pytest.mark.parametrize("dtype", DTYPES, ids=[d.name for d in DTYPES])
def test_average_in_place(session, dtype, size):
    c = Checks()
    x = DEVICE.to_device(make_input(session.rank, (size,), dtype))
    out = mc.average(x)
    c.true(out is x, "average returned another object than its device array")
    c.equal(DEVICE.to_host(x), expected_average((size,), dtype, session.nranks), f"average {size}")
    c.finish()


def test_gradients_of_several_dtypes_and_shapes(session):
    c = Checks()
    shapes = [(3, 5), (), (1001,), (17, 23), (0,), (MSGLEN + 3,)]
    dtypes = [np.float32, np.float64, np.float32, np.int32, np.float64, np.float16]
    host = [make_input(session.rank, s, d, seed=i) for i, (s, d) in enumerate(zip(shapes, dtypes))]
    grads = [DEVICE.to_device(h) for h in host]
    out = None if DEVICE.makes_results else [DEVICE.empty(h.shape, h.dtype) for h in host]
    averaged = mc.gradients(grads, out=out)
    by_host_path = mc.gradients(host)
    for i, (s, d) in enumerate(zip(shapes, dtypes)):
        c.true(DEVICE.is_result(averaged[i]), f"gradient {i}: a {type(averaged[i]).__name__}")
        got = DEVICE.to_host(averaged[i])
        c.equal(got, expected_average(s, d, session.nranks, seed=i), f"gradient {i}")
        c.true(got.tobytes() == by_host_path[i].tobytes(), f"gradient {i}: not the host path's")
        c.equal(DEVICE.to_host(grads[i]), host[i], f"gradient {i}'s input changed")
    c.finish()


def test_gradients_of_one_array(session):
    c = Checks()
    host = make_input(session.rank, (MSGLEN + 7,), np.float32)
    out = None if DEVICE.makes_results else [DEVICE.empty(host.shape, host.dtype)]
    for _ in range(2):  # a team's second call may take its one-array path
        got = DEVICE.to_host(mc.gradients([DEVICE.to_device(host)], out=out)[0])
        c.equal(got, expected_average(host.shape, host.dtype, session.nranks), "gradients([x])")
    c.finish()


@pytest.mark.parametrize("root", [0, -1], ids=["root=0", "root=last"])
def test_broadcast(session, root):
    c = Checks()
    root = root % session.nranks
    host = [make_input(session.rank, (n,), np.float32, seed=n) for n in (5, 1001, MSGLEN + 1)]
    host.append(make_input(session.rank, (300,), np.int64))
    arrays = [DEVICE.to_device(h) for h in host]
    mc.broadcast(arrays, root)
    for i, a in enumerate(arrays):
        want = make_input(root, host[i].shape, host[i].dtype, seed=(5, 1001, MSGLEN + 1, 0)[i])
        c.equal(DEVICE.to_host(a), want, f"broadcast value {i}")
    c.finish()


def fails_on_every_rank(session, call, *words):
    """call() raises on every rank, with a message holding every one of words."""
    c = Checks()
    try:
        call()
        c.true(False, "no error")
    except (BadArgumentError, MLCommError) as e:
        for w in words:
            c.true(w in str(e), f"{w!r} not in: {e}")
    # The ranks are still in step: a good call works.
    x = DEVICE.to_device(make_input(session.rank, (9,), np.float32))
    mc.average(x)
    c.equal(DEVICE.to_host(x), expected_average((9,), np.float32, session.nranks), "after")
    c.finish()


def one_rank_passes(session, bad, good):
    """The last rank's list holds `bad` where the others hold good arrays."""
    last = session.nranks - 1
    grads = [DEVICE.to_device(np.ones(5, np.float32)), bad if session.rank == last else good]
    out = [DEVICE.empty((5,), np.float32) for _ in grads]  # the arrays' libraries may make none
    return lambda: mc.gradients(grads, out=out), f"rank {last}"


def test_a_host_array_among_device_arrays(session):
    call, rank = one_rank_passes(
        session, np.ones(5, np.float32), DEVICE.to_device(np.ones(5, np.float32))
    )
    fails_on_every_rank(session, call, rank, "tensor 1 is a host array among device arrays")


def test_a_device_array_not_contiguous(session):
    call, rank = one_rank_passes(
        session, DEVICE.strided(np.ones(5, np.float32)), DEVICE.to_device(np.ones(5, np.float32))
    )
    fails_on_every_rank(session, call, rank, "device tensor 1 is not contiguous")


def test_memory_not_on_a_device(session):
    from device_arrays import HostMemoryArray

    host = np.ones(5, np.float32)
    call, rank = one_rank_passes(session, HostMemoryArray(host), DEVICE.to_device(host))
    fails_on_every_rank(session, call, rank, "tensor 1 is not in CUDA device memory")


def test_arrays_on_two_devices(session):
    if DEVICE.devices < 2:
        pytest.skip("one CUDA device")
    call, rank = one_rank_passes(
        session,
        DEVICE.to_device(np.ones(5, np.float32), 1),
        DEVICE.to_device(np.ones(5, np.float32)),
    )
    fails_on_every_rank(session, call, rank, "tensor 1 is on CUDA device 1")


# With pieces of 1024 bytes cut into 3 copies each (the session's settings), a piece takes
# 4 copies: copy 1 brings piece 0 down, copy 9 takes it back up (pieces 0 and 1 came down first).
@pytest.mark.parametrize("copy", [1, 9], ids=["download", "upload"])
def test_a_copy_failing_on_one_rank(session, copy):
    if not DEVICE.can_fail_copies:
        pytest.skip("a real driver's copies cannot be made to fail")
    x = DEVICE.to_device(make_input(session.rank, (1001,), np.float32))
    if session.rank == session.nranks - 1:
        DEVICE.fail_copy(copy)
    fails_on_every_rank(session, lambda: mc.average(x), f"rank {session.nranks - 1}",
                        "CUDA error 700 while copying")  # fmt: skip


def test_no_cuda_driver(session):
    team = mc.api.session().team(1)
    lib.mlc_team_set_device_staging(team, 2, 8, PIECE_BYTES, b"/nonexistent/libcuda.so.1")
    x = DEVICE.to_device(np.ones(5, np.float32))
    try:
        fails_on_every_rank(
            session, lambda: mc.average(x, team=1), "no CUDA driver could be loaded"
        )
    finally:
        lib.mlc_team_set_device_staging(team, 2, 8, PIECE_BYTES, (DEVICE.library or "").encode())


def test_counters(session):
    team = mc.api.session().team(0)
    before, after = ffi.new("mlc_device_stats *"), ffi.new("mlc_device_stats *")
    lib.mlc_team_get_device_stats(team, before)
    x = DEVICE.to_device(make_input(session.rank, (MSGLEN + 1,), np.float64))
    mc.average(x)
    lib.mlc_team_get_device_stats(team, after)
    c = Checks()
    c.true(after.calls == before.calls + 1, "calls counted")
    c.true(after.bytes_down - before.bytes_down == x_bytes(MSGLEN + 1, 8), "bytes down")
    c.true(after.bytes_up - before.bytes_up == x_bytes(MSGLEN + 1, 8), "bytes up")
    c.true(after.seconds_down >= before.seconds_down, "time down")
    c.finish()


def x_bytes(n: int, itemsize: int) -> int:
    return n * itemsize


def test_finite_check_fails_before_any_piece_moves(session):
    """NaN in the second piece of one rank's array: every rank fails, naming the rank and the
    tensor by its place in the call's list, and no rank's array changed (none was averaged
    in part)."""
    team = mc.api.session().team(1)
    last = session.nranks - 1
    host = [
        make_input(session.rank, (300,), np.float32),
        make_input(session.rank, (50,), np.float32),
    ]
    if session.rank == last:
        host[1][5] = np.nan  # 305 elements of 4 bytes in: the call's second piece
    arrays = [DEVICE.to_device(h) for h in host]
    out = [DEVICE.empty(h.shape, h.dtype) for h in host]
    one = DEVICE.to_device(np.concatenate(host))
    lib.mlc_team_set_checks(team, 1, 1)
    try:
        fails_on_every_rank(session, lambda: mc.gradients(arrays, team=1, out=out),
                            f"rank {last} tensor 1", "NaN or Inf")  # fmt: skip
        fails_on_every_rank(session, lambda: mc.average(one, team=1), f"rank {last} tensor 0")
        c = Checks()
        c.true(DEVICE.to_host(one).tobytes() == np.concatenate(host).tobytes(), "changed")
        c.finish()
    finally:
        lib.mlc_team_set_checks(team, 1, 0)


def test_compressed_values_on_the_wire(session):
    """bf16 on the wire: the pieces' float32 rings carry 16-bit values; small sums stay exact."""
    team = mc.api.session().team(1)
    lib.mlc_team_set_compression(team, lib.MLC_COMPRESSION_BF16)
    try:
        c = Checks()
        x = DEVICE.to_device((np.arange(20011) % 7 + session.rank).astype(np.float32))
        mc.allreduce_sum(x, team=1)
        want = sum((np.arange(20011) % 7 + r).astype(np.float32) for r in range(session.nranks))
        c.equal(DEVICE.to_host(x), want, "bf16 sum")
        c.finish()
    finally:
        lib.mlc_team_set_compression(team, lib.MLC_COMPRESSION_NONE)


def test_a_pipelined_team_takes_host_arrays_only(session):
    mc.config_team(1, mc.ALG_AUTO, 0, 10)  # pipelined from the first call
    try:
        with pytest.raises(BadArgumentError, match="device arrays need a synchronous team"):
            mc.gradients([DEVICE.to_device(np.ones(3, np.float32))], team=1)
    finally:
        mc.config_team(1, mc.ALG_AUTO, 0, 0)
