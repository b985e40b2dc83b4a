"""Property-based tests (hypothesis): for generated shapes, dtypes, list lengths, teams
and roots, gradients / average / allreduce_sum / broadcast equal NumPy exactly.

Under MPI every rank must make the same calls, so every rank must draw the same
examples: generation is derandomized (a seed from the test itself), there is no
example database, no shrinking and no deadline or health check (both depend on
timing, which differs between ranks), and a failure is agreed on by all ranks
(allgather) before it is raised, so that all ranks see the same outcome of every
example. The inputs are small integers (|x| <= 8) that depend on the rank, so every
sum over <= 4 ranks is exact in every dtype, float16 and bfloat16 included.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import array_shapes
from mpi_helpers import CHUNK_BYTES, DTYPES, average_of, comm_world, ml_comm_session

import ml_comm as mc

pytestmark = pytest.mark.mpi

NTEAMS = 2
# A fusion buffer of a few segments: most generated lists stream through it.
MSGLEN = 96

SETTINGS = settings(
    max_examples=30,
    derandomize=True,
    database=None,
    deadline=None,
    phases=(Phase.explicit, Phase.generate),
    suppress_health_check=list(HealthCheck),
)

shapes = st.one_of(
    array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=9),
    st.tuples(st.integers(0, 3000)),  # 1-D, past the fusion buffer and many segments
)
dtypes = st.sampled_from(DTYPES)
seeds = st.integers(0, 2**16)
tensors = st.tuples(shapes, dtypes, seeds, st.booleans())  # bool: Fortran order


@pytest.fixture(scope="module")
def session():
    with ml_comm_session(2, NTEAMS, MSGLEN, chunk_bytes=CHUNK_BYTES) as s:
        yield s


def values(rank: int, shape, dtype, seed: int, fortran: bool = False) -> np.ndarray:
    rng = np.random.default_rng([seed, rank])
    v = rng.integers(-8, 9, size=shape).astype(np.float32 if dtype.kind == "f" else np.int64)
    v = np.asarray(v).astype(dtype)
    return np.asfortranarray(v) if fortran and v.ndim > 1 else v


def stack(n: int, shape, dtype, seed: int) -> np.ndarray:
    return np.stack([values(r, shape, dtype, seed) for r in range(n)])


def exact_sum(st_: np.ndarray, dtype) -> np.ndarray:
    wide = np.int64 if dtype.kind == "i" else np.float64
    return np.asarray(st_.astype(wide).sum(axis=0)).astype(dtype)


class Agreed:
    """Failures gathered from every rank, raised on all of them together."""

    def __init__(self):
        self.failures: list[str] = []

    def equal(self, got, want, what: str) -> None:
        want = np.asarray(want)
        if not isinstance(got, np.ndarray):
            self.failures.append(f"{what}: got {type(got).__name__}")
        elif got.dtype != want.dtype or got.shape != want.shape:
            self.failures.append(f"{what}: {got.dtype}{got.shape}, want {want.dtype}{want.shape}")
        elif np.ascontiguousarray(got).tobytes() != np.ascontiguousarray(want).tobytes():
            bad = np.flatnonzero(got.reshape(-1) != want.reshape(-1))
            i = int(bad[0]) if bad.size else 0
            self.failures.append(
                f"{what}: {bad.size} elements differ, first at {i}: "
                f"got {got.reshape(-1)[i]!r}, want {want.reshape(-1)[i]!r}"
            )

    def finish(self) -> None:
        everyone = comm_world().allgather(self.failures)
        lines = [f"rank {r}: {f}" for r, fs in enumerate(everyone) for f in fs]
        if lines:
            raise AssertionError("\n".join(lines[:20]))


@SETTINGS
@given(specs=st.lists(tensors, min_size=0, max_size=6), team=st.integers(0, NTEAMS - 1))
def test_gradients_equal_numpy(session, specs, team):
    s, a = session, Agreed()
    inputs = [values(s.rank, sh, dt, seed, f) for sh, dt, seed, f in specs]
    before = [x.copy() for x in inputs]
    out = mc.gradients(inputs, team=team)
    a.equal(np.array(len(out)), np.array(len(specs)), "number of outputs")
    for k, ((sh, dt, seed, _), o) in enumerate(zip(specs, out)):
        a.equal(o, average_of(stack(s.nranks, sh, dt, seed), dt, s.nranks), f"gradient {k}")
        a.equal(inputs[k], before[k], f"input {k} modified")
    a.finish()


@SETTINGS
@given(spec=tensors, team=st.integers(0, NTEAMS - 1))
def test_average_equals_numpy(session, spec, team):
    s, a = session, Agreed()
    sh, dt, seed, _ = spec
    x = values(s.rank, sh, dt, seed)
    y = mc.average(x, team=team)
    a.equal(x, average_of(stack(s.nranks, sh, dt, seed), dt, s.nranks), "average")
    if y is not x:
        a.failures.append("average did not return its argument")
    a.finish()


@SETTINGS
@given(spec=tensors, team=st.integers(0, NTEAMS - 1))
def test_allreduce_sum_equals_numpy(session, spec, team):
    s, a = session, Agreed()
    sh, dt, seed, fortran = spec
    x = values(s.rank, sh, dt, seed, fortran)  # Fortran order is contiguous: allowed in place
    mc.allreduce_sum(x, team=team)
    a.equal(x, exact_sum(stack(s.nranks, sh, dt, seed), dt), "allreduce_sum")
    a.finish()


@SETTINGS
@given(specs=st.lists(tensors, min_size=1, max_size=5), root=st.integers(0, 3))
def test_broadcast_equals_root(session, specs, root):
    s, a = session, Agreed()
    root %= s.nranks
    arrays = [values(s.rank, sh, dt, seed, f) for sh, dt, seed, f in specs]
    out = mc.broadcast(arrays, root=root)
    if out is not arrays:
        a.failures.append("broadcast did not return its argument")
    for k, (sh, dt, seed, f) in enumerate(specs):
        a.equal(arrays[k], values(root, sh, dt, seed, f), f"value {k}")
    a.finish()
