"""16-bit values on the wire through the TensorFlow ops (eager fused op, tf.function
keyed groups, tf.compat.v1 graphs): the same results as the NumPy API's
(test_compression.py): exact on 16-bit-representable sums, each result a 16-bit value
alike on every rank on random inputs, and float16 overflow failing the op on every
rank. The rules of mpi_helpers.py hold."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from mpi_helpers import Checks
from test_compression import WIRE, is_16_bit, small_ints, wire_average
from tf_helpers import MODES, check_kind, module_session_fixture, run_in_mode

import ml_comm as mc

pytestmark = pytest.mark.mpi

tf_session = module_session_fixture()
COUNTS = [3, 20011, 40, 1500]  # packed, reduced where it lies, packed, ...


@pytest.fixture(
    params=[("bf16", "auto"), ("fp16", "auto"), ("bf16", "rabenseifner"), ("fp16", "rabenseifner")],
    ids=lambda p: "-".join(p),
)
def wire(request, tf_session):
    """The plan's algorithms (the ring here), or Rabenseifner (the plan's above 64 ranks)."""
    name, alg = request.param
    mc.config_team(0, mc.ALG_AUTO if alg == "auto" else mc.ALG_RABENSEIFNER, 0, 0, compression=name)
    yield name
    mc.config_team(0, mc.ALG_AUTO, 0, 0, compression="none")


@pytest.mark.parametrize("mode", MODES)
def test_exact_on_16_bit_inputs(tf_session, wire, mode):
    c = Checks()
    grads = [small_ints(tf_session.rank, n, seed=k) for k, n in enumerate(COUNTS)]
    (outs,) = run_in_mode(mode, lambda t: mc.gradients(t, 0), [grads])
    for k, n in enumerate(COUNTS):
        c.equal(outs[k], wire_average(n, tf_session.nranks, wire, seed=k), f"{mode} [{k}]")
    c.finish()


@pytest.mark.parametrize("mode", MODES)
def test_random_inputs_16_bit_results_same_everywhere(tf_session, wire, mode):
    c = Checks()
    rng = np.random.default_rng(5 + tf_session.rank)
    grads = [rng.standard_normal(n).astype(np.float32) for n in (20011, 1500)]
    first, second = run_in_mode(mode, lambda t: mc.gradients(t, 0), [grads, grads])
    c.true(all(np.array_equal(a, b) for a, b in zip(first, second)), "other bits again")
    c.same_on_all_ranks(first, f"{mode} {wire}")
    if tf_session.nranks > 1:
        c.true(all(is_16_bit(a, wire) for a in first), "a result is not a 16-bit value")
    c.finish()


def test_fp16_overflow_fails_the_op_on_every_rank(tf_session):
    c = Checks()
    mc.config_team(0, mc.ALG_AUTO, 0, 0, compression="fp16")
    try:
        big = np.full(20011, 70000.0, np.float32)
        step = tf.function(lambda t: mc.gradients([t], 0)[0])
        if tf_session.nranks > 1:
            e = c.raises(
                tf.errors.InvalidArgumentError, step, tf.constant(big), words=["float16 overflow"]
            )
            check_kind(c, e, tf.errors.InvalidArgumentError, mc.WireOverflowError, "fp16")
        else:
            c.equal(step(tf.constant(big)).numpy(), big, "one rank: nothing on the wire")
        ok = step(tf.constant(small_ints(tf_session.rank, 20011))).numpy()
        c.equal(ok, wire_average(20011, tf_session.nranks, "fp16"), "the next step")
    finally:
        mc.config_team(0, mc.ALG_AUTO, 0, 0, compression="none")
    c.finish()


def test_wire_types_are_numpy_s():
    assert WIRE["bf16"](1.0 + 2**-9) == 1.0  # ml_dtypes rounds to nearest even, as wire.c
