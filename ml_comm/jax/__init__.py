"""JAX binding: `ml_comm.gradients` on JAX arrays, eagerly and inside `jax.jit`.

`ml_comm.init(..., framework="jax")` makes the session's backend. A call averages its
gradients in one XLA custom call (an FFI handler built on first use against the
installed jaxlib): XLA's host buffers go straight to the core, which writes the averages
into the call's result buffers, so a jitted train step keeps its compiled form and
nothing is copied through Python. Where the handler cannot be built, the same call goes
through an ordered `jax.experimental.io_callback` into the NumPy path (copies in and
out; the reason is printed once).

The gradients are grouped by dtype, one request of the core per dtype (each part in the
core's fused layout order), as the NumPy and TensorFlow paths do: one list has one
layout whichever front end hands it over.
"""

# Where it lives: backend.py (the session backend), ffi/*.cc with build.py and
# handler.py (the custom call), core/layout.py (the fused order).

from __future__ import annotations

import contextlib
from collections.abc import Callable
from contextlib import AbstractContextManager

import jax
import numpy as np

from ..arrays.buffers import dtype_code
from ..core.errors import BadArgumentTypeError, refused
from ..core.layout import fused_order
from . import handler

__all__ = ["average", "is_traced"]


def is_traced(values) -> bool:
    """Whether any of `values` is a tracer (the call is being traced by jit/grad)."""
    return any(isinstance(v, jax.core.Tracer) for v in values)


def _arrays(grads) -> dict[int, jax.Array]:
    """The list's arrays by their place in it, None skipped."""
    if not isinstance(grads, (list, tuple)):
        raise BadArgumentTypeError(
            f"gradients takes a list of JAX arrays, got {type(grads).__name__}"
        )
    arrays = {}
    for i, g in enumerate(grads):
        if g is None:
            continue
        try:
            arrays[i] = jax.numpy.asarray(g)
        except (TypeError, ValueError) as exc:
            error = BadArgumentTypeError(f"gradients[{i}] is not an array: {exc}")
            raise refused(error, "MLC_REFUSED_NOT_ARRAY", i) from None
    return arrays


def _groups(arrays: dict[int, jax.Array]) -> list[list[int]]:
    """List indices grouped by dtype (first-seen order), each group in fused layout order."""
    by_dtype: dict[np.dtype, list[int]] = {}
    for i, a in arrays.items():
        dtype = np.dtype(a.dtype)
        dtype_code(dtype, reduces=True, tensor=i)  # naming the dtypes the core reduces
        by_dtype.setdefault(dtype, []).append(i)
    return [fused_order([arrays[i].ndim for i in idx], idx) for idx in by_dtype.values()]


def average(
    grads,
    team_id: int | None,
    host_average: Callable[[list[np.ndarray]], list[np.ndarray]],
    check_weights: bool = False,
    checking: Callable[[], AbstractContextManager] = contextlib.nullcontext,
) -> list:
    """The list averaged over the team's ranks, same order, shapes and dtypes; None stays
    None. team_id: the FFI handler's live id of the team (None: the handler is not
    loaded, io_callback with host_average, the NumPy path's average of a list).
    check_weights: each run of the compiled call is judged by the check that the job
    shares its weights (the handler names the call by its layout; host_average judges
    its own). checking(): the block in which the arguments are checked, before any call is
    built, which tells the other ranks' matching call what it raises (eagerly or while
    tracing), so that theirs fails instead of waiting or pairing with this rank's next."""
    with checking():
        arrays = _arrays(grads)
        groups = _groups(arrays)  # the fallback's NumPy path groups again: checked here
    result: list = [None] * len(grads)
    if not arrays:
        # Still a call every rank makes (an empty one): a rank whose list held gradients
        # fails with this one instead of pairing them with this rank's next call.
        if team_id is not None:
            jax.ffi.ffi_call(handler.TARGET, (), has_side_effect=True)(
                team_id=np.int64(team_id),
                part_sizes=np.zeros(0, np.int64),
                check_weights=np.int64(0),
            )
        else:

            def empty_call() -> None:
                host_average([])

            jax.experimental.io_callback(empty_call, None, ordered=True)
        return result
    if team_id is None:  # the NumPy path groups and lays out the list itself
        order = list(arrays)
    else:
        order = [i for group in groups for i in group]
    flat = [arrays[i] for i in order]
    shapes = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in flat]
    if team_id is not None:
        # Each result may take its operand's buffer (XLA copies first where the operand
        # lives on): in a train step the gradients are reduced where backprop left them,
        # in memory XLA has touched before, instead of into fresh pages.
        aliases = {i: i for i in range(len(flat))}
        call = jax.ffi.ffi_call(
            handler.TARGET, shapes, has_side_effect=True, input_output_aliases=aliases
        )
        sizes = np.array([len(group) for group in groups], np.int64)
        outs = call(
            *flat,
            team_id=np.int64(team_id),
            part_sizes=sizes,
            check_weights=np.int64(check_weights),
        )
    else:
        outs = jax.experimental.io_callback(
            lambda *xs: host_average([np.asarray(x) for x in xs]), shapes, *flat, ordered=True
        )
    for i, out in zip(order, outs):
        result[i] = out
    return result
