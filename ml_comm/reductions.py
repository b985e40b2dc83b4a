"""NumPy reductions: in-place average / sum of one array, and the fused average of a
gradient list (synchronous, or pipelined on a team configured so; see pipeline.py)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from . import _dtypes, pipeline
from ._buffers import as_array, buffer, group_by_dtype, in_place_array
from ._core import lib
from ._requests import average_groups, average_now, submit_average, wait_one
from ._status import ERR_LEN, check
from .session import Session


def reduce_in_place(s: Session, arr: np.ndarray, team: int, op: int, what: str) -> np.ndarray:
    handle = s.team(team)
    arr = in_place_array(arr, what)
    rc = lib.mlc_team_allreduce_buffer(
        handle, buffer(arr), arr.size, _dtypes.CODES[arr.dtype], op, s.err, ERR_LEN
    )
    check(rc, what, s.err)
    return arr


def gradients(s: Session, stages: dict, grads: Sequence[np.ndarray], team: int) -> list[np.ndarray]:
    """The list averaged over the session's ranks (new arrays, inputs untouched).

    stages: this team's pipelines ({gradient layout: pipeline.Stage}), kept by the caller.
    """
    handle = s.team(team)
    config = s.configs[team]
    if not isinstance(grads, (list, tuple)):
        raise TypeError(f"gradients takes a list of numpy arrays, got {type(grads).__name__}")
    # order="C" copies only arrays that are not C-contiguous, and keeps 0-d arrays 0-d
    # (np.ascontiguousarray would make them 1-d).
    inputs = [np.asarray(as_array(g, f"gradients[{i}]"), order="C") for i, g in enumerate(grads)]
    outputs: list = [None] * len(inputs)
    groups = group_by_dtype(inputs)
    if not pipeline.is_pipelined(config.ksteps, config.max_steps):
        average_groups(handle, inputs, groups, outputs)
    else:
        _pipelined(handle, config, stages, inputs, groups, outputs)
    # A NumPy scalar in, a NumPy scalar of its dtype out (as 0-d arrays give 0-d arrays).
    return [
        out[()] if isinstance(g, np.generic) and out is not None else out
        for g, out in zip(grads, outputs)
    ]


def _pipelined(handle, config, stages: dict, inputs, groups, outputs) -> None:
    for idx in groups.values():
        order = idx[::-1]
        arrays = [inputs[i] for i in order]
        stage = stages.setdefault(pipeline.layout_of(arrays), pipeline.Stage())
        phase = lib.mlc_step_phase(stage.calls, config.ksteps, config.max_steps)
        results = pipeline.step(
            stage,
            phase,
            arrays,
            lambda a: average_now(handle, a),
            lambda a: submit_average(handle, a, a, in_place=True),
            wait_one,
        )
        for i, r in zip(order, results):
            outputs[i] = r
