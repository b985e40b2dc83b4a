"""A job that averages gradients without broadcasting its weights is warned, once, by
rank 0 (core/weights_notice.py); a job that broadcasts or checks them, before the first
step or right after it, or in a graph built after its gradients, is not. This module
manages init itself (no `session` fixture)."""

from __future__ import annotations

import numpy as np
import pytest
from mpi_helpers import CHUNK_BYTES, ml_comm_session

import ml_comm as mc

pytestmark = pytest.mark.mpi

WARNING = "no weights were broadcast"


def run_job(capfd, calls) -> list[str]:
    """Run `calls` (names, in order) in a session of its own; this rank's stderr after
    each call, and last after finalize."""
    capfd.readouterr()
    weights = [np.ones(5, np.float32)]
    said = []
    with ml_comm_session(1, 1, 1024, CHUNK_BYTES):
        for name in calls:
            if name == "gradients":
                assert np.array_equal(
                    mc.gradients([np.ones(7, np.float32)])[0], np.ones(7, np.float32)
                )
            elif name == "broadcast":
                mc.broadcast(weights)
            elif name == "check":
                mc.check_buffers_match(weights, 0)
            said.append(capfd.readouterr().err)
    said.append(capfd.readouterr().err)
    return said


@pytest.mark.parametrize(
    "calls, warned_after",
    [
        (["gradients", "gradients", "gradients"], 1),  # the second call says it
        (["gradients"], 1),  # finalize says it (a step traced once calls gradients once)
        (["broadcast", "gradients", "gradients"], None),
        (["gradients", "broadcast", "gradients", "gradients"], None),  # after the first step
        (["check", "gradients", "gradients"], None),
        (["broadcast"], None),
    ],
)
def test_warned_once_by_rank_zero(capfd, calls, warned_after):
    said = [err.count(WARNING) for err in run_job(capfd, calls)]
    rank, size = mc.get_rank(), mc.get_nranks()
    expected = [0] * (len(calls) + 1)
    if warned_after is not None and rank == 0 and size > 1:
        expected[warned_after] = 1
    assert said == expected, f"rank {rank} of {size}, calls {calls}: warnings {said}"


@pytest.mark.parametrize("broadcast", [False, True])
def test_a_traced_step_is_judged_at_finalize(capfd, broadcast):
    """A step traced once, its gradients built for two teams before its broadcast (as a
    graph's are): no warning while it is built; at finalize only if nothing broadcast."""
    import tensorflow as tf

    capfd.readouterr()
    with ml_comm_session(1, 2, 1024, CHUNK_BYTES, framework="tensorflow"):
        weights = tf.Variable(tf.ones(5))

        @tf.function
        def step():
            first = mc.gradients([tf.ones(7)], team=0)
            second = mc.gradients([tf.ones(3)], team=1)
            if broadcast:
                with tf.control_dependencies(first + second):
                    mc.broadcast([weights])
            return first + second

        for _ in range(3):
            out = step()
            assert [o.numpy().tolist() for o in out] == [[1.0] * 7, [1.0] * 3]
        while_training = capfd.readouterr().err.count(WARNING)
    at_finalize = capfd.readouterr().err.count(WARNING)
    rank, size = mc.get_rank(), mc.get_nranks()
    expected = 1 if not broadcast and rank == 0 and size > 1 else 0
    assert (while_training, at_finalize) == (0, expected), f"rank {rank} of {size}"
