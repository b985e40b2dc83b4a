"""Ranks that submit different requests to one team (lengths, tensor counts, layouts,
dtypes, reduce ops, broadcast roots) get a MismatchError on every rank that names each
rank and what it submitted (csrc/agree/), instead of a hang or wrong numbers;
the team then keeps working, in step, on every rank.

The ranks make different calls here on purpose; every test still ends with the same
collective calls on every rank (a correct reduction and Checks.finish()).
"""

from __future__ import annotations

import numpy as np
import pytest
from ml_comm._core import lib
from mpi_helpers import Checks, expected_average, make_input

import ml_comm as mc

pytestmark = pytest.mark.mpi


@pytest.fixture
def pair(session):
    """The session, at two ranks or more (one rank cannot disagree with itself)."""
    if session.nranks < 2:
        pytest.skip("a mismatch needs at least 2 ranks (this run has 1)")
    return session


def ranks_text(ranks: list[int]) -> str:
    """How the message lists ranks: "rank 2", "ranks 0-1", "ranks 0-2"."""
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    return f"ranks {ranks[0]}-{ranks[-1]}"


def expect_mismatch(c: Checks, fn, *wanted: str) -> None:
    """fn raises MismatchError (with the core's status) on this rank, and its message
    holds every `wanted` text."""
    e = c.raises(mc.MismatchError, fn, words=("ranks disagree",))
    c.true(getattr(e, "status", None) == lib.MLC_ERR_MISMATCH, f"status of {e!r}")
    text = str(e) if e is not None else ""
    for w in wanted:
        c.true(w in text, f"the message lacks {w!r}: {text!r}")


def still_works(c: Checks, session, team: int = 0, seed: int = 7) -> None:
    """A correct call afterwards gives the exact average on every rank."""
    shapes = [(5, 3), (301,), ()]
    grads = [make_input(session.rank, s, np.float32, seed + i) for i, s in enumerate(shapes)]
    out = mc.gradients(grads, team)
    for i, s in enumerate(shapes):
        want = expected_average(s, np.float32, session.nranks, seed + i)
        c.equal(out[i], want, f"gradients[{i}] after the mismatch")


# 10 elements: the direct allreduce inside the check; 100: recursive doubling on the
# caller's thread; 1000: the ring on the caller's thread; 20011: the team's threads
# (thresholds of mpi_helpers.ml_comm_session); 70000: gradients' result from the pool.
# gradients([g]) takes a short path of its own (ml_comm/arrays/_numpy_glue.c): named there too.
@pytest.mark.parametrize("count", [10, 100, 1000, 20011, 70000])
@pytest.mark.parametrize("call", ["average", "gradients"])
def test_length(pair, call, count):
    c = Checks()
    last = pair.nranks - 1
    others = list(range(last))
    a = np.ones(count + (pair.rank == last), np.float32)
    expect_mismatch(
        c,
        lambda: mc.average(a) if call == "average" else mc.gradients([a]),
        f"{ranks_text(others)} submitted 1 tensor, {count} float32 elements (average)",
        f"rank {last} submitted 1 tensor, {count + 1} float32 elements (average)",
    )
    c.true(np.all(a == 1), "the input was changed although nothing was reduced")
    still_works(c, pair)
    c.finish()


def test_empty_against_nonempty(pair):
    c = Checks()
    a = np.ones(0 if pair.rank == 0 else 5, np.float32)
    expect_mismatch(
        c, lambda: mc.average(a), "rank 0 submitted 1 tensor, 0 float32", "5 float32 elements"
    )
    still_works(c, pair)
    c.finish()


EMPTY_CALL = "submitted no tensors (a list that was empty or held only None)"


def test_empty_list_against_gradients(pair):
    """A rank whose list is empty still makes the call: every rank fails it, instead of
    the others pairing their gradients with that rank's next call."""
    c = Checks()
    last = pair.nranks - 1
    grads = [] if pair.rank == last else [np.ones(4, np.float32)]
    expect_mismatch(c, lambda: mc.gradients(grads), f"rank {last} {EMPTY_CALL}")
    still_works(c, pair)
    c.finish()


def test_empty_lists_everywhere(session):
    c = Checks()
    c.true(mc.gradients([]) == [], "gradients([]) on every rank")
    still_works(c, session)
    c.finish()


def test_number_of_tensors(pair):
    c = Checks()
    last = pair.nranks - 1
    grads = [np.ones(4, np.float32) for _ in range(3 if pair.rank == last else 2)]
    expect_mismatch(
        c,
        lambda: mc.gradients(grads),
        "submitted 2 tensors, 8 float32",
        f"rank {last} submitted 3 tensors, 12 float32",
    )
    still_works(c, pair)
    c.finish()


def test_same_total_other_shapes(pair):
    """Equal totals split differently: the message shows each rank's tensor sizes."""
    c = Checks()
    sizes = [4, 6] if pair.rank == 0 else [6, 4]
    grads = [np.ones(n, np.float32) for n in sizes]
    # gradients() lays the list out last tensor first, as backprop produces it.
    expect_mismatch(
        c,
        lambda: mc.gradients(grads),
        "rank 0 submitted 2 tensors, 10 float32 elements of sizes 6, 4",
        "submitted 2 tensors, 10 float32 elements of sizes 4, 6",
    )
    still_works(c, pair)
    c.finish()


# 10 elements: inside the check; 20010: on the team's threads. gradients of one array
# takes the C glue's path, of two the general one; average reduces in place.
@pytest.mark.parametrize("count", [10, 20010])
@pytest.mark.parametrize("call", ["average", "gradients", "gradients of two"])
def test_same_sizes_other_dimensions(pair, call, count):
    """Tensors of one element count in other shapes (2 x n/2 against n/2 x 2) would be
    averaged element by element as if alike: every rank fails, naming the ranks whose
    shapes differ."""
    c = Checks()
    shape = (count // 2, 2) if pair.rank == 1 else (2, count // 2)
    a = np.ones(shape, np.float32)
    calls = {
        "average": lambda: mc.average(a),
        "gradients": lambda: mc.gradients([a]),
        "gradients of two": lambda: mc.gradients([np.ones(3, np.float32), a]),
    }
    n = pair.nranks
    alike = "rank 0" if n == 2 else "ranks 0, 2" if n == 3 else f"ranks 0, 2-{n - 1}"
    expect_mismatch(
        c,
        calls[call],
        f"float32 elements of sizes {count}",
        f"but the tensors' shapes (their dimensions) differ between {alike} and rank 1.",
    )
    still_works(c, pair)
    c.finish()


def test_dtype(pair):
    c = Checks()
    dtype = np.float64 if pair.rank == 1 else np.float32
    a = np.ones(100, dtype)
    expect_mismatch(c, lambda: mc.average(a), "100 float32 elements", "100 float64 elements")
    still_works(c, pair)
    c.finish()


def test_reduce_op(pair):
    c = Checks()
    a = np.ones(50, np.int64)
    call = mc.allreduce_sum if pair.rank == 0 else mc.average
    expect_mismatch(
        c,
        lambda: call(a),
        "rank 0 submitted 1 tensor, 50 int64 elements (sum)",
        "50 int64 elements (average)",
    )
    still_works(c, pair)
    c.finish()


def test_broadcast_root(pair):
    c = Checks()
    a = np.full(30, pair.rank, np.int32)
    root = 0 if pair.rank == 0 else 1
    expect_mismatch(
        c,
        lambda: mc.broadcast([a], root=root),
        "(broadcast from rank 0)",
        "(broadcast from rank 1)",
    )
    c.true(np.all(a == pair.rank), "the buffer was changed although nothing was broadcast")
    still_works(c, pair)
    c.finish()


def test_gradients_of_other_dtypes(pair):
    """One rank's list has a float64 gradient more: its call is two requests (one per
    dtype), the others' one. Every rank fails at the first, the extra one is dropped,
    and the next call finds every rank in step."""
    c = Checks()
    last = pair.nranks - 1
    grads = [np.ones(3, np.float32)]
    if pair.rank == last:
        grads.append(np.ones(2, np.float64))
    expect_mismatch(
        c,
        lambda: mc.gradients(grads),
        "(average, part 1 of 2; the call's dtypes: float32, float64)",
        "(average);",
    )
    still_works(c, pair)
    c.finish()


def test_broadcast_of_other_dtypes(pair):
    c = Checks()
    values = [np.zeros(3, np.int32)]
    if pair.rank == 0:
        values.append(np.zeros(2, np.float32))
    expect_mismatch(c, lambda: mc.broadcast(values), "part 1 of 2")
    still_works(c, pair)
    c.finish()


def test_second_team_alone(pair):
    """A mismatch on team 1 names team 1; team 0 is not disturbed."""
    c = Checks()
    a = np.ones(7 + pair.rank, np.float32)
    expect_mismatch(c, lambda: mc.average(a, team=1), "ranks disagree on team 1 request")
    still_works(c, pair, team=0)
    still_works(c, pair, team=1, seed=11)
    c.finish()


def test_many_mismatches_in_a_row(pair):
    """The verdict is reached in step every time; nothing accumulates."""
    c = Checks()
    for i in range(20):
        a = np.ones(3 + (pair.rank + i) % 2, np.float32)
        expect_mismatch(c, lambda a=a: mc.average(a), "ranks disagree")
    still_works(c, pair)
    c.finish()
