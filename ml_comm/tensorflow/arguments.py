"""The TensorFlow front end's checks of its arguments, made before it builds any op: what
they find wrong on one rank is told to the other ranks' matching op (core/calls.py's
refusing), which would otherwise wait for an op this rank never runs."""

from __future__ import annotations

import contextlib

import tensorflow as tf

from ..core import dtypes as _dtypes
from ..core.calls import refusing
from ..core.errors import BadArgumentTypeError, refused
from .library import handle_of

# The core's dtypes (by their NumPy names, which TensorFlow shares), in the core's order,
# and their codes, for the mask of a call's dtypes that ranks compare.
CODES = {tf.as_dtype(name): code for code, name in _dtypes.NAMES.items()}
SUPPORTED = tuple(CODES)
# The ones the reductions take (bool is only moved).
REDUCED = tuple(tf.as_dtype(d) for d in _dtypes.REDUCED_CODES)


def tensors_of(values, what: str) -> dict[int, tf.Tensor]:
    """values' tensors by their place in the list, None skipped. IndexedSlices (embedding
    gradients) become dense: the reduction is over the whole variable either way, and a
    dense sum is exact and order-independent."""
    return {i: tensor_of(v, f"{what}[{i}]", i) for i, v in enumerate(values) if v is not None}


def by_dtype(tensors: dict[int, tf.Tensor], reduces: bool) -> dict[tf.DType, list[int]]:
    """The tensors' places grouped by dtype (first-seen order), each dtype checked."""
    groups: dict[tf.DType, list[int]] = {}
    for i, t in tensors.items():
        groups.setdefault(checked_dtype(t, reduces, i), []).append(i)
    return groups


def checked_dtype(tensor: tf.Tensor, reduces: bool, place: int = -1) -> tf.DType:
    """The tensor's dtype, one the call takes (reduces: a reduction's, which moves no bool)."""
    allowed = REDUCED if reduces else SUPPORTED
    if tensor.dtype not in allowed:
        names = ", ".join(d.name for d in allowed)
        what = "reduce" if reduces else "move"
        error = BadArgumentTypeError(
            f"ml_comm cannot {what} dtype {tensor.dtype.name}; supported: {names}"
        )
        raise refused(error, "MLC_REFUSED_DTYPE", place)
    return tensor.dtype


def checking(team_id: int, kind: int):
    """The block in which a call checks its arguments, before it builds any op: what it
    raises there on this rank is told to the other ranks' matching op (core/calls.py's
    refusing), which would wait for this rank's otherwise; nothing where the team is not
    live (its ops fail on every rank alike)."""
    handle = handle_of(team_id)
    return contextlib.nullcontext() if handle is None else refusing(handle, kind)


def tensor_of(value, what: str, place: int = -1) -> tf.Tensor:
    """One argument as a tensor: BadArgumentTypeError where it is None or no tensor, saying
    `place`, its place in the call's list (-1: none), to the other ranks."""
    if value is None:
        error = BadArgumentTypeError(f"{what} is None, not a tensor")
        raise refused(error, "MLC_REFUSED_NONE", place)
    try:
        return tf.convert_to_tensor(value)
    except (TypeError, ValueError) as exc:
        error = BadArgumentTypeError(f"{what} is not a tensor: {exc}")
        raise refused(error, "MLC_REFUSED_NOT_ARRAY", place) from None
