"""Memory for gradients' results that was touched before: a fresh 256 MB array costs
about as much in page faults (one per 4 KiB on first write) as half of MPI's whole
allreduce of it, so results come from blocks that earlier calls already wrote.

A call takes one block for all its results and hands out views of it. The block goes
back to the pool when the last of those arrays is collected, so a training loop that
keeps the previous step's results while it computes the next cycles through two
blocks. At most KEEP free blocks are kept; a block is reused for a request of up to
its size, down to half of it. Calls whose results are smaller than MIN_BYTES take
fresh arrays: a few pages fault little.
"""

from __future__ import annotations

import numpy as np

from .._core import lib
from . import _numpy_glue

KEEP = 4
ALIGN = 64  # each result starts on a cache line (blocks start on a page)
MIN_BYTES = lib.MLC_RESULT_POOL_BYTES  # ml_comm.h's, as the TensorFlow op's allocator


def _aligned(nbytes: int) -> int:
    return (nbytes + ALIGN - 1) // ALIGN * ALIGN


class OutputPool:
    """The blocks live in C (_numpy_glue.c): an array over one holds the block until the
    array and its views are gone, without a Python finalizer per call."""

    def __init__(self, keep: int = KEEP):
        self.handle = _numpy_glue.pool(keep)

    def take(self, nbytes: int) -> np.ndarray:
        """A writable uint8 array of nbytes, its pages touched; it (and every view of it)
        returns its memory to the pool once collected."""
        return _numpy_glue.take(self.handle, nbytes)

    def arrays(self, like: list[np.ndarray]) -> list[np.ndarray]:
        """Uninitialised arrays of the shapes and dtypes of `like`, in one pooled block
        (fresh arrays below MIN_BYTES)."""
        if sum(a.nbytes for a in like) < MIN_BYTES:
            return [np.empty(a.shape, a.dtype) for a in like]
        offsets, total = [], 0
        for a in like:
            offsets.append(total)
            total += _aligned(a.nbytes)
        block = self.take(total)
        return [
            block[off : off + a.nbytes].view(a.dtype).reshape(a.shape)
            for off, a in zip(offsets, like)
        ]

    def free_blocks(self) -> int:
        return _numpy_glue.free_blocks(self.handle)
