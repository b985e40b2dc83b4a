"""A traced step (tf.function) builds its gradients before its broadcast, a block per
team: no warning while it is built or runs, and at finalize only when nothing was
broadcast (core/weights_notice.py). This module manages init itself."""

from __future__ import annotations

import pytest
import tensorflow as tf
from mpi_helpers import CHUNK_BYTES, comm_world, ml_comm_session

import ml_comm as mc
import ml_comm.horovod.tensorflow as hvd

pytestmark = pytest.mark.mpi

WARNING = "no weights were broadcast"


@pytest.mark.parametrize("broadcast", [False, True])
def test_a_traced_step_is_judged_at_finalize(capfd, broadcast):
    """A step traced once, its gradients built for two teams before its broadcast (as a
    graph's are): no warning while it is built; at finalize only if nothing broadcast."""
    capfd.readouterr()
    with ml_comm_session(1, 2, 1024, CHUNK_BYTES, framework="tensorflow"):
        rank, size = mc.get_rank(), mc.get_nranks()  # the session's (a suite comm may reorder)
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
    err = capfd.readouterr().err
    at_finalize = err.count(WARNING)
    expected = 1 if not broadcast and rank == 0 and size > 1 else 0
    assert (while_training, at_finalize) == (0, expected), f"rank {rank} of {size}"
    if expected:
        assert "mc.broadcast(weights)" in err and "hvd." not in err, err


@pytest.mark.parametrize("share", [None, "broadcast_variables", "broadcast_object"])
def test_horovod_tape_is_judged_at_shutdown(capfd, share):
    """ml_comm.horovod's DistributedGradientTape averages gradients like mc.gradients: a
    script that never shares its weights gets the warning at hvd.shutdown (rank 0, more
    than one rank); one that broadcasts them, as variables or as a Python object, none."""
    capfd.readouterr()
    comm_world().barrier()
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    try:
        weights = tf.Variable(tf.ones(4))
        for _ in range(2):
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(weights * float(rank + 1))
            grad = hvd.DistributedGradientTape(tape).gradient(loss, [weights])[0]
            assert grad.numpy().tolist() == [(size + 1) / 2] * 4
            if share == "broadcast_variables":
                hvd.broadcast_variables([weights], root_rank=0)
            elif share == "broadcast_object":
                weights.assign(hvd.broadcast_object(weights.numpy(), root_rank=0))
        while_training = capfd.readouterr().err.count(WARNING)
    finally:
        hvd.shutdown()
    err = capfd.readouterr().err
    at_shutdown = err.count(WARNING)
    expected = 1 if share is None and rank == 0 and size > 1 else 0
    assert (while_training, at_shutdown) == (0, expected), f"rank {rank} of {size}"
    if expected:  # Horovod's remedy, not ml_comm's own calls
        assert "hvd.broadcast_variables(" in err and "mc.broadcast" not in err, err
