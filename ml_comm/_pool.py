"""Memory for gradients' results that was touched before: a fresh 256 MB array costs
about as much in page faults (one per 4 KiB on first write) as half of MPI's whole
allreduce of it, so results come from blocks that earlier calls already wrote.

A call takes one block for all its results and hands out views of it. The block goes
back to the pool when the last of those arrays is collected, so a training loop that
keeps the previous step's results while it computes the next cycles through two
blocks. At most KEEP free blocks are kept; a block is reused for a request of up to
its size, down to half of it. Calls whose results are smaller than MIN_BYTES take
fresh arrays: a few pages fault little, and the pool's bookkeeping (a finalizer per
call) would cost more than it saves.
"""

from __future__ import annotations

import ctypes
import threading
import weakref

import numpy as np

KEEP = 4
ALIGN = 64  # each result starts on a cache line
MIN_BYTES = 256 * 1024


def _aligned(nbytes: int) -> int:
    return (nbytes + ALIGN - 1) // ALIGN * ALIGN


class OutputPool:
    def __init__(self, keep: int = KEEP):
        self._keep = keep
        self._free: list[np.ndarray] = []  # uint8 blocks, oldest first
        self._lock = threading.Lock()

    def _reuse(self, nbytes: int) -> np.ndarray | None:
        with self._lock:
            fits = [i for i, b in enumerate(self._free) if nbytes <= b.size <= 2 * nbytes]
            if not fits:
                return None
            best = min(fits, key=lambda i: self._free[i].size)
            return self._free.pop(best)  # by position: == on arrays compares elements

    def _give_back(self, block: np.ndarray) -> None:
        with self._lock:
            self._free.append(block)
            del self._free[: -self._keep]

    def take(self, nbytes: int) -> np.ndarray:
        """A writable uint8 array of nbytes, its pages touched; it (and every view of it)
        returns its memory to the pool once collected."""
        block = self._reuse(nbytes)
        if block is None:
            raw = np.empty(nbytes + ALIGN, np.uint8)
            start = -raw.ctypes.data % ALIGN
            block = raw[start : start + nbytes]
            block.fill(0)  # touch every page now, once
        # Views of an array over a ctypes buffer keep that array alive, and with it the
        # ctypes object: its finalizer runs when the last view is gone.
        owner = (ctypes.c_char * block.size).from_buffer(block)
        weakref.finalize(owner, self._give_back, block)
        return np.frombuffer(owner, np.uint8)[:nbytes]

    def array_like(self, a: np.ndarray) -> np.ndarray:
        """arrays([a])[0], without the list (the latency-bound one-tensor call)."""
        if a.nbytes < MIN_BYTES:
            return np.empty(a.shape, a.dtype)
        return self.take(a.nbytes).view(a.dtype).reshape(a.shape)

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
        with self._lock:
            return len(self._free)
