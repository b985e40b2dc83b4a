"""NumPy reductions: in-place average / sum of one array, and the fused average of a
gradient list (synchronous, or pipelined on a team configured so; see pipeline.py)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .._core import ffi, lib
from ..core import dtypes as _dtypes
from ..core.errors import BadArgumentError, BadArgumentTypeError
from ..core.layout import fused_order
from ..core.session import Session, is_pipelined
from ..core.status import ERR_LEN, check
from ..faults import stop
from . import device, pipeline
from .buffers import as_array, buffer, dtype_code, group_by_dtype, in_place_array, shape_digest
from .pool import OutputPool
from .requests import (
    average_blocking,
    average_groups,
    average_now,
    empty_call,
    submit_average,
    wait_one,
)


def reduce_in_place(s: Session, arr: np.ndarray, team: int, op: int, what: str) -> np.ndarray:
    handle = s.team(team)
    if type(arr) is not np.ndarray and device.view(arr) is not None:
        return device.reduce_in_place(handle, s.team_err(team), arr, op, what)
    flags = arr.flags if type(arr) is np.ndarray else None
    # The common call (a writeable C-contiguous array of a reducible dtype) skips the checks
    # that would only name what is wrong: at 8 bytes the whole reduction takes microseconds.
    code = _dtypes.REDUCED_CODES.get(arr.dtype) if flags is not None else None
    if code is None or not (flags.writeable and flags.c_contiguous):
        arr = in_place_array(arr, what, reduces=True)
        code = dtype_code(arr.dtype, True)
    err = s.team_err(team)
    rc = lib.mlc_team_allreduce_into(
        handle, ffi.NULL, buffer(arr), arr.size, code, op, 0, shape_digest(arr), err, ERR_LEN
    )
    if rc:
        check(rc, what, err)
    return arr


def gradients(
    s: Session,
    stages: dict,
    pool: OutputPool,
    grads: Sequence[np.ndarray],
    team: int,
    out: Sequence[np.ndarray] | None = None,
) -> list[np.ndarray]:
    """The list averaged over the session's ranks (inputs untouched): into `out` when
    given, else into new arrays from `pool` (memory earlier calls touched).

    stages: this team's pipelines ({gradient layout: pipeline.Stage}), kept by the caller.
    """
    handle = s.team(team)
    config = s.configs[team]
    if not isinstance(grads, (list, tuple)):
        raise BadArgumentTypeError(
            f"gradients takes a list of numpy arrays, got {type(grads).__name__}"
        )
    pipelined = is_pipelined(config.ksteps, config.max_steps)
    if out is None and not pipelined and not s.guard.finite and _one_plain_dtype(grads):
        # The common call, with nothing to convert or group: a blocking call that runs
        # small lists on this thread; every microsecond of Python counts at 8 bytes.
        outputs = pool.arrays(grads)
        order = fused_order([g.ndim for g in grads], range(len(grads)))  # for errors too
        laid_out = [grads[i] for i in order]
        average_blocking(handle, s.team_err(team), [outputs[i] for i in order], laid_out, order)
        return outputs  # synchronous: should_stop reads the team's mark
    if device.holds_device_array(grads):
        if pipelined:
            raise BadArgumentError(
                "gradients of device arrays need a synchronous team (config_team's ksteps "
                "and max_steps: none pipelined)"
            )
        return device.gradients(handle, s.team_err(team), grads, out, lib.MLC_OP_AVERAGE)
    # order="C" copies only arrays that are not C-contiguous, and keeps 0-d arrays 0-d
    # (np.ascontiguousarray would make them 1-d).
    inputs = [np.asarray(as_array(g, f"gradients[{i}]", i), order="C") for i, g in enumerate(grads)]
    if not inputs:
        empty_call(handle, s.team_err(team))
        return []
    groups = group_by_dtype(inputs, reduces=True)
    if out is not None:
        outputs = _checked_out(out, inputs, pipelined)
    elif pipelined:
        outputs = [None] * len(inputs)
    else:
        outputs = pool.arrays(inputs)
    if not pipelined:
        # With the finite check the requests' own reports map NaNs to list indices.
        err = None if s.guard.finite else s.team_err(team)
        average_groups(handle, inputs, groups, outputs, err)
    else:
        forget = lambda: s.calls.forget(handle)  # noqa: E731
        _pipelined(handle, config, stages, inputs, groups, outputs, s.calls.marked_step(), forget)
    stop.note_call(team)  # what this call's waits saw of a stop request (faults/stop.py)
    # A NumPy scalar in, a NumPy scalar of its dtype out (as 0-d arrays give 0-d arrays).
    return [
        out[()] if isinstance(g, np.generic) and out is not None else out
        for g, out in zip(grads, outputs)
    ]


def _one_plain_dtype(grads) -> bool:
    """Every gradient a C-contiguous ndarray of one dtype that the core reduces."""
    if not grads or type(grads[0]) is not np.ndarray or grads[0].dtype not in _dtypes.REDUCED_CODES:
        return False
    dtype = grads[0].dtype
    return all(type(g) is np.ndarray and g.dtype == dtype and g.flags.c_contiguous for g in grads)


def _checked_out(out, inputs: list[np.ndarray], pipelined: bool) -> list[np.ndarray]:
    """gradients(out=...): one writable C-contiguous array per gradient, of its shape and
    dtype (it may be the gradient itself: then the average replaces it)."""
    if pipelined:
        raise BadArgumentError("gradients(out=...) is for synchronous teams; a pipelined team "
                         "returns the previous call's average from its own buffers")  # fmt: skip
    if not isinstance(out, (list, tuple)) or len(out) != len(inputs):
        raise BadArgumentError(
            f"gradients: out must be a list of {len(inputs)} arrays, one per gradient"
        )
    for i, (o, g) in enumerate(zip(out, inputs)):
        in_place_array(o, f"out[{i}]", reduces=True)
        if o.shape != g.shape or o.dtype != g.dtype or not o.flags.c_contiguous:
            raise BadArgumentError(
                f"gradients: out[{i}] must be a C-contiguous {g.dtype} array of shape {g.shape}, "
                f"got {o.dtype} {o.shape}"
            )
    return list(out)


def _pipelined(handle, config, stages: dict, inputs, groups, outputs, marked: int, forget) -> None:
    """One pipelined call, a turn per dtype. With steps marked every dtype's pipeline
    takes its turn, also after an earlier dtype's raised (each did its part, as on the
    other ranks), and the first failure is raised after the last; unmarked, the first
    failure ends the call (its pipelines start afresh)."""
    failure = None
    for k, idx in enumerate(groups.values()):
        order = fused_order([inputs[i].ndim for i in idx], idx)
        arrays = [inputs[i] for i in order]
        layout = pipeline.layout_of(arrays)
        stage = stages.get(layout) or stages.setdefault(
            layout, pipeline.Stage(config.ksteps, config.max_steps)
        )
        try:
            results = pipeline.step(
                stage,
                arrays,
                marked,
                lambda a: average_now(handle, a),
                lambda a: submit_average(handle, a, a, in_place=True),
                wait_one,
                forget if k == 0 else lambda: None,  # a later dtype: this call submitted
            )
        except Exception as exc:  # noqa: BLE001 - raised once every dtype took its turn
            if not marked:
                raise
            failure = failure or exc
            continue
        for i, r in zip(order, results):
            outputs[i] = r
    if failure is not None:
        raise failure
