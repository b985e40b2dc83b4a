"""A TensorFlow team whose ranks' config_team differs (alg, ksteps, max_steps,
compression), or one rank that never called it: the gradients op inside tf.function
fails on every rank within 10 s, naming the setting, each value and its ranks, instead of
hanging; the team works again once the ranks agree. The cases are the NumPy team's
(test_team_settings.py)."""

from __future__ import annotations

import time

import numpy as np
import pytest
import tensorflow as tf
from mpi_helpers import Checks, expected_average, make_input
from test_team_settings import CASES, LIMIT_S, configure_alike, ranks_text
from tf_helpers import module_session_fixture, to_numpy

import ml_comm as mc

pytestmark = pytest.mark.mpi

tf_session = module_session_fixture()


def raises_within_limit(c: Checks, step, what: str) -> str:
    """step() fails on this rank at its first or (a pipelined rank) second run."""
    start = time.monotonic()
    for _ in range(2):
        try:
            step()
        except (tf.errors.OpError, mc.MLCommError) as e:
            seconds = time.monotonic() - start
            c.true(seconds < LIMIT_S, f"{what}: raised after {seconds:.1f} s")
            return str(e)
    c.true(False, f"{what}: two steps returned without an error")
    return ""


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("count", [10, 20011])
def test_config_team_differs(tf_session, case, count):
    if tf_session.nranks < 2:
        pytest.skip("a mismatch needs at least 2 ranks (this run has 1)")
    c = Checks()
    last = tf_session.nranks - 1
    mine, theirs, wanted = CASES[case]
    args = theirs if tf_session.rank == last else mine
    if args is not None:
        mc.config_team(0, args["alg"], args["ksteps"], args["max_steps"],
                       compression=args.get("compression"))  # fmt: skip
    grads = [tf.constant(make_input(tf_session.rank, (count,), np.float32, 5)), tf.ones([7])]
    step = tf.function(lambda: mc.gradients(grads))  # traced under this rank's schedule
    text = raises_within_limit(c, step, f"{case}, {count} elements")
    names = {"others": ranks_text(list(range(last))), "last": ranks_text([last])}
    c.true("ranks disagree on team 0 request" in text, text)
    for w in wanted:
        c.true(w.format(**names) in text, f"the message lacks {w.format(**names)!r}: {text!r}")
    configure_alike()
    out = tf.function(lambda: mc.gradients(grads))()
    want = expected_average((count,), np.float32, tf_session.nranks, 5)
    c.equal(to_numpy(out[0]), want, "after the mismatch")
    c.finish()
