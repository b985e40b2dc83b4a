"""NumPy collectives of rows, out of place: allgather (a first dimension that may differ
by rank), reducescatter (the first dimension split over the ranks), alltoall (rows sent
in splits, one per rank) and allreduce with any op. Each runs in the C core as its
algorithm of the table (csrc/team/rows.c), checked by the ranks' agreement first, so a
rank that calls something else fails on every rank with the core's message."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .._core import ffi, lib
from ..core import dtypes as _dtypes
from ..core.session import Session
from ..core.status import ERR_LEN, check
from .buffers import as_array, buffer
from .pool import MIN_BYTES, OutputPool

# Results of a MiB or more come from memory earlier calls touched (pool.py says why).
_RESULTS = OutputPool()

OPS = {
    "sum": lib.MLC_OP_SUM,
    "average": lib.MLC_OP_AVERAGE,
    "min": lib.MLC_OP_MIN,
    "max": lib.MLC_OP_MAX,
    "product": lib.MLC_OP_PRODUCT,
}


def op_code(op: str, what: str, allowed: Sequence[str] = tuple(OPS)) -> int:
    if op not in allowed:
        raise ValueError(f"{what}: op must be one of {', '.join(allowed)}; got {op!r}")
    return OPS[op]


def _input(array, what: str, rows: bool) -> tuple[np.ndarray, int]:
    """A C-contiguous array of a supported dtype (copied only when it is not one) and
    its dtype's code; rows: it must have a first dimension."""
    arr = np.asarray(as_array(array, what), order="C")  # 0-d stays 0-d
    code = _dtypes.code_of(arr.dtype)
    if rows and arr.ndim == 0:
        raise ValueError(f"{what} takes an array with a first dimension (rows); got a 0-d array")
    return arr, code


def _empty(shape: tuple, dtype: np.dtype) -> np.ndarray:
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if nbytes < MIN_BYTES:
        return np.empty(shape, dtype)
    return _RESULTS.take(nbytes).view(dtype).reshape(shape)


def _row_elements(arr: np.ndarray) -> int:
    return int(np.prod(arr.shape[1:], dtype=np.int64))


def allgather(s: Session, array, team: int) -> np.ndarray:
    """Every rank's rows, in rank order: shape (sum of the ranks' rows, *array.shape[1:])."""
    arr, code = _input(array, "allgather", rows=True)
    handle, row = s.team(team), _row_elements(arr)
    all_rows = ffi.new("int64_t[]", s.size)
    rc = lib.mlc_team_allgather_rows(handle, arr.shape[0], row, code, all_rows, s.err, ERR_LEN)
    check(rc, "allgather", s.err)
    out = _empty((sum(all_rows), *arr.shape[1:]), arr.dtype)
    rc = lib.mlc_team_allgatherv(
        handle, buffer(arr), buffer(out), all_rows, row, code, s.err, ERR_LEN
    )
    check(rc, "allgather", s.err)
    return out


def reducescatter(s: Session, array, op: str, team: int) -> np.ndarray:
    """The rows reduced over the ranks, this rank's share of them: rows // size, one more
    on the first rows % size ranks (Horovod's split), consecutive in rank order."""
    code_op = op_code(op, "reducescatter")
    arr, code = _input(array, "reducescatter", rows=True)
    handle, row = s.team(team), _row_elements(arr)
    share = lib.mlc_rows_share(arr.shape[0], s.size, s.rank)
    out = _empty((share, *arr.shape[1:]), arr.dtype)
    rc = lib.mlc_team_reducescatter(
        handle, buffer(arr), buffer(out), arr.shape[0], row, code, code_op, s.err, ERR_LEN
    )
    check(rc, "reducescatter", s.err)
    return out


def alltoall(s: Session, array, splits, team: int) -> tuple[np.ndarray, np.ndarray]:
    """Split d of the rows (splits[d] rows, in order) goes to rank d; returns the rows
    received, in rank order, and how many came from each rank. splits=None: the rows
    split evenly (their number must divide by the ranks)."""
    arr, code = _input(array, "alltoall", rows=True)
    send = _splits(splits, arr.shape[0], s.size)
    handle, row = s.team(team), _row_elements(arr)
    send_rows = ffi.new("int64_t[]", [int(x) for x in send])
    recv_rows = ffi.new("int64_t[]", s.size)
    rc = lib.mlc_team_alltoall_splits(handle, send_rows, row, code, recv_rows, s.err, ERR_LEN)
    check(rc, "alltoall", s.err)
    received = np.array(list(recv_rows), dtype=np.int64)
    out = _empty((int(received.sum()), *arr.shape[1:]), arr.dtype)
    rc = lib.mlc_team_alltoallv(
        handle, buffer(arr), send_rows, buffer(out), recv_rows, row, code, s.err, ERR_LEN
    )
    check(rc, "alltoall", s.err)
    return out, received


def _splits(splits, rows: int, size: int) -> np.ndarray:
    if splits is None:
        if rows % size:
            raise ValueError(
                f"alltoall without splits sends rows / size rows to each rank: {rows} rows do "
                f"not divide by {size} ranks; pass splits"
            )
        return np.full(size, rows // size, dtype=np.int64)
    send = np.asarray(splits)
    if send.ndim != 1 or send.shape[0] != size or not np.issubdtype(send.dtype, np.integer):
        raise ValueError(f"alltoall: splits must be {size} integers (one per rank); got {splits!r}")
    if (send < 0).any() or int(send.sum()) != rows:
        raise ValueError(
            f"alltoall: splits must be non-negative and add up to the {rows} rows; got {splits!r}"
        )
    return send.astype(np.int64)


def allreduce(s: Session, array, op: str, team: int) -> np.ndarray:
    """A new array: `array` reduced with op over the ranks (the input is not written)."""
    code_op = op_code(op, "allreduce")
    arr, code = _input(array, "allreduce", rows=False)
    out = _empty(arr.shape, arr.dtype)
    rc = lib.mlc_team_allreduce_into(
        s.team(team), buffer(arr), buffer(out), arr.size, code, code_op, 0, s.err, ERR_LEN
    )
    check(rc, "allreduce", s.err)
    return out
