"""The C API on its own (no Python session): what a caller gets back for bad input to the
keyed-group entry point, which the TensorFlow ops call once per gradient. Every refusal must
carry a text that says what was wrong: the TF op's error shows nothing else. And requests
started in different rhythms on different ranks, which must meet without a deadlock."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
from ml_comm._core import ffi, lib
from mpi4py import MPI


@contextlib.contextmanager
def core_team(nthreads: int, fusion_bytes: int, chunk_bytes: int):
    """A team of the core alone, on COMM_WORLD."""
    err = ffi.new("char[512]")
    ctx = lib.mlc_context_create(MPI._addressof(MPI.COMM_WORLD), err, 512)
    assert ctx != ffi.NULL, ffi.string(err).decode()
    out = ffi.new("mlc_team **")
    assert (
        lib.mlc_team_create(ctx, nthreads, fusion_bytes, chunk_bytes, out, err, 512) == lib.MLC_OK
    )
    try:
        yield out[0]
    finally:
        lib.mlc_team_destroy(out[0])
        lib.mlc_context_destroy(ctx)


@pytest.fixture(scope="module")
def team():
    with core_team(1, 4096, 512) as handle:
        yield handle


@pytest.mark.parametrize(
    "counts, index, data, said",
    [
        ([3, -1], 0, True, "a tensor count is negative"),
        ([3, 4], 1, False, "a non-empty tensor needs a data buffer"),
        ([3, 4], 2, True, "the index is outside the group"),
    ],
)
def test_group_arrive_refusals_say_why(team, counts, index, data, said):
    err = ffi.new("char[512]")
    buf = ffi.new("float[8]")
    c = ffi.new("int64_t[]", counts)
    rc = lib.mlc_team_group_arrive(team, 1, len(counts), c, lib.MLC_FLOAT32, lib.MLC_OP_SUM, index,
                                   ffi.NULL, buf if data else ffi.NULL, ffi.NULL, ffi.NULL, err,
                                   512)  # fmt: skip
    assert rc == lib.MLC_ERR_ARG
    text = ffi.string(err).decode()
    assert "mlc_team_group_arrive: invalid arguments" in text and said in text, text


ROUNDS = 300


@pytest.fixture(scope="module")
def two_thread_team():
    with core_team(2, 0, 1 << 20) as handle:
        lib.mlc_team_set_direct_threshold(handle, 0)  # every request moves data after its check
        yield handle


def start(team, array: np.ndarray):
    tensor = ffi.new("mlc_tensor *")
    tensor.data = ffi.cast("void *", array.ctypes.data)
    tensor.count = array.size
    out = ffi.new("mlc_request **")
    assert lib.mlc_team_allreduce_async(team, tensor, 1, lib.MLC_FLOAT64, lib.MLC_OP_SUM,
                                        ffi.NULL, ffi.NULL, out) == lib.MLC_OK  # fmt: skip
    return out[0]


def finish(request) -> None:
    status = lib.mlc_request_wait(request)
    message = ffi.string(lib.mlc_request_message(request)).decode()
    lib.mlc_request_free(request)
    assert status == lib.MLC_OK, message


def test_a_rank_with_two_requests_in_flight_meets_ranks_that_wait_for_each(two_thread_team):
    """The last rank starts two reductions before it waits for either; the others wait for
    each before they start the next (as a rank a call behind in a pipelined schedule
    does). The last rank's threads take the two at once: the thread of the first must not
    wait behind the agreement of the second, which the others reach only after the
    first's data has moved."""
    team = two_thread_team
    comm = MPI.COMM_WORLD
    rank, n = comm.Get_rank(), comm.Get_size()
    both_at_once = rank == n - 1
    for r in range(ROUNDS):
        first = np.full(2048, rank + r, np.float64)
        second = np.full(2048, 2 * rank + r, np.float64)
        if both_at_once:
            requests = [start(team, first), start(team, second)]
            for request in requests:
                finish(request)
        else:
            finish(start(team, first))
            finish(start(team, second))
        assert first[0] == n * (n - 1) / 2 + n * r and second[0] == n * (n - 1) + n * r
