"""Reductions of non-integer data (whose sum depends on the order of the additions)
give bit-identical results on every rank, and the same bits when repeated with the
same inputs and settings, on every path of the core. Across separate jobs:
tests/faults/test_determinism_job.py."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from mpi_helpers import Checks, digest

import ml_comm as mc

pytestmark = pytest.mark.mpi

FLOATS = [np.float32, np.float64, np.float16, ml_dtypes.bfloat16]
FLOAT_IDS = ["float32", "float64", "float16", "bfloat16"]
# the direct allreduce, recursive doubling on the caller's thread, the ring on the
# caller's thread, the ring on the team's threads (mpi_helpers.ml_comm_session)
COUNTS = [5, 37, 1500, 20011]


def random_input(rank: int, count: int, dtype, seed: int) -> np.ndarray:
    rng = np.random.default_rng(1000 * seed + rank)
    return (rng.standard_normal(count) * 10 ** rng.uniform(-3, 3, count)).astype(dtype)


@pytest.mark.parametrize("count", COUNTS)
@pytest.mark.parametrize("dtype", FLOATS, ids=FLOAT_IDS)
def test_average_same_bits_everywhere_and_again(session, dtype, count):
    c = Checks()
    x = random_input(session.rank, count, dtype, seed=count)
    first, second = x.copy(), x.copy()
    mc.average(first)
    mc.average(second)
    c.true(first.tobytes() == second.tobytes(), "the same average twice gave other bits")
    c.same_on_all_ranks([first], f"average of {count} {np.dtype(dtype).name}")
    c.finish()


def test_gradients_same_bits_everywhere_and_again(session):
    """Fused lists of mixed sizes and dtypes, on both teams."""
    c = Checks()
    sizes = [3, 2000, 1, 20011, 77]
    grads = [random_input(session.rank, n, FLOATS[i % 2], seed=i) for i, n in enumerate(sizes)]
    runs = [mc.gradients(grads, team) for team in (0, 1, 0)]
    for run in runs[1:]:
        c.true(digest(run) == digest(runs[0]), "a repeated gradients() call gave other bits")
    c.same_on_all_ranks(runs[0], "gradients")
    c.finish()


def test_order_matters_for_these_inputs(session):
    """The inputs above are not ones that every order sums alike: adding the ranks'
    values in another order than the core's changes some bits (with 3 or more ranks;
    with 2 there is only one order). So the tests above can fail."""
    if session.nranks < 3:
        pytest.skip(
            f"needs 3 or more ranks for two orders of addition (this run has {session.nranks})"
        )
    stack = [random_input(r, 20011, np.float32, seed=20011) for r in range(session.nranks)]
    forward = np.zeros(20011, np.float32)
    for v in stack:
        forward += v
    backward = np.zeros(20011, np.float32)
    for v in stack[::-1]:
        backward += v
    assert forward.tobytes() != backward.tobytes()
