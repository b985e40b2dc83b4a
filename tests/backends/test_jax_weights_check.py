"""The check that a job shares its weights, on JAX (csrc/team/weights_check.c,
core/weights_notice.py): eager calls are steps, counted by the caller; the runs of a
step compiled by jax.jit are counted by the FFI handler. Either way the second fails on
every rank until the weights are broadcast. This module manages init itself."""

from __future__ import annotations

import numpy as np
import pytest
from mpi_helpers import comm_world

import ml_comm as mc

jax = pytest.importorskip("jax")
jnp = jax.numpy
pytestmark = pytest.mark.mpi

REFUSAL = "team 0 averaged the gradients of a model's second step, but no weights were broadcast"


@pytest.mark.parametrize("traced", [False, True])
@pytest.mark.parametrize("broadcast", [False, True])
def test_the_second_step_fails_until_the_weights_are_broadcast(traced, broadcast):
    comm_world().barrier()
    mc.init(1, 1, 1024, "jax")
    rank, size = mc.get_rank(), mc.get_nranks()
    said = []
    try:
        # a function of its own: jit caches by function, and a step compiled for an
        # earlier session belongs to teams that no longer exist
        average = jax.jit(lambda grads: mc.gradients(grads)) if traced else mc.gradients
        weights = jnp.full(3, float(rank))
        for _ in range(3):
            try:
                (out,) = average([jnp.full(6, float(rank))])
                assert np.asarray(out).tolist() == [(size - 1) / 2] * 6
                said.append("")
            except Exception as e:  # eagerly StateError; compiled, JAX's runtime error
                said.append(str(e))
            if broadcast:
                weights = mc.broadcast(weights)
        if broadcast:
            assert np.asarray(weights).tolist() == [0.0] * 3
    finally:
        mc.finalize()
    if broadcast or size == 1:
        assert said == [""] * 3, (rank, size, traced, said)
    else:
        assert said[0] == "" and all(REFUSAL in text for text in said[1:]), (rank, said)


@pytest.mark.parametrize("broadcast", [False, True])
def test_two_models_in_one_compiled_step(broadcast):
    """One jax.jit step that averages two models' gradients on team 0 (a GAN): its first
    run is each model's first step; a broadcast after it lets the later runs average."""
    comm_world().barrier()
    mc.init(1, 1, 1024, "jax")
    rank, size = mc.get_rank(), mc.get_nranks()
    said = []
    try:
        step = jax.jit(lambda a, b: (mc.gradients([a]), mc.gradients([b])))
        weights = jnp.full(3, float(rank))
        for _ in range(3):
            try:
                (a,), (b,) = step(jnp.full(6, float(rank)), jnp.full((2, 2), 1.0))
                assert np.asarray(a).tolist() == [(size - 1) / 2] * 6
                assert np.asarray(b).tolist() == [[1.0, 1.0], [1.0, 1.0]]
                said.append("")
            except Exception as e:  # JAX's runtime error, carrying the core's message
                said.append(str(e))
            if broadcast:
                weights = mc.broadcast(weights)
    finally:
        mc.finalize()
    if broadcast or size == 1:
        assert said == [""] * 3, (rank, size, said)
    else:
        assert said[0] == "" and all(REFUSAL in text for text in said[1:]), (rank, said)
