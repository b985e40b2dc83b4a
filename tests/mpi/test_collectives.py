"""mc.allgather, mc.reducescatter, mc.alltoall and mc.allreduce(op=...): exact results for
every dtype at any rank count, uneven first dimensions (a rank with no rows), rows that do
not divide by the ranks, uneven splits; ranks that call differently fail on every rank,
naming each rank's call, and the team keeps working."""

from __future__ import annotations

import time

import numpy as np
import pytest
from ml_comm._core import ffi, lib
from mpi_helpers import (
    DTYPE_IDS,
    DTYPES,
    MOVED_DTYPES,
    REDUCED_DTYPES,
    Checks,
    average_of,
    make_input,
)

import ml_comm as mc
from ml_comm import api
from ml_comm.arrays import collectives

pytestmark = pytest.mark.mpi

ROW_SHAPE = (2, 3)


def rows_of(rank: int) -> int:
    """Rank 0 has no rows; the others differ."""
    return (rank * 3) % 4 + (rank > 0) * rank


def rows_input(rank: int, rows: int, dtype, seed: int = 0) -> np.ndarray:
    return make_input(rank, (rows, *ROW_SHAPE), dtype, seed)


@pytest.mark.parametrize("dtype", MOVED_DTYPES, ids=str)
def test_allgather_uneven_first_dimension(session, dtype):
    c = Checks()
    n = session.nranks
    mine = rows_input(session.rank, rows_of(session.rank), dtype)
    out = mc.allgather(mine)
    want = np.concatenate([rows_input(r, rows_of(r), dtype) for r in range(n)])
    c.equal(out, want, f"allgather of {dtype.name}")
    c.equal(mine, rows_input(session.rank, rows_of(session.rank), dtype), "allgather's input")
    c.equal(mc.allgather(np.zeros((0, 4), dtype)), np.zeros((0, 4), dtype), "allgather of no rows")
    c.same_on_all_ranks([out], "allgather")
    c.finish()


def small_values(rank: int, shape, dtype) -> np.ndarray:
    """-1, 1 or 2: products over 4 ranks stay exact in every dtype."""
    count = int(np.prod(shape))
    idx = np.arange(count)
    v = np.choose((idx + rank) % 3, [2, -1, 1])
    return v.astype(np.float32).astype(dtype).reshape(shape)


def reduced(op: str, stack: np.ndarray, dtype) -> np.ndarray:
    dtype = np.dtype(dtype)
    if op == "min":
        return stack.min(axis=0)
    if op == "max":
        return stack.max(axis=0)
    # Integer sums and products wrap around in the dtype, as NumPy's (int64 first, then cut).
    wide = np.int64 if dtype.kind in "iu" else np.float64
    if op == "product":
        return stack.astype(wide).prod(axis=0).astype(dtype)
    total = stack.astype(wide).sum(axis=0)
    if op == "sum":
        return total.astype(dtype)
    n = stack.shape[0]
    if dtype.kind in "iu":
        return average_of(stack, dtype, n)
    if dtype == np.float64:
        return np.sum(stack, axis=0, dtype=dtype) / dtype.type(n)
    if dtype == np.float32:
        return (total.astype(np.float32) / np.float32(n)).astype(dtype)
    return (stack.astype(np.float32).sum(axis=0) / np.float32(n)).astype(dtype)


def inputs_for(op: str, rank: int, shape, dtype) -> np.ndarray:
    return small_values(rank, shape, dtype) if op == "product" else make_input(rank, shape, dtype)


OPS = ["sum", "average", "min", "max", "product"]


def skip_half_average(op: str, dtype) -> None:
    if op == "average" and np.dtype(dtype).itemsize == 2:
        pytest.skip("16-bit averages round per step; checked with sums")


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", REDUCED_DTYPES, ids=str)
def test_allreduce_every_op(session, dtype, op):
    skip_half_average(op, dtype)
    c = Checks()
    n = session.nranks
    for shape in [(), (7,), (3, 5), (20011,)]:  # direct / latency path / ring on the threads
        x = inputs_for(op, session.rank, shape, dtype)
        before = x.copy()
        out = mc.allreduce(x, op=op)
        stack = np.stack([inputs_for(op, r, shape, dtype) for r in range(n)])
        c.equal(out, reduced(op, stack, dtype), f"allreduce {op} {dtype.name}{shape}")
        c.equal(x, before, "allreduce's input")
        c.same_on_all_ranks([out], f"allreduce {op}")
    c.finish()


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", REDUCED_DTYPES, ids=str)
def test_reducescatter_rows_not_divisible(session, dtype, op):
    skip_half_average(op, dtype)
    c = Checks()
    n, r = session.nranks, session.rank
    for rows in (0, 1, 2 * n + 1, 3 * n):
        shape = (rows, *ROW_SHAPE)
        out = mc.reducescatter(inputs_for(op, r, shape, dtype), op=op)
        stack = np.stack([inputs_for(op, q, shape, dtype) for q in range(n)])
        full = reduced(op, stack, dtype)
        # Horovod's split: rows // n each, the first rows % n ranks one more.
        shares = [rows // n + (1 if q < rows % n else 0) for q in range(n)]
        first = sum(shares[:r])
        c.equal(out, full[first : first + shares[r]], f"reducescatter {op} of {rows} rows")
    c.finish()


@pytest.mark.parametrize("dtype", MOVED_DTYPES, ids=str)
def test_alltoall_uneven_splits(session, dtype):
    c = Checks()
    n, r = session.nranks, session.rank

    def splits_of(q):
        return [(q + 2 * d) % 3 for d in range(n)]  # some empty, uneven

    def block(q, d):  # rank q's rows for rank d
        return make_input(q * n + d, (splits_of(q)[d], *ROW_SHAPE), dtype)

    mine = np.concatenate([block(r, d) for d in range(n)])
    out, received = mc.alltoall(mine, splits=splits_of(r))
    c.equal(out, np.concatenate([block(q, r) for q in range(n)]), f"alltoall of {dtype.name}")
    c.equal(received, np.array([splits_of(q)[r] for q in range(n)], np.int64), "received splits")
    even = make_input(r, (2 * n, 3), dtype)
    out, received = mc.alltoall(even)
    want = np.concatenate([make_input(q, (2 * n, 3), dtype)[2 * r : 2 * r + 2] for q in range(n)])
    c.equal(out, want, "alltoall without splits")
    c.equal(received, np.full(n, 2, np.int64), "received splits without splits")
    c.finish()


@pytest.mark.parametrize("direct_bytes", [0, 65536], ids=["ring", "agreement"])
def test_counts_inside_the_agreement_or_on_a_ring(session, direct_bytes):
    """Row counts and splits ride inside the agreement exchange while they fit its direct
    payload (n int64 for an allgather, n x n for an alltoall), else a ring carries them:
    the same results either way, at every rank count."""
    c = Checks()
    n, r = session.nranks, session.rank
    team = api.session().team(0)
    before = ffi.new("mlc_team_settings *")
    lib.mlc_team_get_settings(team, before)
    lib.mlc_team_set_direct_threshold(team, direct_bytes)
    try:
        mine = rows_input(r, rows_of(r), np.float32, seed=direct_bytes)
        want = [rows_input(q, rows_of(q), np.float32, seed=direct_bytes) for q in range(n)]
        c.equal(mc.allgather(mine), np.concatenate(want), "allgather")

        def splits_of(q):
            return [(q + d) % 3 for d in range(n)]

        def sent(q):  # rank q's input: its splits in order, values tagged by q
            return np.arange(sum(splits_of(q)), dtype=np.int64) + 100 * q

        def block(q, d):  # what rank q sends to rank d
            start = sum(splits_of(q)[:d])
            return sent(q)[start : start + splits_of(q)[d]]

        out, received = mc.alltoall(sent(r), splits=splits_of(r))
        c.equal(received, np.array([splits_of(q)[r] for q in range(n)], np.int64), "splits")
        c.equal(out, np.concatenate([block(q, r) for q in range(n)]), "alltoall")
    finally:
        lib.mlc_team_set_direct_threshold(team, before.direct_bytes)
    c.finish()


def rows_carried(team, array: np.ndarray) -> tuple[bool, np.ndarray]:
    """The counts request alone, with the rows offered: (whether they came with it, counts)."""
    n = api.session().size
    shape = ffi.new("int64_t[]", [int(d) for d in array.shape[1:]])
    carried, done, counts = (
        ffi.new("char[]", lib.MLC_ROWS_CARRY_BYTES),
        ffi.new("int *"),
        ffi.new("int64_t[]", n),
    )
    err = ffi.new("char[]", 512)
    code = {np.dtype(np.float32): lib.MLC_FLOAT32}[array.dtype]
    rc = lib.mlc_team_allgather_rows(
        team,
        array.shape[0],
        array.ndim - 1,
        shape,
        code,
        ffi.from_buffer(array),
        carried,
        done,
        counts,
        err,
        512,
    )
    assert rc == 0, ffi.string(err).decode()
    if not done[0]:  # the data request the counts request left to do, on every rank alike
        out = np.empty((sum(counts), *array.shape[1:]), array.dtype)
        rc = lib.mlc_team_allgatherv(
            team,
            ffi.from_buffer(array),
            ffi.from_buffer(out),
            counts,
            array.ndim - 1,
            shape,
            code,
            err,
            512,
        )
        assert rc == 0, ffi.string(err).decode()
    return bool(done[0]), np.array(list(counts))


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_small_rows_ride_with_the_counts(session, direct_4k, dtype):
    """Rows that fit the agreement's direct payload on every rank come with the counts,
    bit for bit (-0.0 and a NaN's payload included); one rank's rows past it send every
    rank's by the ring, with the same results."""
    if session.nranks < 2:
        pytest.skip("one rank checks nothing")
    c = Checks()
    n, r = session.nranks, session.rank
    mine = rows_input(r, rows_of(r), dtype, seed=11)
    want = [rows_input(q, rows_of(q), dtype, seed=11) for q in range(n)]
    if dtype == np.float32:  # -0.0 and a NaN with a payload, first in each rank's rows
        for rows in [mine, *want]:
            if len(rows):
                rows.view(np.uint32)[0, 0, :2] = (0x80000000, 0x7FC01234)
    out = mc.allgather(mine)
    c.equal(out.view(np.uint8), np.concatenate(want).view(np.uint8), f"{dtype.name} rows carried")
    c.true(out.dtype == np.dtype(dtype), f"dtype {out.dtype}")
    small = np.full((rows_of(r), 2, 3), r, np.float32)
    done, counts = rows_carried(direct_4k, small)
    c.true(done, "small rows came with the counts")
    c.equal(counts, np.array([rows_of(q) for q in range(n)]), "counts")
    large = np.full((300 if r == n - 1 else rows_of(r), 2, 3), r, np.float32)  # 7,200 bytes
    done, _ = rows_carried(direct_4k, large)
    c.true(not done, "rows past the direct payload on one rank: no rank's rows came along")
    want_large = np.concatenate(
        [np.full((300 if q == n - 1 else rows_of(q), 2, 3), q, np.float32) for q in range(n)]
    )
    c.equal(mc.allgather(large), want_large, "one rank's rows past the payload: the ring")
    c.finish()


def allgather_beside_a_rank_without_memory(c, monkeypatch, mine, want, what: str) -> None:
    """The last rank cannot allocate its allgather output and raises MemoryError alone;
    every other rank gets `want`."""
    if mc.get_rank() == mc.get_nranks() - 1:

        def no_memory(shape, dtype):
            raise MemoryError(f"no room for {shape}")

        monkeypatch.setattr(collectives, "_empty", no_memory)
        with pytest.raises(MemoryError, match="no room"):
            mc.allgather(mine)
        monkeypatch.undo()
    else:
        c.equal(mc.allgather(mine), want, what)


def test_a_rank_that_cannot_take_carried_rows_fails_alone(session, direct_4k, monkeypatch):
    """Rows that came with the counts: the last rank cannot allocate its output and raises
    MemoryError; the others have every rank's rows, and the next allgather works everywhere."""
    c = Checks()
    n, r = session.nranks, session.rank
    mine = rows_input(r, rows_of(r), np.float32, seed=5)
    want = np.concatenate([rows_input(q, rows_of(q), np.float32, seed=5) for q in range(n)])
    allgather_beside_a_rank_without_memory(
        c, monkeypatch, mine, want, "beside a rank without memory"
    )
    c.equal(mc.allgather(mine), want, "the next allgather")
    c.finish()


@pytest.mark.parametrize(
    "rows_of",
    [
        lambda q: (q * 997) % 1500,
        lambda q: 1000 if q == 1 else 0,
        lambda q: 1700 + 300 * q,
        lambda q: 100 if q % 2 else 1000,
    ],
    ids=["uneven", "one rank", "several pieces", "some below the ahead threshold"],
)
def test_allgather_of_blocks_larger_than_a_piece(session, monkeypatch, rows_of):
    """Blocks of up to 1.3 MB travel the ring in pieces of 256 KiB, forwarded as they
    arrive, the first piece of each block of 64 KiB or more sent during the check: exact,
    with empty blocks, beside blocks below 64 KiB, and beside a rank that relays (blocks of
    three pieces and more once hung it)."""
    c = Checks()
    n, r = session.nranks, session.rank

    def rows(q):
        return (np.arange(rows_of(q) * 100, dtype=np.float32).reshape(-1, 100) % 1013) + q

    want = np.concatenate([rows(q) for q in range(n)])
    c.equal(mc.allgather(rows(r)), want, "allgather")
    if n > 1:
        allgather_beside_a_rank_without_memory(
            c, monkeypatch, rows(r), want, "beside a rank that relays"
        )
    c.finish()


@pytest.mark.parametrize("op", ["sum", "average"])
def test_reducescatter_of_blocks_larger_than_a_piece(session, op):
    """Shares of up to 1.2 MB travel the ring in pieces of 256 KiB, each partial forwarded
    as it is made: exact (integer-valued sums), with rows that do not divide by the ranks."""
    c = Checks()
    n, r = session.nranks, session.rank
    rows = 3001

    def rows_of(q):
        return (np.arange(rows * 100, dtype=np.float32).reshape(rows, 100) % 61) * (q + 1)

    total = sum(rows_of(q) for q in range(n))
    want = total / n if op == "average" else total
    shares = [rows // n + (1 if q < rows % n else 0) for q in range(n)]
    first = sum(shares[:r])
    got = mc.reducescatter(rows_of(r), op)
    c.equal(got, want[first : first + shares[r]].astype(np.float32), f"reducescatter {op}")
    c.finish()


def agreement_checks(team) -> int:
    messages, checks = ffi.new("int64_t *"), ffi.new("int64_t *")
    lib.mlc_team_agreement_counts(team, messages, checks)
    return checks[0]


def test_an_allgather_is_checked_once(session):
    """The data request runs on the counts its checked counts request returned: that check
    covers it, so an allgather costs one agreement exchange, an alltoall still two."""
    if session.nranks < 2:
        pytest.skip("one rank checks nothing")
    c = Checks()
    team = api.session().team(0)
    mine = rows_input(session.rank, rows_of(session.rank), np.float32)
    for _ in range(3):
        before = agreement_checks(team)
        mc.allgather(mine)
        checks = agreement_checks(team) - before
        c.true(checks == 1, f"an allgather made {checks} agreement checks")
    before = agreement_checks(team)
    mc.alltoall(np.arange(2 * session.nranks, dtype=np.int64))
    checks = agreement_checks(team) - before
    c.true(checks == 2, f"an alltoall made {checks} agreement checks")
    c.finish()


def test_a_rank_that_cannot_take_its_allgather_output_fails_alone(session, monkeypatch):
    """The last rank cannot allocate its output: it relays the others' rows and raises
    MemoryError; the others get every rank's rows, and the next allgather works everywhere."""
    c = Checks()
    n, r = session.nranks, session.rank
    mine = rows_input(r, rows_of(r), np.float32, seed=7)
    want = np.concatenate([rows_input(q, rows_of(q), np.float32, seed=7) for q in range(n)])
    allgather_beside_a_rank_without_memory(c, monkeypatch, mine, want, "beside a rank that relays")
    c.equal(mc.allgather(mine), want, "the next allgather")
    c.finish()


@pytest.fixture
def pair(session):
    if session.nranks < 2:
        pytest.skip("a mismatch needs at least 2 ranks (this run has 1)")
    return session


def expect_mismatch(c: Checks, fn, *wanted: str) -> None:
    e = c.raises(mc.MismatchError, fn, words=("ranks disagree",))
    text = str(e) if e is not None else ""
    for w in wanted:
        c.true(w in text, f"the message lacks {w!r}: {text!r}")


def still_works(c: Checks, session) -> None:
    out = mc.allgather(np.full((session.rank, 2), session.rank, np.int32))
    want = np.concatenate([np.full((q, 2), q, np.int32) for q in range(session.nranks)])
    c.equal(out, want, "allgather after the mismatch")


def test_allgather_against_reducescatter(pair):
    c = Checks()
    x = np.ones((4, 3), np.float32)
    last = pair.nranks - 1
    call = (lambda: mc.reducescatter(x, "sum")) if pair.rank == last else (lambda: mc.allgather(x))
    expect_mismatch(c, call, "(allgather", "(reducescatter, sum", f"rank {last}")
    still_works(c, pair)
    c.finish()


def still_works_large(c: Checks, session) -> None:
    """A ring's first piece of every rank goes ahead of the check: nothing of a failed
    request's pieces is left to meet the next ones."""
    n, r = session.nranks, session.rank
    out = mc.allgather(np.full((700 + r, 100), r, np.float32))
    want = np.concatenate([np.full((700 + q, 100), q, np.float32) for q in range(n)])
    c.equal(out, want, "a large allgather after the mismatch")
    x = (np.arange(3001 * 100, dtype=np.float32).reshape(3001, 100) % 61) * (r + 1)
    total = sum((np.arange(3001 * 100, dtype=np.float32).reshape(3001, 100) % 61) * (q + 1)
                for q in range(n))  # fmt: skip
    first = sum(3001 // n + (1 if q < 3001 % n else 0) for q in range(r))
    share = 3001 // n + (1 if r < 3001 % n else 0)
    c.equal(mc.reducescatter(x, "sum"), total[first : first + share], "a large reducescatter after")


@pytest.mark.parametrize(
    "last_calls",
    ["reducescatter", "allreduce", "small allgather", "allgather of another dtype"],
)
def test_large_rings_against_another_call(pair, last_calls):
    """The first pieces sent during the check (400 KB blocks) are received or cancelled when
    the check fails: every rank raises, and the next large calls are exact."""
    c = Checks()
    last, big = pair.nranks - 1, np.ones((1000, 100), np.float32)
    other = {
        "reducescatter": lambda: mc.reducescatter(big, "sum"),
        "allreduce": lambda: mc.allreduce(big),
        "small allgather": lambda: mc.allgather(np.ones((10, 100), np.float64)),
        "allgather of another dtype": lambda: mc.allgather(big.astype(np.float64)),
    }[last_calls]
    expect_mismatch(c, other if pair.rank == last else (lambda: mc.allgather(big)), f"rank {last}")
    first = (lambda: mc.reducescatter(big.astype(np.float64))) if pair.rank == 0 else other
    expect_mismatch(c, first if pair.rank != last else (lambda: mc.allgather(big)), "rank 0")
    still_works_large(c, pair)
    c.finish()


@pytest.mark.parametrize("more_on", ["rank 0", "the last rank"])
def test_large_rings_after_ranks_made_different_numbers_of_requests(pair, more_on):
    """Gradients of two dtypes (two requests) against gradients of one: the ranks fail
    together after one of them made a request more than the others (such rings once hung
    there, their first pieces paired by the count of requests each rank had made)."""
    c = Checks()
    more = 0 if more_on == "rank 0" else pair.nranks - 1
    tensors = [np.ones(10, np.float32)] + ([np.ones(10, np.float64)] if pair.rank == more else [])
    expect_mismatch(c, lambda: mc.gradients(tensors))
    still_works_large(c, pair)
    c.finish()


def test_allgather_trailing_dimensions_differ(pair):
    c = Checks()
    last = pair.nranks - 1
    x = np.ones((2, 5 if pair.rank == last else 4), np.float32)
    expect_mismatch(c, lambda: mc.allgather(x), "rows of 4 float32", "rows of 5 float32")
    still_works(c, pair)
    c.finish()


def test_allgather_row_shapes_differ(pair):
    """Rows of 2x3 and of 3x2 elements: the same length, another shape."""
    c = Checks()
    last = pair.nranks - 1
    x = np.ones((2, 3, 2) if pair.rank == last else (2, 2, 3), np.float32)
    want = (f"rank {last} submitted", "of shape (3, 2)", "of shape (2, 3)")
    expect_mismatch(c, lambda: mc.allgather(x), *want)
    expect_mismatch(c, lambda: mc.reducescatter(x, "sum"), *want)
    still_works(c, pair)
    c.finish()


def bad_splits(rank: int, last: int, n: int) -> dict[str, tuple]:
    """Per case: (rows, splits of this rank, what the message says of rank `last`); only
    rank `last` is wrong."""
    good = [1] * n
    cases = {
        "too many": (n, good + [0], f"{n + 1} splits for {n} ranks"),
        "too few": (n, good[:-1], f"{n - 1} splits for {n} ranks"),
        "negative": (n, [-1] + [1] * (n - 2) + [2], "splits[0] is -1, negative"),
        "sum": (n + 2, good, f"splits add up to {n} rows, the input has {n + 2}"),
        "floats": (n, [1.0] * n, "splits are not a 1-D list of 64-bit integers"),
        "uneven": (n + 1, None, f"no splits, and its {n + 1} rows do not divide by the {n} ranks"),
        # From 3 ranks their int64 sum wraps around to the 6 rows of the input.
        "overflow": (
            6,
            [2**63 - 1, 2**63 - 1, 8] + [0] * (n - 3) if n >= 3 else [2**63 - 1, 1],
            "splits add up to more than 2^63-1 rows (at splits[1] = ",
        ),
    }
    return {
        k: (v if rank == last else (n, good if v[1] is not None else None, v[2]))
        for k, v in cases.items()
    }


@pytest.mark.parametrize(
    "case", ["too many", "too few", "negative", "sum", "floats", "uneven", "overflow"]
)
def test_alltoall_bad_splits_fail_on_every_rank(pair, case):
    """Splits that are wrong on one rank fail the call on every rank at once (not after
    the stall warning), naming that rank and what was wrong; the team keeps working."""
    c = Checks()
    last = pair.nranks - 1
    rows, splits, words = bad_splits(pair.rank, last, pair.nranks)[case]
    start = time.monotonic()
    e = c.raises(ValueError, mc.alltoall, np.ones((rows, 2), np.int32), splits=splits,
                 words=("invalid alltoall arguments",))  # fmt: skip
    c.true(time.monotonic() - start < 10, "the error came after the stall watchdog's wait")
    text = str(e) if e is not None else ""
    c.true(f"rank {last}: {words}" in text, f"the message lacks rank {last}'s {words!r}: {text!r}")
    c.true("the other ranks' arguments are valid" in text, f"valid ranks not said: {text!r}")
    still_works(c, pair)
    c.finish()


def test_alltoall_bad_splits_on_every_rank(session):
    """Every rank wrong alike (at one rank too): each raises, naming the ranks."""
    c = Checks()
    n = session.nranks
    ranks = "rank 0" if n == 1 else f"ranks 0-{n - 1}"
    c.raises(ValueError, mc.alltoall, np.ones((n, 2), np.int32), splits=[1] * (n + 1),
             words=(f"{ranks}: {n + 1} splits for {n} ranks",))  # fmt: skip
    still_works(c, session)
    c.finish()


def test_allgather_dtypes_differ(pair):
    c = Checks()
    x = np.ones((2, 4), np.float64 if pair.rank == 0 else np.float32)
    expect_mismatch(c, lambda: mc.allgather(x), "float64", "float32")
    still_works(c, pair)
    c.finish()


def test_reducescatter_ops_and_rows_differ(pair):
    c = Checks()
    op = "sum" if pair.rank == 0 else "average"
    expect_mismatch(c, lambda: mc.reducescatter(np.ones((4, 2), np.float32), op), "sum", "average")
    rows = 4 if pair.rank == 0 else 5
    expect_mismatch(c, lambda: mc.reducescatter(np.ones((rows, 2), np.float32)), "elements")
    still_works(c, pair)
    c.finish()


def test_allreduce_ops_differ(pair):
    c = Checks()
    op = "min" if pair.rank == 0 else "max"
    expect_mismatch(c, lambda: mc.allreduce(np.ones(1000, np.float32), op=op), "(min", "(max")
    still_works(c, pair)
    c.finish()


def test_bad_arguments_raise_before_sending(session):
    c = Checks()
    c.raises(ValueError, mc.allreduce, np.ones(3), op="mean", words=("op must be",))
    c.raises(ValueError, mc.reducescatter, np.ones(3), op="median", words=("op must be",))
    c.raises(ValueError, mc.allgather, np.float32(1.0), words=("no first dimension",))
    c.raises(ValueError, mc.alltoall, np.ones(4), splits=[5] * session.nranks, words=("add up",))
    c.raises(TypeError, mc.allgather, np.ones(2, np.complex64), words=("dtype",))
    still_works(c, session)
    c.finish()


def test_a_0d_array_on_one_rank_fails_on_every_rank(session):
    """One rank's 0-d array (no rows) in a collective of rows: every rank raises, naming
    that rank, instead of the others waiting for it; the team keeps working."""
    c = Checks()
    last = session.nranks - 1
    rows = np.float32(1.0) if session.rank == last else np.ones((session.nranks, 2), np.float32)
    for call in (mc.allgather, mc.reducescatter, mc.alltoall):
        c.raises(mc.BadArgumentError, call, rows, words=(f"rank {last}: a 0-d tensor",))
    still_works(c, session)
    c.finish()


def test_bool_is_moved_never_reduced(session):
    """bool travels (allgather, alltoall, broadcast) but a reduction of it fails on every
    rank before anything is sent, naming the dtype; the team keeps working."""
    c = Checks()
    flags = make_input(session.rank, (4,), np.bool_)
    for name, call in [
        ("allreduce", lambda: mc.allreduce(flags, op="max")),
        ("reducescatter", lambda: mc.reducescatter(flags, op="sum")),
        ("average", lambda: mc.average(flags.copy())),
        ("gradients", lambda: mc.gradients([flags])),
    ]:
        with pytest.raises(TypeError, match="cannot reduce dtype bool") as raised:
            call()
        c.true("broadcast, allgather and alltoall" in str(raised.value), f"{name}: {raised.value}")
    c.equal(
        mc.allreduce(np.ones(3, np.int8), op="sum"), np.full(3, session.nranks, np.int8), "after"
    )
    c.finish()
