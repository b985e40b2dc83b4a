"""NumPy broadcast (in place, from a root) and check_buffers_match (a digest of each
rank's buffers compared with rank 0's)."""

from __future__ import annotations

import hashlib
import sys

import numpy as np

from .._core import lib
from ..core import dtypes as _dtypes
from ..core.errors import BadArgumentTypeError
from ..core.session import Session
from ..core.status import ERR_LEN, check
from . import device
from .buffers import as_array, group_by_dtype, in_place_array, tensor_list
from .reductions import reduce_in_place


def broadcast(s: Session, values, root: int, team: int = 0):
    """Overwrite each array in `values` (an array or a list of them) with root's; returns values."""
    # A scalar is refused below, saying why.
    single = isinstance(values, (np.ndarray, np.generic)) or device.view(values) is not None
    arrays = [values] if single else values
    if not isinstance(arrays, (list, tuple)):
        raise BadArgumentTypeError(
            f"broadcast takes a list of numpy arrays, got {type(values).__name__}"
        )
    root = s.root_index(root)
    handle = s.team(team)  # a bad team id fails before anything is sent
    if device.holds_device_array(arrays):
        device.broadcast(handle, s.team_err(team), list(arrays), s.check_root(root))
        return values
    arrays = [in_place_array(a, f"broadcast value {i}", i) for i, a in enumerate(arrays)]
    broadcast_arrays(s, arrays, root, team)
    return values


def broadcast_arrays(
    s: Session, arrays: list[np.ndarray], root: int, team: int = 0, what: str = "broadcast"
) -> None:
    """Checked arrays, on `team`: one request per dtype; errors name the call `what`."""
    groups = group_by_dtype(arrays, reduces=False)
    dtypes = _dtypes.bits(groups)
    for part, (dtype, idx) in enumerate(groups.items()):
        tensors, keep = tensor_list([arrays[i] for i in idx])
        code = _dtypes.CODES[dtype]
        err = s.team_err(team)
        rc = lib.mlc_team_broadcast_part(
            s.teams[team], tensors, len(idx), code, root, part, len(groups), dtypes, err, ERR_LEN
        )
        check(rc, what, err)


def check_buffers_match(s: Session, values, flag: int) -> int:
    """0 when every rank holds the same buffers as rank 0, else the number of ranks that differ."""
    if not isinstance(values, (np.ndarray, np.generic, list, tuple)):
        raise BadArgumentTypeError(
            "check_buffers_match takes a numpy array or a list of them, "
            f"got {type(values).__name__}"
        )
    arrays = list(values) if isinstance(values, (list, tuple)) else [values]
    digest = hashlib.blake2b(digest_size=16)
    for i, a in enumerate(arrays):
        a = np.asarray(as_array(a, f"check_buffers_match value {i}", i), order="C")
        digest.update(f"{a.dtype.str}{a.shape}".encode())
        digest.update(a.tobytes())
    mine = np.frombuffer(digest.digest(), dtype=np.int64).copy()
    reference = mine.copy()
    broadcast_arrays(s, [reference], 0, what="check_buffers_match")  # NumPy, any framework
    differs = np.array([0 if np.array_equal(mine, reference) else 1], dtype=np.int64)
    if differs[0] and flag:
        print(f"ml_comm: rank {s.rank}: buffers differ from rank 0's", file=sys.stderr, flush=True)
    reduce_in_place(s, differs, 0, lib.MLC_OP_SUM, "check_buffers_match")
    return int(differs[0])
