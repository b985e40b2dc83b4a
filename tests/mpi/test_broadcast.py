"""mc.broadcast: every rank's arrays are overwritten in place with root's data."""

from __future__ import annotations

import numpy as np
import pytest
from mpi_helpers import DTYPES, MOVED_DTYPES, Checks, make_input

import ml_comm as mc

pytestmark = pytest.mark.mpi


def shapes_for(n):
    return [(), (0,), (1,), (n - 1,), (n,), (n + 1,), (7,), (3, 5), (1001,), (2, 0), (5003,)]


def check_broadcast(c: Checks, session, specs, root, tag=""):
    """specs: list of (shape, dtype, seed); each rank fills its arrays with its own
    data, after the call they must hold root's."""
    values = [make_input(session.rank, shape, dt, seed) for shape, dt, seed in specs]
    objects = list(values)
    addresses = [v.__array_interface__["data"][0] for v in values]
    out = mc.broadcast(values, root=root)
    c.true(out is values, f"{tag} root={root}: broadcast did not return the list it was given")
    c.true(
        len(values) == len(objects) and all(a is b for a, b in zip(values, objects)),
        f"{tag} root={root}: the list's arrays were replaced, not overwritten",
    )
    for i, ((shape, dt, seed), v, addr) in enumerate(zip(specs, values, addresses)):
        what = f"{tag} root={root} value {i} ({np.dtype(dt).name}{tuple(shape)})"
        c.equal(v, make_input(root, shape, dt, seed), what)
        c.true(v.__array_interface__["data"][0] == addr, f"{what}: buffer was replaced")
    c.same_on_all_ranks(values, f"{tag} root={root}")


@pytest.mark.parametrize("dtype", MOVED_DTYPES, ids=str)
def test_every_root(session, dtype):
    c = Checks()
    specs = [(s, dtype, i) for i, s in enumerate(shapes_for(session.nranks))]
    for root in range(session.nranks):
        check_broadcast(c, session, specs, root, tag=dtype.name)
    c.finish()


def test_mixed_dtypes_every_root(session):
    c = Checks()
    shapes = shapes_for(session.nranks)
    specs = [(shapes[i % len(shapes)], DTYPES[i % len(DTYPES)], i) for i in range(18)]
    for root in range(session.nranks):
        check_broadcast(c, session, specs, root, tag="mixed")
    c.finish()


def test_default_root_is_zero(session):
    c = Checks()
    a = make_input(session.rank, (9,), np.float32, 1)
    mc.broadcast([a])
    c.equal(a, make_input(0, (9,), np.float32, 1), "default root")
    c.finish()


def test_large(session):
    """~100k elements: many segments of the small chunk size."""
    c = Checks()
    root = session.nranks - 1
    check_broadcast(c, session, [((100_003,), np.float32, 2), ((20_001,), np.int64, 3)], root)
    c.finish()


def test_empty_list(session):
    c = Checks()
    values = []
    out = mc.broadcast(values, root=session.nranks - 1)
    c.true(out is values and values == [], f"broadcast([]) returned {out!r}")
    c.finish()


def test_then_buffers_match(session):
    """The usual start of training: broadcast the weights, then check they match."""
    c = Checks()
    specs = [((33, 17), np.float32, 1), ((17,), np.float32, 2), ((), np.int64, 3)]
    values = [make_input(session.rank, s, dt, seed) for s, dt, seed in specs]
    mc.broadcast(values, root=0)
    c.true(mc.check_buffers_match(values) == 0, "check_buffers_match after broadcast != 0")
    c.finish()


def test_a_root_out_of_range_on_one_rank_fails_on_every_rank(session):
    """One rank's root that no rank has (a root computed per rank, off by one): every rank
    raises, naming that rank and its root, instead of the others waiting for it; nothing
    moved, and the team keeps working."""
    c = Checks()
    n, last = session.nranks, session.nranks - 1
    values = [make_input(session.rank, (4,), np.float32)]
    before = values[0].copy()
    words = (f"rank {last}: root {n + 2}, which no rank has (ranks 0..{last})",)
    c.raises(mc.BadArgumentError, mc.broadcast, values, root=n + 2 if session.rank == last else 0,
             words=words)  # fmt: skip
    c.equal(values[0], before, "untouched")
    check_broadcast(c, session, [((5,), np.float32, 1)], last, "after")
    c.finish()
