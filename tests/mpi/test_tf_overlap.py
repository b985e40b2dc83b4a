"""Inside tf.function, a reduction starts while backprop still computes.

An ordering check on the team's recorded timeline, not a timed one: the step's last
gradient (a bias, like a Dense layer's BiasAddGrad, which TensorFlow computes off
backprop's critical path, often last) is held back by a stateful py-function until this
rank's team has reduced a segment of the same reduction. That happens only if (1) the
other gradients' submit ops do not wait for the held one: tf.function's automatic control
dependencies used to chain every submit after the last stateful op created before it,
here the hold, and (2) the held tensor does not lead the fused layout, where a segment
waits for every tensor before it. Before the fix the hold timed out and no segment started
before the bias arrived; the results are checked exactly either way.
"""

from __future__ import annotations

import time

import numpy as np
import pytest
import tensorflow as tf
from ml_comm._core import lib
from mpi_helpers import Checks, expected_average, make_input
from tf_helpers import module_session_fixture

import ml_comm as mc
from ml_comm.core import timeline

pytestmark = pytest.mark.mpi

# One thread per team: its segments go strictly in layout order, as on the benchmark's
# nodes, so a late tensor at the front of the layout would hold everything back.
tf_session = module_session_fixture(nthread_per_team=1)

HOLD_LIMIT_S = 20.0  # only reached when the order is wrong (the test then fails)
SHAPES = [(24, 16), (16, 40), (40,)]  # kernel, kernel, bias: the bias comes last


def segments_of(events, request=None) -> list[dict]:
    return [
        e
        for e in events
        if e["kind"] == lib.MLC_EVENT_SEGMENTS and (request is None or e["request"] == request)
    ]


def test_reduction_starts_before_last_gradient(tf_session):
    c = Checks()
    r, n = tf_session.rank, tf_session.nranks
    team = mc.api.session().team(0)
    timeline.enable([team])
    try:
        inputs = [tf.constant(make_input(r, s, np.float32, seed=i)) for i, s in enumerate(SHAPES)]
        seen_before = len(segments_of(timeline.read(team)))
        held = {"waited": 0.0}

        def hold(bias):
            start = time.monotonic()
            # One rank moves no data, so no segment ever comes: nothing to wait for.
            while n > 1 and time.monotonic() - start < HOLD_LIMIT_S:
                if len(segments_of(timeline.read(team))) > seen_before:
                    break
                time.sleep(0.005)
            held["waited"] = time.monotonic() - start
            return bias

        @tf.function
        def step(kernel_a, kernel_b, bias):
            late = tf.numpy_function(hold, [bias], tf.float32, stateful=True)
            late = tf.reshape(late, bias.shape)
            return mc.gradients([kernel_a, kernel_b, late])

        outs = [o.numpy() for o in step(*inputs)]
        events = timeline.read(team)
    finally:
        lib.mlc_team_timeline_enable(team, 0)  # off again for the module's other tests

    for i, (o, s) in enumerate(zip(outs, SHAPES)):
        c.equal(o, expected_average(s, np.float32, n, seed=i), f"gradient {i} {s}")
    if n > 1:
        arrivals = [e for e in events if e["kind"] == lib.MLC_EVENT_ARRIVE]
        request = arrivals[-1]["request"]
        # The group's index of the bias: the layout puts it last whatever the list order.
        bias_arrival = max(e["start"] for e in arrivals if e["request"] == request)
        first_segment = min((e["start"] for e in segments_of(events, request)), default=None)
        c.true(
            first_segment is not None and first_segment < bias_arrival,
            f"rank {r}: no segment of the reduction started before its last gradient arrived "
            f"(held {held['waited']:.2f} s of {HOLD_LIMIT_S} s)",
        )
        c.true(held["waited"] < HOLD_LIMIT_S, f"rank {r}: the held gradient timed out")
    c.finish()
