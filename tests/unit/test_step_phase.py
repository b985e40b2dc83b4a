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


def turns(ksteps: int, max_steps: int, steps: list[int]) -> list[tuple[int, int, int, int]]:
    """mlc_pipeline_next's (phase, step, index, restart_on_failure) for calls marked so."""
    pipeline = ffi.new("mlc_pipeline *")
    lib.mlc_pipeline_init(pipeline, ksteps, max_steps)
    out = []
    for step in steps:
        t = lib.mlc_pipeline_next(pipeline, step)
        out.append((t.phase, t.step, t.index, t.restart_on_failure))
        lib.mlc_pipeline_started(pipeline, ffi.NULL)
    return out


def test_unmarked_calls_restart_the_pipeline_after_a_failure():
    assert turns(-1, 4, [0, 0, 0, 0]) == [
        (START, 0, 0, 1),
        (PIPE, 0, 0, 1),
        (PIPE, 0, 0, 1),
        (DRAIN, 0, 0, 1),
    ]


def test_a_step_left_early_counts_as_a_call():
    """Step 3 left before its call on this rank: step 4 is the fourth call, so this rank
    drains at step 5 as the ranks that made all five calls do."""
    got = turns(-1, 5, [1, 2, 4, 5])
    assert [phase for phase, *_ in got] == [START, PIPE, PIPE, DRAIN]
    assert all(t[1:] == (s, 0, 0) for t, s in zip(got, [1, 2, 4, 5]))


def test_calls_of_one_step_are_placed_in_it():
    got = turns(0, 10, [1, 1, 2, 2, 2, 3])
    assert [(step, index) for _, step, index, _ in got] == [
        (1, 0),
        (1, 1),
        (2, 0),
        (2, 1),
        (2, 2),
        (3, 0),
    ]
    assert [phase for phase, *_ in got] == [START] + [PIPE] * 5


def test_step_numbers_that_start_again_count_on():
    """A lower number (a new numbering) is no gap: one call each."""
    assert [t[0] for t in turns(-1, 4, [7, 8, 1, 2])] == [START, PIPE, PIPE, DRAIN]
