"""should_stop() turns true on every rank after the same step once one rank asked
(request_stop, what the signal handler of catch_stop_signals calls), for NumPy
(synchronous and pipelined teams) and TensorFlow custom loops (eager and tf.function);
refusals: ML_COMM_CHECK_LAYOUT=0, a pipelined TensorFlow team.
(Real signals to one rank of a job: tests/faults/test_stop_job.py.)"""

from __future__ import annotations

import numpy as np
import pytest
from mpi_helpers import CHUNK_BYTES, MSGLEN, Checks, ml_comm_session

import ml_comm as mc

pytestmark = pytest.mark.mpi
ASK_AT = 3
STEPS = 12


def stop_steps(step_fn, nranks: int, rank: int) -> np.ndarray:
    """Run steps; the last rank asks at ASK_AT; each rank's first step that said stop,
    gathered (one slot per rank)."""
    first = -1
    for step in range(STEPS):
        step_fn(step)
        if step == ASK_AT and rank == nranks - 1:
            mc.request_stop()
        if mc.should_stop():
            first = step
            break
    slots = np.zeros(nranks, np.int64)
    slots[rank] = first
    return mc.allreduce_sum(slots)


def check_same_step(c: Checks, steps: np.ndarray, nranks: int, what: str) -> None:
    c.true(len(set(steps.tolist())) == 1, f"{what}: ranks stopped at steps {steps.tolist()}")
    # The flag rides in the next request after the ask: one or two steps later.
    lowest = ASK_AT if nranks == 1 else ASK_AT + 1
    c.true(lowest <= steps[0] <= ASK_AT + 2, f"{what}: stopped at {steps[0]}")


@pytest.mark.parametrize("pipelined", [False, True], ids=["sync", "pipelined"])
def test_numpy_loop_stops_together(pipelined):
    c = Checks()
    with ml_comm_session(1, 1, MSGLEN, CHUNK_BYTES) as s:
        if pipelined:
            mc.config_team(0, 0, 0, STEPS)
        grads = [np.ones(300, np.float32), np.ones(5, np.float64)]
        steps = stop_steps(lambda step: mc.gradients(grads), s.nranks, s.rank)
        check_same_step(c, steps, s.nranks, "numpy")
    c.finish()


def test_stop_ends_with_the_session():
    """A new session starts with nobody asking."""
    c = Checks()
    with ml_comm_session(1, 1, MSGLEN, CHUNK_BYTES):
        mc.request_stop()
        mc.gradients([np.ones(3, np.float32)])
        mc.gradients([np.ones(3, np.float32)])
        c.true(mc.should_stop(), "asked")
    with ml_comm_session(1, 1, MSGLEN, CHUNK_BYTES):
        mc.gradients([np.ones(3, np.float32)])
        c.true(not mc.should_stop(), "a new session still says stop")
    c.finish()


def test_refused_without_the_agreement_check(monkeypatch):
    monkeypatch.setenv("ML_COMM_CHECK_LAYOUT", "0")
    c = Checks()
    with ml_comm_session(1, 1, MSGLEN, CHUNK_BYTES) as s:
        if s.nranks > 1:
            for call in (mc.catch_stop_signals, mc.should_stop):
                c.raises(mc.StateError, call, words=("ML_COMM_CHECK_LAYOUT=0",))
    c.finish()


@pytest.mark.parametrize("mode", ["eager", "function"])
def test_tensorflow_loop_stops_together(mode):
    tf = pytest.importorskip("tensorflow")
    c = Checks()
    with ml_comm_session(1, 1, MSGLEN, CHUNK_BYTES, framework="tensorflow") as s:
        var = tf.Variable(tf.zeros([40]))

        def step():
            grads = mc.gradients([tf.ones([40]) * float(s.rank + 1)])
            var.assign_sub(grads[0])

        run = step if mode == "eager" else tf.function(step)
        steps = stop_steps(lambda _: run(), s.nranks, s.rank)
        check_same_step(c, steps, s.nranks, mode)
        if s.nranks > 1:
            mc.config_team(0, 0, 0, STEPS)
            c.raises(mc.StateError, mc.should_stop, words=("pipelined",))
    c.finish()
