"""NumPy arguments checked and described to the core as (pointer, count, shape) tensors.

Checks happen before anything is sent, so a bad call raises on every rank that
makes it and leaves the process usable.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np

from .._core import ffi, lib
from ..core import dtypes as _dtypes
from ..core.errors import BadArgumentError, BadArgumentTypeError, refused

# What to pass instead of a framework's array, by the module its class comes from.
_FRAMEWORK_HINTS = (
    (
        ("tensorflow", "keras"),
        " (for TensorFlow tensors, init ml_comm with framework='tensorflow')",
    ),
    (("torch",), " (a CPU torch tensor's .numpy() shares its memory: pass that)"),
    (("jax",), " (for JAX arrays, init ml_comm with framework='jax')"),
)


_DEVICE_HINT = (
    " (a CUDA array: gradients, average and broadcast take those, docs/gpu.md; for this call "
    "copy it to the host)"
)


def as_array(value, what: str, tensor: int = -1) -> np.ndarray:
    """`value` to be read: an array, or a NumPy scalar (np.float32(1), a Keras
    optimizer's iterations.numpy()) as a 0-d array. tensor: its place in the call's list."""
    if isinstance(value, np.generic):
        return np.asarray(value)
    if not isinstance(value, np.ndarray):
        module = type(value).__module__
        hint = next((h for prefixes, h in _FRAMEWORK_HINTS if module.startswith(prefixes)), "")
        if getattr(value, "is_cuda", False) or hasattr(value, "__cuda_array_interface__"):
            hint = _DEVICE_HINT
        error = BadArgumentTypeError(
            f"{what} must be a numpy.ndarray, got {type(value).__name__}{hint}"
        )
        none = value is None
        raise refused(error, "MLC_REFUSED_NONE" if none else "MLC_REFUSED_NOT_ARRAY", tensor)
    return value


def in_place_array(value, what: str, tensor: int = -1, reduces: bool = False) -> np.ndarray:
    """An array the core may write its result into: supported dtype (one it reduces, for a
    reduction), writeable, contiguous (tensor: its place in the call's list)."""
    if isinstance(value, np.generic):
        error = BadArgumentTypeError(
            f"{what} is a NumPy scalar ({type(value).__name__}), which cannot be changed in "
            "place; pass a 0-d array instead (numpy.array(x)) and read the result from it"
        )
        raise refused(error, "MLC_REFUSED_NOT_ARRAY", tensor)
    arr = as_array(value, what, tensor)
    dtype_code(arr.dtype, reduces, tensor)
    if not arr.flags.writeable:
        error = BadArgumentError(
            f"{what} is read-only; ml_comm writes the result into it in place "
            "(pass a writeable copy, e.g. array.copy())"
        )
        raise refused(error, "MLC_REFUSED_VALUE", tensor)
    if not (arr.flags.c_contiguous or arr.flags.f_contiguous):
        error = BadArgumentError(
            f"{what} is not contiguous; ml_comm reduces it in place as one block "
            "(pass numpy.ascontiguousarray(array) and use the returned array)"
        )
        raise refused(error, "MLC_REFUSED_VALUE", tensor)
    return arr


def dtype_code(dtype: np.dtype, reduces: bool, tensor: int = -1) -> int:
    """The core's code of a tensor's dtype (core/dtypes.code_of), its error naming the
    tensor's place in the call's list to the other ranks."""
    try:
        return _dtypes.code_of(dtype, reduces)
    except BadArgumentTypeError as error:
        raise refused(error, "MLC_REFUSED_DTYPE", tensor) from None


def in_memory_order(arr: np.ndarray) -> np.ndarray:
    """A contiguous array as its elements lie in memory: a Fortran-ordered one as its .T."""
    return arr if arr.flags.c_contiguous else arr.T


def buffer(arr: np.ndarray):
    """cffi view of a contiguous array's memory."""
    return ffi.from_buffer(in_memory_order(arr))


@functools.lru_cache(maxsize=4096)
def dims_digest(dims: tuple[int, ...]) -> int:
    """mlc_shape_digest of these dimensions (the same on every rank for the same dims)."""
    return lib.mlc_shape_digest(len(dims), ffi.new("int64_t[]", dims) if dims else ffi.NULL)


def shape_digest(arr: np.ndarray) -> int:
    """The core's digest of the array's dimensions in the order its elements lie in the
    memory `buffer` gives (a Fortran-ordered array's reversed): ranks compare it."""
    return dims_digest(in_memory_order(arr).shape)


def tensor_list(arrays: Sequence[np.ndarray], sources: Sequence[np.ndarray] | None = None):
    """An mlc_tensor[] over the arrays (outputs) and, optionally, their sources (inputs);
    returns (tensors, keep): keep must outlive every use of tensors."""
    tensors = ffi.new("mlc_tensor[]", max(len(arrays), 1))
    keep = []
    for i, arr in enumerate(arrays):
        mem = in_memory_order(arr)  # writeability was checked by the caller
        buf = ffi.from_buffer(mem)
        keep.append(buf)
        tensors[i].data = buf
        tensors[i].count = arr.size
        tensors[i].shape = dims_digest(mem.shape)
        if sources is not None:
            src = buffer(sources[i])
            keep.append(src)
            tensors[i].source = src
    return tensors, keep


def group_by_dtype(arrays: Sequence[np.ndarray], reduces: bool) -> dict[np.dtype, list[int]]:
    """List indices per dtype, in order of first appearance (TypeError for a dtype the
    core cannot move, or with reduces, cannot reduce)."""
    groups: dict[np.dtype, list[int]] = {}
    for i, arr in enumerate(arrays):
        dtype_code(arr.dtype, reduces, i)
        groups.setdefault(arr.dtype, []).append(i)
    return groups
