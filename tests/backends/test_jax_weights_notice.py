"""The weights warning on JAX (core/weights_notice.py): eager calls are steps, judged at
a team's second call; calls inside jax.jit build a step, judged at finalize. This module
manages init itself."""

from __future__ import annotations

import numpy as np
import pytest
from mpi_helpers import comm_world

import ml_comm as mc

jax = pytest.importorskip("jax")
jnp = jax.numpy
pytestmark = pytest.mark.mpi

WARNING = "no weights were broadcast"


@pytest.mark.parametrize("traced", [False, True])
def test_eager_calls_warn_at_the_second_traced_at_finalize(capfd, traced):
    capfd.readouterr()
    comm_world().barrier()
    mc.init(1, 1, 1024, "jax")
    rank, size = mc.get_rank(), mc.get_nranks()
    try:
        average = jax.jit(mc.gradients) if traced else mc.gradients
        said = []
        for _ in range(3):
            (out,) = average([jnp.full(6, float(rank))])
            assert np.asarray(out).tolist() == [(size - 1) / 2] * 6
            said.append(capfd.readouterr().err.count(WARNING))
    finally:
        mc.finalize()
    said.append(capfd.readouterr().err.count(WARNING))
    expected = [0] * 4
    if rank == 0 and size > 1:
        expected[3 if traced else 1] = 1
    assert said == expected, f"rank {rank} of {size}, traced {traced}"
