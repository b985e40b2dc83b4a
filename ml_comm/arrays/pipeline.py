"""Pipelined teams for NumPy gradients (config_team ksteps/max_steps): the data of the
core's pipelined step (csrc/pipeline/pipeline.c, which decides what each call does).

A pipelined call starts the reduction of copies of its gradients and returns the average of
the previous call's, which has been reducing behind the caller's compute since then. State
is kept per team and gradient layout (dtype and shapes), so one model's gradients on a team
form one pipeline.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .._core import ffi, lib

Layout = tuple[str, tuple[tuple[int, ...], ...]]


@dataclass
class _InFlight:
    request: object  # mlc_request *; None: reduced already (a call that raised, below)
    results: list[np.ndarray]  # reduced in place; the arrays handed out when done
    keep: object  # cffi buffers that must outlive the request


class Stage:
    """One pipeline: the core's state, and the reductions its handles stand for."""

    def __init__(self, ksteps: int, max_steps: int) -> None:
        self.state = ffi.new("mlc_pipeline *")
        lib.mlc_pipeline_init(self.state, ksteps, max_steps)
        self.flights: dict[int, _InFlight] = {}
        self.next_handle = 1


Submit = Callable[[list[np.ndarray]], tuple[object, object]]
Wait = Callable[[object], None]


def layout_of(arrays: list[np.ndarray]) -> Layout:
    return (arrays[0].dtype.str, tuple(a.shape for a in arrays))


def step(
    stage: Stage,
    inputs: list[np.ndarray],
    marked: int,
    reduce_now: Callable[[list[np.ndarray]], list[np.ndarray]],
    submit: Submit,
    wait: Wait,
    earlier_failed: Callable[[], None],
) -> list[np.ndarray]:
    """Run one call of a pipeline as the core's turn says; returns what the caller gets.

    marked: the calling thread's step number (ml_comm.step; 0: none). reduce_now:
    synchronous average of a list (new arrays). submit(arrays): starts an in-place average
    of arrays the pipeline owns, returns (request, keep). wait(request) finishes it
    (raising on failure). Where the previous call's reduction failed, this call raises
    that failure: at once, after earlier_failed() (it submitted nothing), where the turn
    restarts the pipeline; else once it has reduced or started its own.
    """
    turn = lib.mlc_pipeline_next(stage.state, marked)
    previous, failure = None, None
    if turn.finish != ffi.NULL:
        flight = stage.flights.pop(int(ffi.cast("uintptr_t", turn.finish)))
        try:
            if flight.request is not None:
                wait(flight.request)
            previous = flight.results
        except BaseException as exc:
            if turn.restart_on_failure or not isinstance(exc, Exception):
                earlier_failed()
                raise
            failure = exc  # raised below, once this call's part is done
    try:
        now = reduce_now(inputs) if turn.reduce_now else None
        if turn.start:
            # Copies: the caller may reuse its arrays while the reduction runs.
            owned = [np.array(a, order="C", copy=True) for a in inputs]
            request, keep = submit(owned)
            _started(stage, _InFlight(request, owned, keep))
    except Exception as exc:
        if failure is not None:  # the first error is this call's to raise
            raise failure from exc
        raise
    if failure is not None:
        if now is not None:  # this call's average, for the next call to return
            _started(stage, _InFlight(None, now, None))
        raise failure
    if turn.result == lib.MLC_RESULT_NOW:
        return now
    if turn.result == lib.MLC_RESULT_PREVIOUS:
        return previous
    if turn.result == lib.MLC_RESULT_BOTH:
        return [p + c for p, c in zip(previous, now)]
    return [np.zeros_like(a) for a in inputs]


def _started(stage: Stage, flight: _InFlight) -> None:
    handle = stage.next_handle
    stage.next_handle += 1
    stage.flights[handle] = flight
    lib.mlc_pipeline_started(stage.state, ffi.cast("void *", handle))


def drain_all(stages: dict, wait: Wait) -> None:
    """Finish every reduction still in flight (config_team, finalize), ignoring results."""
    for stage in stages.values():
        for flight in stage.flights.values():
            if flight.request is None:
                continue
            try:
                wait(flight.request)
            except Exception:  # noqa: BLE001 - finalize must release the rest
                pass
        stage.flights.clear()
