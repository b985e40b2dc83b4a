"""The pool that gradients' results come from (ml_comm/arrays/pool.py): blocks go back when the
last result of a call is collected, are reused for calls of up to their size (down to half),
are never handed out while a result lives, and at most KEEP free ones are kept."""

from __future__ import annotations

import gc

import numpy as np

from ml_comm.arrays import pool as _pool

BIG = _pool.MIN_BYTES // 4  # float32 elements: one call's results reach MIN_BYTES


def like(*counts: int) -> list[np.ndarray]:
    return [np.zeros(c, np.float32) for c in counts]


def test_shapes_dtypes_and_alignment():
    pool = _pool.OutputPool()
    shapes = [np.zeros((300, 400), np.float32), np.zeros((), np.float64), np.zeros((0,), np.int8)]
    out = pool.arrays(shapes)
    assert [(a.shape, a.dtype) for a in out] == [(a.shape, a.dtype) for a in shapes]
    assert all(a.flags.writeable and a.flags.c_contiguous for a in out)
    assert all(a.ctypes.data % _pool.ALIGN == 0 for a in out)


def test_small_calls_take_fresh_arrays():
    pool = _pool.OutputPool()
    pool.arrays(like(10, 20))
    gc.collect()
    assert pool.free_blocks() == 0


def test_a_block_returns_when_its_last_result_is_collected_and_is_reused():
    pool = _pool.OutputPool()
    first = pool.arrays(like(BIG, 7))
    address = first[0].ctypes.data
    keep = first[1]
    del first
    gc.collect()
    assert pool.free_blocks() == 0  # one result of the call is still alive
    other = pool.arrays(like(BIG, 7))
    assert not np.shares_memory(other[0], keep)
    del keep, other
    gc.collect()
    assert pool.free_blocks() == 2
    again = pool.arrays(like(BIG, 7))
    assert again[0].ctypes.data == address  # the oldest free block of the size
    assert pool.free_blocks() == 1


def test_blocks_of_other_sizes_are_told_apart():
    """Blocks of several sizes in the free list; each call gets the smallest that fits."""
    pool = _pool.OutputPool()
    small, large = pool.arrays(like(BIG)), pool.arrays(like(4 * BIG))
    small_addr, large_addr = small[0].ctypes.data, large[0].ctypes.data
    del small, large
    gc.collect()
    assert pool.free_blocks() == 2
    assert pool.arrays(like(3 * BIG))[0].ctypes.data == large_addr
    assert pool.arrays(like(BIG))[0].ctypes.data == small_addr
    assert pool.arrays(like(16 * BIG))[0].ctypes.data not in (small_addr, large_addr)


def test_at_most_keep_free_blocks():
    pool = _pool.OutputPool(keep=2)
    calls = [pool.arrays(like(BIG)) for _ in range(5)]
    del calls
    gc.collect()
    assert pool.free_blocks() == 2
