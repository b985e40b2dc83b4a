"""The check that a job shares its weights, with TensorFlow: a traced step (tf.function)
builds its gradients before its broadcast, a block per team, and its ops count each run,
so a step that never broadcasts fails at its second run on every rank; eager steps fail
at their second call (csrc/team/weights_check.c, core/weights_notice.py); Horovod's tape
under ml_comm.horovod, eager or traced, alike. This module manages init itself."""

from __future__ import annotations

import pytest
import tensorflow as tf
from mpi_helpers import CHUNK_BYTES, comm_world, ml_comm_session

import ml_comm as mc
import ml_comm.horovod.tensorflow as hvd

pytestmark = pytest.mark.mpi

WARNING = "ml_comm: warning: gradients were averaged"
REFUSAL = "averaged the gradients of a model's second step, but no weights were broadcast"


def refusals(run, steps: int = 3) -> list[str]:
    """The message of each of `steps` runs that failed ("" for one that did not)."""
    said = []
    for _ in range(steps):
        try:
            run()
            said.append("")
        except (mc.StateError, tf.errors.OpError) as e:
            said.append(str(e))
    return said


def assert_refused_from_the_second(said: list[str], size: int, team: int = 0) -> None:
    if size == 1:
        assert said == [""] * len(said), said
        return
    assert said[0] == "" and all(f"team {team} {REFUSAL}" in text for text in said[1:]), said


@pytest.mark.parametrize("broadcast", [False, True])
def test_a_traced_step_fails_at_its_second_run(capfd, broadcast):
    """A step traced once, its gradients built for two teams before its broadcast (as a
    graph's are): with the broadcast every run averages; without, the second run fails
    on every rank (its ops count the runs), and finalize adds no warning."""
    capfd.readouterr()
    with ml_comm_session(1, 2, 1024, CHUNK_BYTES, framework="tensorflow", weights_check=True):
        rank, size = mc.get_rank(), mc.get_nranks()  # the session's (a suite comm may reorder)
        weights = tf.Variable(tf.ones(5))

        @tf.function
        def step():
            # 7 elements go by their own submit, the pair as a group with its opener
            first = mc.gradients([tf.ones(7), tf.ones([300, 40])], team=0)
            second = mc.gradients([tf.fill([3], float(rank))], team=1)
            if broadcast:
                with tf.control_dependencies(first + second):
                    mc.broadcast([weights])
            return first + second

        def run():
            out = step()
            assert out[0].numpy().tolist() == [1.0] * 7
            assert out[2].numpy().tolist() == [(size - 1) / 2] * 3

        said = refusals(run)
        if broadcast:
            assert said == [""] * 3, said
        else:
            assert_refused_from_the_second(said, size)
    assert WARNING not in capfd.readouterr().err


def test_a_traced_step_run_once_is_warned_at_finalize(capfd):
    capfd.readouterr()
    with ml_comm_session(1, 1, 1024, CHUNK_BYTES, framework="tensorflow", weights_check=True):
        rank, size = mc.get_rank(), mc.get_nranks()
        step = tf.function(lambda: mc.gradients([tf.ones(7)]))
        assert step()[0].numpy().tolist() == [1.0] * 7
    err = capfd.readouterr().err
    assert (WARNING in err) == (rank == 0 and size > 1), f"rank {rank} of {size}: {err}"


@pytest.mark.parametrize("broadcast", [False, True])
def test_eager_steps_fail_at_the_second(capfd, broadcast):
    """Eagerly (no tf.function) each call is a step: the second without a broadcast before
    it fails on every rank with StateError; a broadcast after the first step lets it run."""
    with ml_comm_session(1, 1, 1024, CHUNK_BYTES, framework="tensorflow", weights_check=True):
        size = mc.get_nranks()
        weights = tf.Variable(tf.ones(5))

        def run():
            assert mc.gradients([tf.ones(7)])[0].numpy().tolist() == [1.0] * 7
            if broadcast:
                mc.broadcast([weights])

        said = refusals(run)
        if broadcast:
            assert said == [""] * 3, said
        else:
            assert_refused_from_the_second(said, size)


@pytest.mark.parametrize("traced", [False, True])
@pytest.mark.parametrize("share", [None, "broadcast_variables", "broadcast_object"])
def test_horovod_tape_fails_at_its_second_step(share, traced):
    """ml_comm.horovod's DistributedGradientTape averages gradients like mc.gradients, in
    an eager or a traced step: a script that never shares its weights fails at its second
    step on every rank; one that broadcasts them after the first step, as variables or as
    a Python object, trains on."""
    comm_world().barrier()
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    try:
        weights = tf.Variable(tf.ones(4))

        def step():
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(weights * float(rank + 1))
            return hvd.DistributedGradientTape(tape).gradient(loss, [weights])[0]

        compiled = tf.function(step) if traced else step

        def run():
            assert compiled().numpy().tolist() == [(size + 1) / 2] * 4
            if share == "broadcast_variables":
                hvd.broadcast_variables([weights], root_rank=0)
            elif share == "broadcast_object":
                weights.assign(hvd.broadcast_object(weights.numpy(), root_rank=0))

        said = refusals(run)
    finally:
        hvd.shutdown()
    if share is None:
        assert_refused_from_the_second(said, size)
        if size > 1:
            assert "hvd.broadcast_variables(" in said[1], said[1]
    else:
        assert said == [""] * 3, said


@pytest.mark.parametrize("broadcast", [False, True])
def test_two_models_traced_apart_on_one_team(broadcast):
    """A GAN's two models, each stepped by a tf.function of its own on team 0: the first
    run of each is its model's first step, so a broadcast after both lets every later run
    average; without it, the first model's second run fails, and every run after it."""
    with ml_comm_session(1, 1, 1024, CHUNK_BYTES, framework="tensorflow", weights_check=True):
        size = mc.get_nranks()
        weights = tf.Variable(tf.ones(5))
        first = tf.function(lambda: mc.gradients([tf.ones(7)]))
        second = tf.function(lambda: mc.gradients([tf.ones([4, 3])]))
        said = []
        for _ in range(3):
            said += refusals(first, 1) + refusals(second, 1)
            if broadcast:
                mc.broadcast([weights])
    if broadcast or size == 1:
        assert said == [""] * 6, said
    else:
        assert said[:2] == ["", ""] and all(REFUSAL in text for text in said[2:]), said
