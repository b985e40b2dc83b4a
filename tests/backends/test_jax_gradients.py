"""ml_comm.gradients on JAX arrays (framework="jax"): eagerly, inside jax.jit through the
XLA FFI handler, and through the io_callback fallback, at 1-3 ranks, exactly (small
integers: every average is exact in float32). Runs where JAX is installed."""

from __future__ import annotations

import numpy as np
import pytest
from mpi_helpers import Checks, comm_world

import ml_comm as mc

jax = pytest.importorskip("jax")
jnp = jax.numpy
pytestmark = pytest.mark.mpi


@pytest.fixture(scope="module")
def session():
    comm_world().barrier()
    mc.init(2, 1, 1024, "jax")
    yield mc.get_rank(), mc.get_nranks()
    mc.finalize()


def inputs(rank: int) -> list:
    """Two dtypes (two requests of the core), a weight and a vector, and a None."""
    return [
        jnp.arange(12, dtype=jnp.float32).reshape(3, 4) * (rank + 1),
        None,
        jnp.full((5,), 2 * rank, jnp.int32),
        jnp.arange(7, dtype=jnp.float32) - rank,
    ]


def expected(nranks: int) -> list:
    mean = (nranks + 1) / 2
    return [
        np.arange(12, dtype=np.float32).reshape(3, 4) * mean,
        None,
        np.full(5, nranks - 1, np.int32),  # the integer average of 0, 2, 4, ...
        np.arange(7, dtype=np.float32) - (nranks - 1) / 2,
    ]


def check_all(checks: Checks, got: list, want: list, what: str) -> None:
    for i, (g, w) in enumerate(zip(got, want)):
        if w is None:
            checks.true(g is None, f"{what}[{i}]: {g}, want None")
        else:
            checks.equal(np.asarray(g), w, f"{what}[{i}]")


def test_eager_jit_and_fallback_agree_exactly(session):
    from ml_comm import jax as binding
    from ml_comm.api import _active

    rank, nranks = session
    checks = Checks()
    want = expected(nranks)
    check_all(checks, mc.gradients(inputs(rank)), want, "eager")
    check_all(checks, jax.jit(lambda g: mc.gradients(g))(inputs(rank)), want, "jit")
    host = _active().backend.host
    fallback = jax.jit(lambda g: binding.average(g, None, lambda a: host.gradients(a, 0)))
    check_all(checks, fallback(inputs(rank)), want, "io_callback")
    checks.finish()


def test_the_handler_is_the_one_in_use(session):
    from ml_comm.api import _active
    from ml_comm.jax import handler

    checks = Checks()
    checks.true(handler.load(), f"the FFI handler did not load: {handler._unavailable}")
    checks.true(_active().backend.team_ids is not None, "the backend runs without the handler")
    checks.finish()


def test_lists_that_differ_fail_on_every_rank(session):
    rank, nranks = session
    if nranks == 1:
        pytest.skip("one rank has no other rank to differ from")
    checks = Checks()
    step = jax.jit(lambda g: mc.gradients(g))
    error = checks.raises(
        Exception,
        lambda: jax.block_until_ready(step([jnp.ones((2 + rank, 3), jnp.float32)])),
        words=("ml_comm (status 7, ranks disagree on the request): gradients failed",),
    )
    checks.true("rank 1 submitted 1 tensor, 9 float32" in str(error), f"no rank 1 in {error}")
    check_all(checks, step(inputs(rank)), expected(nranks), "the next call")
    checks.finish()
