"""CUDA device arrays in the NumPy-style calls: CuPy arrays, PyTorch CUDA tensors, and any
array that exposes `__cuda_array_interface__`. They are described to the core as device
tensors (csrc/team/staged.c stages them through pinned host memory); results are arrays of
the caller's library on the same device (CuPy and PyTorch; other libraries pass out=).

What a rank finds wrong with its own arrays (a host array among device arrays, one that is
not contiguous) travels with its call, so the call fails on every rank, naming it; the core
finds memory that is not on a device and arrays on two devices the same way.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._core import ffi, lib
from ..core import dtypes as _dtypes
from ..core.errors import BadArgumentError, BadArgumentTypeError
from ..core.status import ERR_LEN, check
from .buffers import dims_digest

_CODE_BY_NAME = {name: code for code, name in _dtypes.NAMES.items()}
# The CUstream handles of __cuda_array_interface__'s stream values 1 and 2.
_LEGACY_STREAM, _PER_THREAD_STREAM = 1, 2


@dataclass(frozen=True)
class DeviceArray:
    array: object
    pointer: int
    shape: tuple[int, ...]
    code: int  # the core's dtype
    contiguous: bool
    stream: int  # the CUstream the caller's work on it is queued on (0: legacy default)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))


def view(x) -> DeviceArray | None:
    """x as a device array; None where it is none (a host array, a scalar, a list)."""
    if type(x).__module__.startswith("torch"):
        return _torch_view(x) if getattr(x, "is_cuda", False) else None
    try:
        cai = x.__cuda_array_interface__
    except (AttributeError, TypeError, RuntimeError):
        return None
    shape = tuple(int(d) for d in cai["shape"])
    dtype = np.dtype(cai["typestr"])
    strides = cai.get("strides")
    contiguous = strides is None or tuple(strides) == _c_strides(shape, dtype.itemsize)
    stream = cai.get("stream")
    return DeviceArray(
        x,
        int(cai["data"][0]),
        shape,
        _code(dtype.name, x),
        contiguous,
        0 if stream is None else int(stream),
    )


def _torch_view(x) -> DeviceArray:
    import torch

    return DeviceArray(
        x,
        int(x.data_ptr()),
        tuple(int(d) for d in x.shape),
        _code(str(x.dtype).removeprefix("torch."), x),
        bool(x.is_contiguous()),
        int(torch.cuda.current_stream(x.device).cuda_stream),
    )


def _code(name: str, x) -> int:
    code = _CODE_BY_NAME.get(name)
    if code is None:
        raise BadArgumentTypeError(f"ml_comm does not move {name} arrays ({type(x).__name__})")
    return code


def _c_strides(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    strides, step = [], itemsize
    for d in reversed(shape):
        strides.append(step)
        step *= max(d, 1)
    return tuple(reversed(strides))


def holds_device_array(values) -> bool:
    """Some value that is not a NumPy array or scalar is a device array."""
    return any(not isinstance(v, (np.ndarray, np.generic)) and view(v) is not None for v in values)


def _views(values) -> tuple[list[DeviceArray | None], int, int]:
    """Each value's view, and this rank's fault (MLC_DEVICE_FAULT_*) with the first value
    that has it: a host array among device arrays, or a device array not contiguous."""
    views = [view(v) for v in values]
    for i, v in enumerate(views):
        if v is None:
            return views, lib.MLC_DEVICE_FAULT_HOST_ARRAY, i
        if not v.contiguous:
            return views, lib.MLC_DEVICE_FAULT_NOT_CONTIGUOUS, i
    return views, lib.MLC_DEVICE_FAULT_NONE, -1


def _empty_like(v: DeviceArray):
    """A result of the caller's library, on the array's device."""
    module = type(v.array).__module__.split(".")[0]
    if module == "torch":
        import torch

        return torch.empty_like(v.array, memory_format=torch.contiguous_format)
    if module == "cupy":
        import cupy

        return cupy.empty_like(v.array, order="C")
    raise BadArgumentTypeError(
        f"ml_comm makes results for CuPy arrays and PyTorch tensors; for "
        f"{type(v.array).__name__}, pass out=[...] (arrays of the gradients' shapes and dtypes)"
    )


def _tensors(targets: list[DeviceArray], sources: list[DeviceArray] | None):
    tensors = ffi.new("mlc_tensor[]", max(len(targets), 1))
    for i, t in enumerate(targets):
        tensors[i].data = ffi.cast("void *", t.pointer)
        tensors[i].count = t.size
        tensors[i].shape = dims_digest(t.shape)
        if sources is not None and sources[i].pointer != t.pointer:
            tensors[i].source = ffi.cast("void *", sources[i].pointer)
    return tensors


def _run(call, handle, groups, targets, sources, fault, at, what, err, *args) -> None:
    """One request of the core per dtype (parts of one call), or, with a fault, one that
    fails on every rank."""
    if fault:
        rc = call(handle, ffi.NULL, 0, next(iter(groups), 0), *args, 0, 1, 0, 0,
                  fault, at, err, ERR_LEN)  # fmt: skip
        check(rc, what, err)
        return
    bits = sum(1 << code for code in groups)
    for part, (code, idx) in enumerate(groups.items()):
        stream = targets[idx[0]].stream
        tensors = _tensors(
            [targets[i] for i in idx], [sources[i] for i in idx] if sources else None
        )
        rc = call(handle, tensors, len(idx), code, *args, part, len(groups), bits, stream,
                  0, -1, err, ERR_LEN)  # fmt: skip
        check(rc, what, err)


def _by_dtype(views: list[DeviceArray | None]) -> dict[int, list[int]]:
    groups: dict[int, list[int]] = {}
    for i, v in enumerate(views):
        if v is not None:
            groups.setdefault(v.code, []).append(i)
    return groups


def gradients(handle, err, grads, out, op: int) -> list:
    """The gradients averaged (op) over the ranks into `out`, or new arrays of their library."""
    views, fault, at = _views(grads)
    outputs, targets = None, []  # a fault's call fails on every rank: no results
    if fault == lib.MLC_DEVICE_FAULT_NONE:
        for v in views:
            if not lib.mlc_dtype_is_reducible(v.code):
                raise BadArgumentTypeError(
                    f"gradients: {_dtypes.NAMES[v.code]} arrays are not reduced"
                )
        outputs = _checked_out(out, views) if out is not None else [_empty_like(v) for v in views]
        targets = [view(o) for o in outputs]
    _run(lib.mlc_team_allreduce_device, handle, _by_dtype(views), targets, views, fault, at,
         "gradients", err, op)  # fmt: skip
    return outputs


def _checked_out(out, views: list[DeviceArray]) -> list:
    if not isinstance(out, (list, tuple)) or len(out) != len(views):
        raise BadArgumentError(f"gradients: out must be a list of {len(views)} device arrays")
    for i, (o, v) in enumerate(zip(out, views)):
        t = view(o)
        if t is None or t.shape != v.shape or t.code != v.code or not t.contiguous:
            raise BadArgumentError(
                f"gradients: out[{i}] must be a contiguous device array of shape {v.shape} and "
                f"dtype {_dtypes.NAMES[v.code]}"
            )
    return list(out)


def reduce_in_place(handle, err, array, op: int, what: str):
    views, fault, at = _views([array])
    _run(lib.mlc_team_allreduce_device, handle, _by_dtype(views), views, None, fault, at, what,
         err, op)  # fmt: skip
    return array


def broadcast(handle, err, arrays: list, root: int) -> None:
    views, fault, at = _views(arrays)
    _run(lib.mlc_team_broadcast_device, handle, _by_dtype(views), views, None, fault, at,
         "broadcast", err, root)  # fmt: skip
