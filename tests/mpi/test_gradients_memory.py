"""Where gradients' results live: `out=` (including the gradients themselves, in place),
and the pool of memory that earlier calls touched (ml_comm/arrays/pool.py), which a result gives
back when it is collected. Exact, integer-valued inputs as everywhere in tests/mpi."""

from __future__ import annotations

import gc

import numpy as np
import pytest
from mpi_helpers import Checks, expected_average, make_input

import ml_comm as mc
from ml_comm.arrays import pool as _pool

SHAPES = [(3000,), (7,), (), (40, 50), (0,)]


def inputs(session, dtype=np.float32, seed=0):
    return [make_input(session.rank, s, dtype, seed + i) for i, s in enumerate(SHAPES)]


def expect(c: Checks, session, results, dtype=np.float32, seed=0, what="") -> None:
    for i, (s, r) in enumerate(zip(SHAPES, results)):
        c.equal(r, expected_average(s, dtype, session.nranks, seed + i), f"{what} gradient {i}")


def test_out_receives_the_averages(session):
    c = Checks()
    grads = inputs(session)
    before = [g.copy() for g in grads]
    out = [np.full(g.shape, -7, g.dtype) for g in grads]
    got = mc.gradients(grads, out=out)
    c.true(all(a is b for a, b in zip(got, out)), "gradients(out=) returns the out arrays")
    expect(c, session, out, what="out")
    for g, b in zip(grads, before):
        c.equal(g, b, "input untouched")
    c.finish()


def test_out_may_be_the_gradients_themselves(session):
    c = Checks()
    grads = inputs(session, np.float64, seed=3)
    got = mc.gradients(grads, out=grads)
    c.true(all(a is b for a, b in zip(got, grads)), "in place: the gradients are returned")
    expect(c, session, grads, np.float64, seed=3, what="in place")
    c.finish()


@pytest.mark.parametrize(
    "bad, words",
    [
        (lambda g: g[:-1], ("list of 5 arrays",)),
        (lambda g: [np.zeros((2,), np.float32)] + g[1:], ("out[0]", "shape (3000,)")),
        (lambda g: [x.astype(np.float64) for x in g], ("out[0]", "float32")),
        (lambda g: [np.zeros((6000,), np.float32)[::2]] + g[1:], ("out[0]", "contiguous")),
    ],
    ids=["length", "shape", "dtype", "strided"],
)
def test_bad_out_fails_on_every_rank_before_sending(session, bad, words):
    c = Checks()
    grads = inputs(session)
    c.raises(ValueError, mc.gradients, grads, out=bad([g.copy() for g in grads]), words=words)
    got = mc.gradients(grads)  # the team is still in step on every rank
    expect(c, session, got, what="after the refusal")
    c.finish()


def test_results_reuse_memory_once_collected(session):
    """Results of at least the pool's MIN_BYTES come from blocks earlier calls wrote;
    results still alive are never handed out again."""
    c = Checks()
    count = _pool.MIN_BYTES // 4 + 1001
    grad = [make_input(session.rank, (count,), np.float32, 5)]
    want = expected_average((count,), np.float32, session.nranks, 5)
    first = mc.gradients(grad)
    second = mc.gradients(grad)  # first is alive: other memory
    c.true(not np.shares_memory(first[0], second[0]), "a live result's memory was handed out")
    address = first[0].ctypes.data
    del first
    gc.collect()
    third = mc.gradients(grad)
    c.true(third[0].ctypes.data == address, "a collected result's block was not reused")
    c.equal(second[0], want, "second")
    c.equal(third[0], want, "third (reused block)")
    c.finish()
