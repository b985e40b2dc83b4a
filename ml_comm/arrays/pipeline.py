"""Pipelined teams for NumPy gradients (config_team ksteps/max_steps).

A pipelined call starts the reduction of its own gradients and returns the
average of the previous call's, which has been reducing behind the caller's
compute since then. What each call returns is decided by the core's pure
function mlc_step_phase (see csrc/base/schedule.c and docs/pipelined.md):

    SYNC            this call's average
    PIPELINE_START  zeros; this call's reduction starts
    PIPELINED       the previous call's average; this call's reduction starts
    DRAIN           the previous call's average plus this call's

State is kept per team and gradient layout (dtype and shapes), so one model's
gradients on a team form one pipeline.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from .._core import lib

Layout = tuple[str, tuple[tuple[int, ...], ...]]


@dataclass
class _InFlight:
    request: object  # mlc_request *
    results: list[np.ndarray]  # reduced in place; the arrays handed out when done
    keep: object  # cffi buffers that must outlive the request


@dataclass
class Stage:
    """One pipeline: the calls made so far and the reduction in flight."""

    calls: int = 0
    in_flight: _InFlight | None = None
    keep: list = field(default_factory=list)


Submit = Callable[[list[np.ndarray]], tuple[object, object]]
Wait = Callable[[object], None]


def layout_of(arrays: list[np.ndarray]) -> Layout:
    return (arrays[0].dtype.str, tuple(a.shape for a in arrays))


def step(
    stage: Stage,
    phase: int,
    inputs: list[np.ndarray],
    reduce_now: Callable[[list[np.ndarray]], list[np.ndarray]],
    submit: Submit,
    wait: Wait,
    earlier_failed: Callable[[], None],
) -> list[np.ndarray]:
    """Run one call of a pipeline; returns what the caller gets for `inputs`.

    reduce_now: synchronous average of a list (new arrays). submit(arrays): starts an
    in-place average of arrays the pipeline owns, returns (request, keep). wait(request)
    finishes it (raising on failure). earlier_failed(): told before this call raises the
    previous call's failure, having submitted nothing of its own.
    """
    stage.calls += 1
    if phase == lib.MLC_STEP_SYNC:
        return reduce_now(inputs)
    # None: nothing in flight (entering the pipeline, or the previous call raised the
    # failure of the reduction it would have returned: the pipeline starts afresh).
    try:
        previous = _finish(stage, wait)
    except BaseException:
        earlier_failed()
        raise
    if phase == lib.MLC_STEP_DRAIN:
        now = reduce_now(inputs)
        return now if previous is None else [p + c for p, c in zip(previous, now)]
    # Copies: the caller may reuse its arrays while the reduction runs.
    owned = [np.array(a, order="C", copy=True) for a in inputs]
    request, keep = submit(owned)
    stage.in_flight = _InFlight(request, owned, keep)
    if phase == lib.MLC_STEP_PIPELINE_START or previous is None:
        return [np.zeros_like(a) for a in inputs]
    return previous


def _finish(stage: Stage, wait: Wait) -> list[np.ndarray] | None:
    flight, stage.in_flight = stage.in_flight, None
    if flight is None:
        return None
    wait(flight.request)
    return flight.results


def drain_all(stages: dict, wait: Wait) -> None:
    """Finish every reduction still in flight (finalize), ignoring their results."""
    for stage in stages.values():
        try:
            _finish(stage, wait)
        except Exception:  # noqa: BLE001 - finalize must release the rest
            pass
