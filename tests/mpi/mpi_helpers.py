"""Exact-arithmetic helpers shared by the MPI integration tests (fixtures: conftest.py).

Run the same suite at every rank count, each under a hard timeout:

    timeout -k 5 300 .venv/bin/mpiexec -n N .venv/bin/python -m pytest -q --with-mpi \
        -p no:cacheprovider tests/mpi          # N = 1, 2, 3, 4

and over a sub-communicator with ML_COMM_TEST_COMM=dup or split (see suite_comm()).

Rules every test here follows (a test that breaks them hangs the other ranks):

* every rank makes the same collective calls (ml_comm and mpi4py) in the same order;
  only the data depends on the rank, never which calls are made;
* checks do not stop a test half way: they are recorded in a `Checks` object and
  `Checks.finish()` (itself collective) gathers them at the end, so a wrong value on
  one rank fails the test on every rank instead of letting the ranks drift apart.

Inputs follow nccl-tests: integer-valued numbers that depend on (rank, index, seed),
small enough that every partial sum is exact, so each element's average is known
exactly and results are compared bit for bit, never with a tolerance.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from dataclasses import dataclass

import ml_dtypes
import numpy as np
import pytest

import ml_comm as mc

# Small segments so that arrays of a few hundred elements already take the
# multi-segment (pipelined) path; a small fusion buffer so that gradient lists
# of a few thousand elements stream through it.
CHUNK_BYTES = 256
SCALED_THRESHOLDS = {
    "ML_COMM_DIRECT_BYTES": "64",
    "ML_COMM_LATENCY_BYTES": "512",
    "ML_COMM_INLINE_BYTES": "8192",
}
MSGLEN = 4096
NTHREAD_PER_TEAM = 2
NTEAMS = 2

DTYPES = [
    np.dtype(np.float32),
    np.dtype(np.float64),
    np.dtype(np.float16),
    np.dtype(ml_dtypes.bfloat16),
    np.dtype(np.int32),
    np.dtype(np.int64),
]
DTYPE_IDS = [d.name for d in DTYPES]
# The 8- and 16-bit integers (Horovod's types): sums and products wrap around, as NumPy's.
SMALL_INTS = [np.dtype(np.uint8), np.dtype(np.int8), np.dtype(np.uint16), np.dtype(np.int16)]
# Every dtype the reductions take, and every dtype the collectives move (bool is only moved).
REDUCED_DTYPES = DTYPES + SMALL_INTS
MOVED_DTYPES = REDUCED_DTYPES + [np.dtype(np.bool_)]

# Element counts as functions of the rank count n (known only at run time).
# 20011 float32 elements are ~313 segments of 256 bytes and exceed MSGLEN.
SIZE_SPECS = {
    "0": lambda n: 0,
    "1": lambda n: 1,
    "3": lambda n: 3,
    "7": lambda n: 7,
    "n-1": lambda n: n - 1,
    "n": lambda n: n,
    "n+1": lambda n: n + 1,
    "2n+1": lambda n: 2 * n + 1,
    "64": lambda n: 64,
    "65": lambda n: 65,
    "1001": lambda n: 1001,
    "4097": lambda n: MSGLEN + 1,
    "20011": lambda n: 20011,
}

# A large offset per dtype, added to one element in three with sign -1, 0 or +1:
# float32 / float64 values then use most of their mantissa (a reduction that went
# through a narrower type would lose bits), int32 / int64 values are not exactly
# representable as float32 / float64 (catches integer sums done in floating point),
# and integer sums are negative as often as positive (catches floor instead of
# truncation toward zero). Sums over at most 4 ranks stay exact.
_OFFSET = {
    np.dtype(np.float32): 2**20,
    np.dtype(np.float64): 2**40,
    np.dtype(np.float16): 0,
    np.dtype(ml_dtypes.bfloat16): 0,
    np.dtype(np.int32): 2**28,
    np.dtype(np.int64): 2**55,
    **{d: 0 for d in SMALL_INTS},
    np.dtype(np.bool_): 0,
}


def comm_world():
    """mpi4py's COMM_WORLD, after letting ml_comm start MPI (idempotent)."""
    mc.init_mpi()
    from mpi4py import MPI

    return MPI.COMM_WORLD


# Which communicator the tests run ml_comm on (mpi4py's style: one test body, several
# communicators): "world" (default), "dup" (a duplicate of COMM_WORLD) or "split"
# (COMM_WORLD split in two by rank parity: each half is a job of its own, with its own
# ranks 0..n-1, running the same tests at the same time as the other half).
SUITE_COMM_ENV = "ML_COMM_TEST_COMM"
SUITE_COMMS = ("world", "dup", "split")
_suite_comm = None


def suite_comm_kind() -> str:
    kind = os.environ.get(SUITE_COMM_ENV, "world")
    if kind not in SUITE_COMMS:
        raise ValueError(f"{SUITE_COMM_ENV} must be one of {SUITE_COMMS}, got {kind!r}")
    return kind


def suite_comm():
    """The communicator of SUITE_COMM_ENV, made once (collectively, on first use). Tests
    pass it to mc.init(comm=...) and take ranks and sizes from it (or from mc.get_rank /
    mc.get_nranks after init), never from COMM_WORLD."""
    global _suite_comm
    if _suite_comm is None:
        world = comm_world()
        kind = suite_comm_kind()
        if kind == "dup":
            _suite_comm = world.Dup()
        elif kind == "split":
            _suite_comm = world.Split(color=world.rank % 2, key=world.rank)
        else:
            _suite_comm = world
    return _suite_comm


def int_values(rank: int, count: int, seed: int = 0) -> np.ndarray:
    """value(rank, index) in [-5, 5] as int64."""
    idx = np.arange(count, dtype=np.int64)
    return ((idx * 7 + rank * 3 + seed * 5) % 11) - 5


def make_input(rank: int, shape, dtype, seed: int = 0) -> np.ndarray:
    """Rank-dependent, exactly summable input of the given shape and dtype."""
    dtype = np.dtype(dtype)
    shape = tuple(shape) if not isinstance(shape, int) else (shape,)
    count = int(np.prod(shape, dtype=np.int64))
    v = int_values(rank, count, seed)
    off = _OFFSET[dtype]
    if off:
        v = v + (np.arange(count, dtype=np.int64) % 3 - 1) * off
    if dtype == np.bool_:
        out = v % 2 == 1
    elif dtype.kind in "iu" or dtype == np.float64:
        out = v.astype(dtype)  # unsigned: negative values wrap around
    else:
        out = v.astype(np.float32).astype(dtype)
    return out.reshape(shape)


def average_of(stack: np.ndarray, dtype, nranks: int) -> np.ndarray:
    """The exact result the library promises for the rank-wise average of `stack`
    (axis 0 = rank)."""
    dtype = np.dtype(dtype)
    if dtype.kind in "iu":
        # The sum wraps around in the dtype (as the core's does), then C division:
        # truncate toward zero.
        s = stack.astype(np.int64).sum(axis=0).astype(dtype).astype(np.int64)
        out = np.sign(s) * (np.abs(s) // nranks)
    elif dtype in (np.float32, np.float64):
        out = np.sum(stack, axis=0, dtype=dtype) / dtype.type(nranks)
    else:  # float16 / bfloat16: accumulate and divide in float32, round once
        out = stack.astype(np.float32).sum(axis=0) / np.float32(nranks)
    return np.asarray(out).astype(dtype)


def expected_average(shape, dtype, nranks: int, seed: int = 0) -> np.ndarray:
    stack = np.stack([make_input(r, shape, dtype, seed) for r in range(nranks)])
    return average_of(stack, dtype, nranks)


def digest(arrays) -> str:
    h = hashlib.sha256()
    for a in arrays:
        a = np.asarray(a)
        h.update(f"{a.dtype.str}{a.shape}".encode())
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


def _first_difference(actual: np.ndarray, expected: np.ndarray) -> str:
    a = actual.reshape(-1).view(f"u{actual.dtype.itemsize}")
    e = expected.reshape(-1).view(f"u{expected.dtype.itemsize}")
    bad = np.flatnonzero(a != e)
    i = int(bad[0])
    return (
        f"{bad.size} of {a.size} elements differ, first at flat index {i}: "
        f"got {actual.reshape(-1)[i]!r}, want {expected.reshape(-1)[i]!r}"
    )


class Checks:
    """Records failures instead of raising, then fails on every rank at once."""

    def __init__(self):
        self.comm = suite_comm()
        self.rank = self.comm.rank
        self.failures: list[str] = []

    def true(self, cond, what: str) -> bool:
        if not cond:
            self.failures.append(what)
        return bool(cond)

    def equal(self, actual, expected, what: str) -> bool:
        """Bit-for-bit equality of dtype, shape and contents."""
        expected = np.asarray(expected)
        if not isinstance(actual, np.ndarray):
            return self.true(False, f"{what}: got {type(actual).__name__}, want numpy.ndarray")
        if actual.dtype != expected.dtype:
            return self.true(False, f"{what}: dtype {actual.dtype}, want {expected.dtype}")
        if actual.shape != expected.shape:
            return self.true(False, f"{what}: shape {actual.shape}, want {expected.shape}")
        if np.ascontiguousarray(actual).tobytes() != np.ascontiguousarray(expected).tobytes():
            return self.true(False, f"{what}: {_first_difference(actual, expected)}")
        return True

    def raises(self, exc_type, fn, *args, words=(), **kwargs):
        """Call fn; record a failure unless it raises exc_type with a message that
        contains at least one of `words` (case-insensitive). Returns the exception."""
        what = f"{getattr(fn, '__name__', fn)}(...)"
        try:
            fn(*args, **kwargs)
        except exc_type as e:
            msg = str(e)
            if words and not any(w.lower() in msg.lower() for w in words):
                self.failures.append(
                    f"{what} raised {type(e).__name__}({msg!r}), which mentions none of {words}"
                )
            return e
        except Exception as e:  # noqa: BLE001 - any other exception is the failure
            self.failures.append(f"{what} raised {type(e).__name__}({e}), want {exc_type.__name__}")
            return e
        self.failures.append(f"{what} did not raise, want {exc_type.__name__}")
        return None

    def same_on_all_ranks(self, arrays, what: str) -> None:
        """Collective: every rank holds bit-identical arrays (checked with mpi4py)."""
        digests = self.comm.allgather(digest(arrays))
        if len(set(digests)) != 1:
            groups = {}
            for r, d in enumerate(digests):
                groups.setdefault(d, []).append(r)
            self.failures.append(
                f"{what}: results differ across ranks, groups of ranks: {list(groups.values())}"
            )

    def finish(self) -> None:
        """Collective: fail on every rank if any rank recorded a failure."""
        everyone = self.comm.allgather(self.failures)
        lines = [f"rank {r}: {f}" for r, fs in enumerate(everyone) for f in fs]
        if lines:
            shown = lines[:25] + ([f"... and {len(lines) - 25} more"] if len(lines) > 25 else [])
            pytest.fail("\n".join(shown), pytrace=False)


@dataclass(frozen=True)
class Session:
    rank: int
    nranks: int
    nteams: int
    nthread_per_team: int
    msglen: int
    chunk_bytes: int


@contextlib.contextmanager
def init_settings(settings: dict[str, str]):
    """ML_COMM_* variables set for the init inside the block, removed after it."""
    os.environ.update(settings)
    try:
        yield
    finally:
        for name in settings:
            del os.environ[name]


# The check that a job shares its weights, off: for sessions that average arrays that are
# no model's gradients (test_weights_check.py tests the check).
WEIGHTS_CHECK_OFF = {"ML_COMM_WEIGHTS_CHECK": "0"}


@contextlib.contextmanager
def ml_comm_session(
    nthread_per_team,
    nteams,
    msglen,
    chunk_bytes=CHUNK_BYTES,
    framework=None,
    weights_check=False,
):
    comm = suite_comm()
    comm.barrier()
    # Thresholds scaled down with the chunk size, so that small arrays take all four
    # paths of a blocking call: the direct allreduce inside the agreement check (<= 64 B),
    # recursive doubling on the caller's thread (< 512 B), the ring on the caller's
    # thread (<= 8 KiB), the ring on the team's threads. The check that a job shares its
    # weights is off unless asked for: these sessions average arrays that are no model's
    # gradients (test_weights_check.py tests it, and the scripts of examples/ run with it).
    with init_settings({**SCALED_THRESHOLDS, "ML_COMM_WEIGHTS_CHECK": str(int(weights_check))}):
        mc.init(nthread_per_team, nteams, msglen, framework, chunk_bytes=chunk_bytes, comm=comm)
    try:
        yield Session(
            rank=mc.get_rank(),
            nranks=mc.get_nranks(),
            nteams=nteams,
            nthread_per_team=nthread_per_team,
            msglen=msglen,
            chunk_bytes=chunk_bytes,
        )
    finally:
        mc.finalize()
