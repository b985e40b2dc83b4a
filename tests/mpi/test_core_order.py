"""Requests of one team started on several ranks in different rhythms: the last rank
starts two reductions before it waits for either, the others wait for each before they
start the next, as a rank a call behind in a pipelined schedule does. The last rank's
threads take the two requests at once; the thread of the first must not wait behind
the agreement of the second, which the others reach only after the first finished."""

from __future__ import annotations

import numpy as np
import pytest
from ml_comm._core import ffi, lib
from mpi4py import MPI

ROUNDS = 300


@pytest.fixture(scope="module")
def team():
    err = ffi.new("char[512]")
    ctx = lib.mlc_context_create(MPI._addressof(MPI.COMM_WORLD), err, 512)
    assert ctx != ffi.NULL, ffi.string(err).decode()
    out = ffi.new("mlc_team **")
    assert lib.mlc_team_create(ctx, 2, 0, 1 << 20, out, err, 512) == lib.MLC_OK
    lib.mlc_team_set_direct_threshold(out[0], 0)  # every request moves data after its check
    yield out[0]
    lib.mlc_team_destroy(out[0])
    lib.mlc_context_destroy(ctx)


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


def test_a_rank_with_two_requests_in_flight_meets_ranks_that_wait_for_each(team):
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
