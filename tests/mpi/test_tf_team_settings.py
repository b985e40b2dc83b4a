"""A TensorFlow team whose ranks' config_team differs (alg, ksteps, max_steps,
compression), or one rank that never called it: the gradients op inside tf.function
fails on every rank within 10 s, naming the setting, each value and its ranks, instead of
hanging; the team works again once the ranks agree. The cases are the NumPy team's
(test_team_settings.py)."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from mpi_helpers import Checks, expected_average, make_input
from test_team_settings import CASES, configure_alike, configure_unlike, expect_named
from tf_helpers import module_session_fixture, to_numpy

import ml_comm as mc

pytestmark = pytest.mark.mpi

tf_session = module_session_fixture()


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("count", [10, 20011])
def test_config_team_differs(tf_session, case, count):
    if tf_session.nranks < 2:
        pytest.skip("a mismatch needs at least 2 ranks (this run has 1)")
    c = Checks()
    configure_unlike(tf_session, case)
    grads = [tf.constant(make_input(tf_session.rank, (count,), np.float32, 5)), tf.ones([7])]
    step = tf.function(lambda: mc.gradients(grads))
    step.get_concrete_function()  # traced under this rank's schedule, before the clock starts
    expect_named(c, tf_session, case, step, errors=(tf.errors.FailedPreconditionError,))
    configure_alike()
    out = tf.function(lambda: mc.gradients(grads))()
    want = expected_average((count,), np.float32, tf_session.nranks, 5)
    c.equal(to_numpy(out[0]), want, "after the mismatch")
    c.finish()
