"""The C API on its own (no Python session): what a caller gets back for bad input to the
keyed-group entry point, which the TensorFlow ops call once per gradient. Every refusal must
carry a text that says what was wrong: the TF op's error shows nothing else."""

from __future__ import annotations

import pytest
from ml_comm._core import ffi, lib
from mpi4py import MPI


@pytest.fixture(scope="module")
def team():
    err = ffi.new("char[512]")
    ctx = lib.mlc_context_create(MPI._addressof(MPI.COMM_WORLD), err, 512)
    assert ctx != ffi.NULL, ffi.string(err).decode()
    out = ffi.new("mlc_team **")
    assert lib.mlc_team_create(ctx, 1, 4096, 512, out, err, 512) == lib.MLC_OK
    yield out[0]
    lib.mlc_team_destroy(out[0])
    lib.mlc_context_destroy(ctx)


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
