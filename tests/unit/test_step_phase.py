"""mlc_step_phase: which gradients each call of a pipelined team returns."""

from __future__ import annotations

import pytest
from ml_comm._core import ffi, lib

SYNC, START, PIPE, DRAIN = (
    lib.MLC_STEP_SYNC,
    lib.MLC_STEP_PIPELINE_START,
    lib.MLC_STEP_PIPELINED,
    lib.MLC_STEP_DRAIN,
)


def phases(ksteps: int, max_steps: int, calls: int) -> list[int]:
    return [lib.mlc_step_phase(c, ksteps, max_steps) for c in range(calls)]


def returned(ksteps: int, max_steps: int, calls: int) -> list[tuple[int, ...]]:
    """The call numbers whose gradients each call returns."""
    out = []
    for c, phase in enumerate(phases(ksteps, max_steps, calls)):
        out.append({SYNC: (c,), START: (), PIPE: (c - 1,), DRAIN: (c - 1, c)}[phase])
    return out


@pytest.mark.parametrize(
    ("ksteps", "max_steps", "expected"),
    [
        (0, 0, [SYNC] * 6),  # the default: synchronous
        (3, 3, [SYNC] * 6),  # ksteps >= max_steps: synchronous
        (9, 3, [SYNC] * 6),
        (2, 5, [SYNC, SYNC, START, PIPE, PIPE, PIPE]),  # pipelined for good after ksteps
        (0, 5, [START, PIPE, PIPE, PIPE, PIPE, PIPE]),
        (-2, 5, [START, PIPE, PIPE, DRAIN, SYNC, SYNC]),  # synchronous for the last 2 of 5
        (-1, 2, [START, DRAIN, SYNC, SYNC, SYNC, SYNC]),
        (-5, 5, [SYNC] * 6),  # all of max_steps synchronous
    ],
)
def test_phase_sequences(ksteps, max_steps, expected):
    assert phases(ksteps, max_steps, len(expected)) == expected


@pytest.mark.parametrize("max_steps", [1, 2, 3, 7, 20])
def test_every_gradient_is_returned_once(max_steps):
    for ksteps in range(-max_steps, max_steps + 2):
        got = [c for calls in returned(ksteps, max_steps, max_steps) for c in calls]
        assert got == sorted(got), "each call returns older gradients first"
        assert len(got) == len(set(got)), f"ksteps={ksteps}: a gradient returned twice"
        missing = set(range(max_steps)) - set(got)
        if ksteps < 0 or ksteps >= max_steps:
            assert not missing, f"ksteps={ksteps}: lost {missing}"
        else:  # still pipelined at the end: only the last call's gradients are in flight
            assert missing == {max_steps - 1}, f"ksteps={ksteps}: lost {missing}"


def turns(ksteps: int, max_steps: int, steps: list[int], hand_over=()) -> list[tuple]:
    """mlc_pipeline_next's (phase, step, index, restart_on_failure, result) for calls marked
    so; each call whose turn starts a reduction hands one over, and so do the calls whose
    positions are in hand_over (a call that reduced now, then raised)."""
    pipeline = ffi.new("mlc_pipeline *")
    lib.mlc_pipeline_init(pipeline, ksteps, max_steps)
    out = []
    for k, step in enumerate(steps):
        t = lib.mlc_pipeline_next(pipeline, step)
        out.append((t.phase, t.step, t.index, t.restart_on_failure, t.result))
        if t.start or k in hand_over:
            lib.mlc_pipeline_started(pipeline, ffi.cast("void *", k + 1))
    return out


NOW, ZEROS, PREVIOUS, BOTH = (
    lib.MLC_RESULT_NOW,
    lib.MLC_RESULT_ZEROS,
    lib.MLC_RESULT_PREVIOUS,
    lib.MLC_RESULT_BOTH,
)


def test_unmarked_calls_restart_the_pipeline_after_a_failure():
    got = turns(-1, 4, [0, 0, 0, 0])
    assert [t[3] for t in got] == [1, 1, 1, 1]
    assert [t[4] for t in got] == [ZEROS, PREVIOUS, PREVIOUS, BOTH]


def test_calls_of_one_step_are_placed_in_it():
    got = turns(0, 10, [1, 1, 2, 2, 2, 3])
    assert [(step, index) for _, step, index, _, _ in got] == [
        (1, 0),
        (1, 1),
        (2, 0),
        (2, 1),
        (2, 2),
        (3, 0),
    ]
    assert [t[3] for t in got] == [0] * 6


def test_step_numbers_count_calls_not_gaps():
    """Numbers used alike on every rank may skip (epoch * 1000 + batch): one call each."""
    assert [t[0] for t in turns(-1, 4, [1000, 1001, 2000, 2001])] == [START, PIPE, PIPE, DRAIN]


def test_a_reduction_handed_over_is_returned_whatever_the_phase():
    """A rank a call behind the others (it left a step) reaches the synchronous phase with
    the average of its last pipelined call still to return: returned with its own (BOTH),
    and a call that reduced now and raised hands its average to the next call."""
    got = turns(-1, 3, [1, 2, 3, 4, 5], hand_over=(2,))
    assert [t[0] for t in got] == [START, PIPE, DRAIN, SYNC, SYNC]
    assert [t[4] for t in got] == [ZEROS, PREVIOUS, BOTH, BOTH, NOW]
