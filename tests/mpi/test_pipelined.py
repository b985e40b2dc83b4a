"""Pipelined teams with NumPy: what each call of gradients() returns for every
ksteps/max_steps shape, a synchronous and a pipelined team side by side, and inputs
reused by the caller while their reduction is in flight."""

from __future__ import annotations

import numpy as np
import pytest
from mpi_helpers import Checks, expected_average, make_input
from pipeline_cases import CASE_IDS, CASES, SPECS, call_inputs, expected, leave_a_marked_step_early

import ml_comm as mc

pytestmark = pytest.mark.mpi


@pytest.fixture
def team1(session):
    yield 1
    mc.config_team(1, 0, 0, 0)  # back to synchronous for the next test


@pytest.mark.parametrize(("ksteps", "max_steps", "returns"), CASES, ids=CASE_IDS)
def test_each_call_returns_the_documented_averages(session, team1, ksteps, max_steps, returns):
    mc.config_team(team1, 0, ksteps, max_steps)
    c = Checks()
    for call, calls in enumerate(returns):
        sync = mc.gradients(call_inputs(session.rank, call), 0)
        piped = mc.gradients(call_inputs(session.rank, call), team1)
        c.true(len(piped) == len(sync) == len(SPECS), f"call {call}: {len(piped)} results")
        for i, (got, want) in enumerate(zip(piped, expected(session.nranks, calls))):
            c.equal(got, want, f"call {call} gradient {i} on the pipelined team")
        for i, (got, want) in enumerate(zip(sync, expected(session.nranks, (call,)))):
            c.equal(got, want, f"call {call} gradient {i} on the synchronous team")
    c.finish()


def test_caller_may_reuse_its_arrays_while_they_reduce(session, team1):
    mc.config_team(team1, 0, 0, 10)
    c = Checks()
    arrays = call_inputs(session.rank, 0)
    first = mc.gradients(arrays, team1)
    c.true(len(first) == len(arrays), f"entering the pipeline: {len(first)} results")
    c.true(all(not a.any() for a in first), "entering the pipeline returns zeros")
    for a, fresh in zip(arrays, call_inputs(session.rank, 1)):
        a[...] = fresh  # overwritten in place while call 0's reduction may still run
    second = mc.gradients(arrays, team1)
    third = mc.gradients(arrays, team1)
    c.true(len(second) == len(third) == len(arrays), "a result per gradient")
    for i, (got, want) in enumerate(zip(second, expected(session.nranks, (0,)))):
        c.equal(got, want, f"gradient {i}: call 0's average despite the overwritten input")
    for i, (got, want) in enumerate(zip(third, expected(session.nranks, (1,)))):
        c.equal(got, want, f"gradient {i}: call 1's average")
    c.finish()


def test_config_team_starts_the_schedule_again(session, team1):
    mc.config_team(team1, 0, 1, 10)
    c = Checks()
    for call in range(3):
        mc.gradients(call_inputs(session.rank, call), team1)
    mc.config_team(team1, 0, 1, 10)  # the in-flight call 2 is dropped
    again = mc.gradients(call_inputs(session.rank, 5), team1)
    for i, (got, want) in enumerate(zip(again, expected(session.nranks, (5,)))):
        c.equal(got, want, f"gradient {i}: first call after config_team is synchronous again")
    c.true(len(again) == len(SPECS), "one result per gradient")
    c.finish()


def test_one_array_calls_follow_config_team(session, team1):
    """A one-array call on a synchronous team takes a shortcut into the core; once
    config_team makes the team pipelined, such calls must follow the schedule."""
    c = Checks()
    shape, dt = (5,), np.float32
    mc.gradients([make_input(session.rank, shape, dt, seed=9)], team1)  # synchronous
    mc.config_team(team1, 0, 0, 6)  # pipelined from the start
    first = mc.gradients([make_input(session.rank, shape, dt, seed=0)], team1)
    second = mc.gradients([make_input(session.rank, shape, dt, seed=1)], team1)
    c.equal(first[0], np.zeros(shape, dt), "first pipelined call (nothing reduced before)")
    c.equal(second[0], expected_average(shape, dt, session.nranks, seed=0), "second call")
    c.finish()


def test_a_rank_that_leaves_a_marked_step_early_realigns(session, team1):
    mc.config_team(team1, 0, -1, 6)
    c = Checks()
    leave_a_marked_step_early(c, session.rank, session.nranks, lambda a: mc.gradients(a, team1))
    c.finish()
