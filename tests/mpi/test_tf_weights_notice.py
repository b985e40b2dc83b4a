"""A traced step (tf.function) builds its gradients before its broadcast, a block per
team: no warning while it is built or runs, and at finalize only when nothing was
broadcast; eager steps are judged at their second call (core/weights_notice.py). This
module manages init itself."""

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


@pytest.mark.parametrize("broadcast", [False, True])
def test_eager_steps_are_judged_at_the_second(capfd, broadcast):
    """Eagerly (no tf.function) each call is a step's: the second call without a
    broadcast before it warns then, not at finalize; a broadcast after the first step
    keeps it silent."""
    capfd.readouterr()
    with ml_comm_session(1, 1, 1024, CHUNK_BYTES, framework="tensorflow"):
        rank, size = mc.get_rank(), mc.get_nranks()
        weights = tf.Variable(tf.ones(5))
        said = []
        for _ in range(3):
            out = mc.gradients([tf.ones(7)])
            assert out[0].numpy().tolist() == [1.0] * 7
            if broadcast:
                mc.broadcast([weights])
            said.append(capfd.readouterr().err.count(WARNING))
    said.append(capfd.readouterr().err.count(WARNING))
    expected = [0, 1, 0, 0] if not broadcast and rank == 0 and size > 1 else [0] * 4
    assert said == expected, f"rank {rank} of {size}"


@pytest.mark.parametrize("share", [None, "broadcast_variables", "broadcast_object"])
def test_horovod_tape_is_judged_in_its_second_step(capfd, share):
    """ml_comm.horovod's DistributedGradientTape averages gradients like mc.gradients: an
    eager script that never shares its weights gets the warning at its second step (rank
    0, more than one rank); one that broadcasts them after the first step, as variables or
    as a Python object, none."""
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
        err = capfd.readouterr().err
        while_training = err.count(WARNING)
    finally:
        hvd.shutdown()
    at_shutdown = capfd.readouterr().err.count(WARNING)
    expected = 1 if share is None and rank == 0 and size > 1 else 0
    assert (while_training, at_shutdown) == (expected, 0), f"rank {rank} of {size}"
    if expected:  # Horovod's remedy, not ml_comm's own calls
        assert "hvd.broadcast_variables(" in err and "mc.broadcast" not in err, err
