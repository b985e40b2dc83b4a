"""Asynchronous NumPy averages: submitting fused requests to a team, waiting for them,
and turning failed ones into one exception of the first failure's kind (core/errors.py)."""

from __future__ import annotations

import numpy as np

from .._core import ffi, lib
from ..core import checks
from ..core import dtypes as _dtypes
from ..core.layout import fused_order
from ..core.status import ERR_LEN, check, error, text
from ..faults import stop
from .buffers import tensor_list


def submit_average(
    handle,
    outputs: list[np.ndarray],
    inputs: list[np.ndarray],
    in_place=False,
    part=0,
    nparts=1,
    call_dtypes=0,
):
    """Start an asynchronous average of arrays of one dtype; returns (request, keep).

    part/nparts: this request's place among the call's requests (one per dtype), and
    call_dtypes the bits of the call's dtypes, so that ranks whose lists split into
    different dtypes fail alike, naming them (csrc/agree/)."""
    tensors, keep = tensor_list(outputs, None if in_place else inputs)
    out = ffi.new("mlc_request **")
    rc = lib.mlc_team_allreduce_async_part(
        handle,
        tensors,
        len(outputs),
        _dtypes.CODES[outputs[0].dtype],
        lib.MLC_OP_AVERAGE,
        part,
        nparts,
        call_dtypes,
        ffi.NULL,
        ffi.NULL,
        out,
    )
    check(rc, "gradients")
    return out[0], (tensors, keep)


def average_blocking(
    handle, err, outputs: list[np.ndarray], inputs: list[np.ndarray], order=None
) -> None:
    """One blocking average: a small one runs on this thread, with no hand-off to the
    team's threads (about as long as the whole reduction below a few KiB). order: the
    gradient list index of each tensor, for the tensors an error names."""
    tensors, _keep = tensor_list(outputs, inputs)
    code = _dtypes.CODES[outputs[0].dtype]
    rc = lib.mlc_team_allreduce_part(
        handle, tensors, len(outputs), code, lib.MLC_OP_AVERAGE, 0, 1, 1 << code, err, ERR_LEN
    )
    if rc != lib.MLC_OK:
        raise error(
            rc, "gradients failed: " + checks.name_tensors(text(err), rc, order, "gradients")
        )


def average_groups(handle, inputs, groups, outputs, err=None) -> None:
    """Synchronous: the average of inputs into outputs (allocated by the caller), one fused
    request per dtype. One dtype with `err` given: one blocking call; else all requests in
    flight at once (and a NaN/Inf report names the gradients by their list index)."""
    if err is not None and len(groups) == 1:
        idx = next(iter(groups.values()))
        order = fused_order([inputs[i].ndim for i in idx], idx)
        average_blocking(
            handle, err, [outputs[i] for i in order], [inputs[i] for i in order], order
        )
        return
    requests = []
    orders = []
    keep = []
    try:
        for part, idx in enumerate(groups.values()):
            order = fused_order([inputs[i].ndim for i in idx], idx)
            request, k = submit_average(
                handle,
                [outputs[i] for i in order],
                [inputs[i] for i in order],
                part=part,
                nparts=len(groups),
                call_dtypes=_dtypes.bits(groups),
            )
            keep.append(k)
            requests.append(request)
            orders.append(order)
    finally:
        failed = wait_all(requests, orders)
    raise_failed(failed)


def empty_call(handle, err) -> None:
    """A gradients call with no arrays (an empty list): still a call that every rank
    makes, so that a rank whose list is empty where the others' is not fails with them
    at this call, instead of leaving them to pair this call with its next one."""
    rc = lib.mlc_team_allreduce_part(
        handle, ffi.NULL, 0, lib.MLC_FLOAT32, lib.MLC_OP_AVERAGE, 0, 1, 0, err, ERR_LEN
    )
    if rc != lib.MLC_OK:
        raise error(rc, "gradients failed: " + text(err))


def average_now(handle, arrays: list[np.ndarray]) -> list[np.ndarray]:
    outputs = [np.empty(a.shape, a.dtype) for a in arrays]
    request, _keep = submit_average(handle, outputs, arrays)
    wait_one(request)
    return outputs


def wait_one(request) -> None:
    raise_failed(wait_all([request]))


def raise_failed(failed: dict[str, int]) -> None:
    """Raise the failures wait_all found, if any, as one error of the first one's kind."""
    if failed:
        raise error(next(iter(failed.values())), "gradients failed: " + "; ".join(failed))


def wait_all(requests, orders=None) -> dict[str, int]:
    """Wait for and free the requests; their distinct error messages, each with its
    status, in the requests' order. orders[k]: the gradient list index of each tensor of
    request k, for NaN/Inf reports."""
    failed: dict[str, int] = {}
    for k, req in enumerate(requests):
        status = lib.mlc_request_wait(req)
        if status != lib.MLC_OK:
            order = orders[k] if orders is not None else None
            # the parts of a failed call repeat its message
            failed.setdefault(checks.request_error(req, status, order, "gradients"), status)
        stop.note_request(req)
        lib.mlc_request_free(req)
    return failed
