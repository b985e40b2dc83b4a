"""NumPy collectives of rows, out of place: allgather (a first dimension that may differ
by rank), reducescatter (the first dimension split over the ranks), alltoall (rows sent
in splits, one per rank) and allreduce with any op. Each runs in the C core as its
algorithm of the table (csrc/team/rows.c), checked by the ranks' agreement first, so a
rank that calls something else fails on every rank with the core's message."""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence

import numpy as np

from .._core import ffi, lib
from ..core.errors import BadArgumentError
from ..core.session import Session
from ..core.status import ERR_LEN, check
from .buffers import as_array, buffer, dtype_code, shape_digest
from .pool import MIN_BYTES, OutputPool

# Results of a MiB or more come from memory earlier calls touched (pool.py says why).
_RESULTS = OutputPool()
# Each thread's buffer for an allgather's rows carried by its agreement check.
_CARRIED = threading.local()


def _carried_buffers():
    """This thread's (rows buffer, done flag) for mlc_team_allgather_rows."""
    bufs = getattr(_CARRIED, "bufs", None)
    if bufs is None:
        bufs = _CARRIED.bufs = (ffi.new("char[]", lib.MLC_ROWS_CARRY_BYTES), ffi.new("int *"))
    return bufs


OPS = {
    "sum": lib.MLC_OP_SUM,
    "average": lib.MLC_OP_AVERAGE,
    "min": lib.MLC_OP_MIN,
    "max": lib.MLC_OP_MAX,
    "product": lib.MLC_OP_PRODUCT,
}


def op_code(op: str, what: str, allowed: Sequence[str] = tuple(OPS)) -> int:
    if op not in allowed:
        raise BadArgumentError(f"{what}: op must be one of {', '.join(allowed)}; got {op!r}")
    return OPS[op]


def _input(array, what: str, reduces: bool = False) -> tuple[np.ndarray, int]:
    """A C-contiguous array of a supported dtype (copied only when it is not one) and
    its dtype's code; reduces: a reduction's input."""
    arr = np.asarray(as_array(array, what), order="C")  # 0-d stays 0-d
    return arr, dtype_code(arr.dtype, reduces)


def _empty(shape: tuple, dtype: np.dtype) -> np.ndarray:
    nbytes = math.prod(shape) * dtype.itemsize  # np.prod of a tuple costs microseconds
    if nbytes < MIN_BYTES:
        return np.empty(shape, dtype)
    return _RESULTS.take(nbytes).view(dtype).reshape(shape)


def _row_shape(arr: np.ndarray):
    """The dimensions after the first, as the core compares them across ranks; a 0-d
    array has none, which the core fails on every rank (MLC_ROWS_NONE), naming this one,
    instead of the others waiting for it."""
    if arr.ndim == 0:
        return lib.MLC_ROWS_NONE, ffi.NULL
    return len(arr.shape) - 1, ffi.new("int64_t[]", [int(d) for d in arr.shape[1:]])


def _rows(arr: np.ndarray) -> int:
    return arr.shape[0] if arr.ndim else 0


def allgather(s: Session, array, team: int) -> np.ndarray:
    """Every rank's rows, in rank order: shape (sum of the ranks' rows, *array.shape[1:])."""
    arr, code = _input(array, "allgather")
    handle, (ndim, shape) = s.team(team), _row_shape(arr)
    all_rows = ffi.new("int64_t[]", s.size)
    carried, carried_done = _carried_buffers()
    rc = lib.mlc_team_allgather_rows(
        handle,
        _rows(arr),
        ndim,
        shape,
        code,
        buffer(arr),
        carried,
        carried_done,
        all_rows,
        s.err,
        ERR_LEN,
    )
    check(rc, "allgather", s.err)
    shape_out = (sum(ffi.unpack(all_rows, s.size)), *arr.shape[1:])
    if carried_done[0]:  # the rows came with the counts: nothing more moves on any rank
        out = _empty(shape_out, arr.dtype)
        ffi.memmove(ffi.from_buffer(out), carried, out.nbytes)
        return out
    try:
        out = _empty(shape_out, arr.dtype)
    except BaseException:
        # The data moves without a check of its own: this rank relays the others' rows
        # (the ring needs every rank), keeps none, and fails alone.
        lib.mlc_team_allgatherv(
            handle, buffer(arr), ffi.NULL, all_rows, ndim, shape, code, s.err, ERR_LEN
        )
        raise
    rc = lib.mlc_team_allgatherv(
        handle, buffer(arr), buffer(out), all_rows, ndim, shape, code, s.err, ERR_LEN
    )
    check(rc, "allgather", s.err)
    return out


def reducescatter(s: Session, array, op: str, team: int) -> np.ndarray:
    """The rows reduced over the ranks, this rank's share of them: rows // size, one more
    on the first rows % size ranks (Horovod's split), consecutive in rank order."""
    code_op = op_code(op, "reducescatter")
    arr, code = _input(array, "reducescatter", reduces=True)
    handle, (ndim, shape) = s.team(team), _row_shape(arr)
    share = lib.mlc_rows_share(_rows(arr), s.size, s.rank)
    out = _empty((share, *arr.shape[1:]), arr.dtype)
    rc = lib.mlc_team_reducescatter(
        handle, buffer(arr), buffer(out), _rows(arr), ndim, shape, code, code_op, s.err, ERR_LEN
    )
    check(rc, "reducescatter", s.err)
    return out


def alltoall(s: Session, array, splits, team: int) -> tuple[np.ndarray, np.ndarray]:
    """Split d of the rows (splits[d] rows, in order) goes to rank d; returns the rows
    received, in rank order, and how many came from each rank. splits=None: the rows
    split evenly (their number must divide by the ranks). The core checks the splits, so
    that wrong ones on any rank raise BadArgumentError on every rank, naming each such rank."""
    arr, code = _input(array, "alltoall")
    handle, (ndim, shape) = s.team(team), _row_shape(arr)
    given, nsplits = _splits(splits)
    send_rows = ffi.new("int64_t[]", s.size)
    recv_rows = ffi.new("int64_t[]", s.size)
    rc = lib.mlc_team_alltoall_splits(
        handle, given, nsplits, _rows(arr), ndim, shape, code, send_rows, recv_rows,
        s.err, ERR_LEN,
    )  # fmt: skip
    check(rc, "alltoall", s.err)
    received = np.array(list(recv_rows), dtype=np.int64)
    try:
        out = _empty((int(received.sum()), *arr.shape[1:]), arr.dtype)
    except MemoryError:
        # The others are about to exchange with this rank: it still takes part, with no
        # output, and the core fails the call on every rank, naming this one.
        out = None
    rc = lib.mlc_team_alltoallv(
        handle, buffer(arr), send_rows, ffi.NULL if out is None else buffer(out), recv_rows,
        ndim, shape, code, s.err, ERR_LEN,
    )  # fmt: skip
    check(rc, "alltoall", s.err)
    return out, received


def _splits(splits):
    """The splits as the core takes them: (NULL, 0) for none (evenly), (NULL, -1) for
    something that is not a 1-D list of 64-bit integers (the core says so on every rank)."""
    if splits is None:
        return ffi.NULL, 0
    send = np.asarray(splits)
    if send.ndim != 1 or not (np.issubdtype(send.dtype, np.integer) or send.size == 0):
        return ffi.NULL, -1
    values = [int(x) for x in send]
    if any(not -(2**63) <= x < 2**63 for x in values):  # numbers numpy kept as objects
        return ffi.NULL, -1
    return ffi.new("int64_t[]", values), len(values)


def allreduce(s: Session, array, op: str, team: int) -> np.ndarray:
    """A new array: `array` reduced with op over the ranks (the input is not written)."""
    code_op = op_code(op, "allreduce")
    arr, code = _input(array, "allreduce", reduces=True)
    out = _empty(arr.shape, arr.dtype)
    rc = lib.mlc_team_allreduce_into(
        s.team(team),
        buffer(arr),
        buffer(out),
        arr.size,
        code,
        code_op,
        0,
        shape_digest(arr),
        s.err,
        ERR_LEN,
    )
    check(rc, "allreduce", s.err)
    return out
