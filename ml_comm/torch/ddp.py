"""A DistributedDataParallel communication hook over ml_comm's core.

DDP groups gradients into buckets and calls the hook with each bucket as backprop fills
it, in bucket order (DDP launches its buckets in index order on every rank, which fits
ml_comm's rule that every rank submits a team's requests in the same order). The hook
submits the bucket's flat buffer to the team as one asynchronous in-place average
(arrays/requests.py: mlc_team_allreduce_async_part) and returns a torch Future at once;
one waiting thread per averager waits for the requests in submission order and
completes each Future with its bucket, or with the request's MLCommError (ranks whose
buckets differ fail on every rank, naming what each submitted). Each submit is a call
of the team (core/calls.py), signed with the thread's step mark and the bucket's place
in the step, so a rank that left a marked step early fails the others' buckets of that
step instead of pairing with them. The buffer's memory is handed over without a copy
for CPU tensors; others go through a host copy.

DDP's reducer reads a Future's value in C++, where an exception set on it from Python
is a value that is no tensor ("Unable to cast ... to Tensor"). The hook hands DDP a
Future chained to it whose callback raises the error: torch fails that Future in C++,
and `backward()` raises a RuntimeError that names the error's class and says what it
says (torch keeps the text of a callback's error, not its class). An averager belongs
to the session it was made in: after `finalize` its team is gone, and its buckets fail
with StateError (a new session needs a new hook: DDP takes one per model).
"""

from __future__ import annotations

import contextlib
import queue
import threading

import ml_dtypes
import numpy as np
import torch

from .. import api as mc
from .._core import lib
from ..arrays.requests import submit_average, wait_all
from ..core.dtypes import code_of
from ..core.errors import BadArgumentError, BadArgumentTypeError, MLCommError, StateError
from ..core.session import is_pipelined
from ..core.status import error


def _host(tensor: torch.Tensor) -> np.ndarray:
    """A CPU tensor's own memory as a NumPy array (bfloat16 as ml_dtypes' type)."""
    if tensor.dtype == torch.bfloat16:
        return tensor.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return tensor.numpy()


def _checked(tensor) -> tuple[torch.Tensor, np.ndarray]:
    """(the tensor on the host, its memory as an array), or BadArgumentError naming what
    the core cannot average in place."""
    if not isinstance(tensor, torch.Tensor):
        raise BadArgumentTypeError(
            f"BucketAverager.submit takes a torch.Tensor, got {type(tensor).__name__}"
        )
    if not tensor.is_contiguous():
        raise BadArgumentError(
            "BucketAverager.submit's tensor is not contiguous (it is averaged in place, in "
            "its own memory): pass a contiguous one"
        )
    try:
        on_host = tensor if tensor.device.type == "cpu" else tensor.cpu()
        array = _host(on_host.detach())
    except (TypeError, RuntimeError) as exc:  # a dtype NumPy lacks, a conjugated view
        raise BadArgumentTypeError(
            f"BucketAverager.submit cannot hand a {tensor.dtype} tensor to the core: {exc}"
        ) from exc
    code_of(array.dtype, reduces=True)  # names the dtypes it takes
    return on_host, array


class BucketAverager:
    """Averages flat gradient buffers over the ranks on one team, asynchronously, in the
    order they are submitted. `register_ddp_hook` makes one per model."""

    def __init__(self, team: int = 0):
        session = mc.session()
        self.handle = session.team(team)
        config = session.configs[team]
        if is_pipelined(config.ksteps, config.max_steps):
            raise BadArgumentError(
                f"team {team} is pipelined (config_team ksteps < max_steps); DDP applies each "
                "step's own average: use a synchronous team for the DDP hook"
            )
        self.team = team
        self._made_in = session
        self._step = 0  # the step of the last bucket (0: unmarked)
        self._pending: queue.Queue = queue.Queue()
        self._waiter = threading.Thread(target=self._wait_in_order, daemon=True)
        self._waiter.start()

    def submit(self, tensor: torch.Tensor) -> torch.futures.Future:
        """Start averaging `tensor` (1-D, contiguous) in place; the Future's value is it."""
        return self._submit(tensor, None)

    def _submit(self, tensor, bucket_index: int | None) -> torch.futures.Future:
        future: torch.futures.Future = torch.futures.Future()
        try:
            self._check_session()
            # A call of the team, as the NumPy API's: signed with the thread's step mark
            # (ml_comm.step) and the bucket's place in it, so that a rank that left a step
            # early fails the others' buckets of that step instead of pairing its next
            # step's with them; and a tensor this rank alone finds wrong is told to the
            # others' matching request, which fails naming it. Not with the thread's name:
            # DDP runs the hook on whichever thread runs backward.
            calls = self._made_in.calls
            with (
                self._unmarked_step(calls, bucket_index),
                calls.calling(self.team, self.handle, lib.MLC_KIND_ALLREDUCE, named=False),
            ):
                on_host, array = _checked(tensor)
                request, keep = submit_average(self.handle, [array], [array], in_place=True)
        except MLCommError as exc:
            future.set_exception(exc)
            return future
        self._pending.put((request, keep, tensor, on_host, future))
        return future

    def _unmarked_step(self, calls, bucket_index: int | None):
        """The step a bucket outside any mark stands for, where this hook's buckets before
        it were marked: under DDP's Join, a rank whose data ran out calls the hook after
        its loop for each of the others' remaining backward passes, their marked steps
        after its last (a pass's first bucket is bucket 0). Elsewhere none."""
        mark = calls.thread_state.step
        if mark or bucket_index is None or not self._step:
            self._step = mark
            return contextlib.nullcontext()
        self._step += 1 if bucket_index == 0 else 0
        return calls.step(self._step)

    def _check_session(self) -> None:
        """StateError once the session this averager was made in has ended."""
        if not mc.is_initialized() or mc.session() is not self._made_in:
            raise StateError(
                f"this DDP hook's ml_comm session has ended (finalize), and team {self.team} "
                "with it: the model's buckets cannot be averaged. Train before finalize, "
                "or wrap the model in a new DistributedDataParallel and register a new hook "
                "after init"
            )

    def _wait_in_order(self) -> None:
        while True:
            item = self._pending.get()
            if item is None:
                return
            request, _keep, tensor, on_host, future = item
            failed = wait_all([request])  # the GIL is released while the core waits
            if failed:
                message, status = next(iter(failed.items()))
                future.set_exception(error(status, "DDP bucket average failed: " + message))
                continue
            if on_host is not tensor:
                tensor.copy_(on_host)
            future.set_result(tensor)

    def close(self) -> None:
        """Stop the waiting thread once every submitted bucket is done."""
        self._pending.put(None)
        self._waiter.join()


def _hook(averager: BucketAverager, bucket):
    """DDP's comm hook: returns a torch.futures.Future of the averaged bucket. (No return
    annotation: DDP compares it with the type itself, and this module's annotations are
    strings.)"""
    return averager._submit(bucket.buffer(), bucket.index()).then(_value)


def _value(future: torch.futures.Future) -> torch.Tensor:
    """The bucket, or the averager's error raised (see the module's docstring)."""
    return future.value()


def register_ddp_hook(model: torch.nn.parallel.DistributedDataParallel, team: int = 0):
    """Make `model` (a DistributedDataParallel) average its gradient buckets with ml_comm
    on `team` instead of its process group's allreduce. Call once, after ml_comm.init and
    before the first backward pass. Returns the BucketAverager."""
    if not isinstance(model, torch.nn.parallel.DistributedDataParallel):
        raise TypeError(
            f"register_ddp_hook takes a torch.nn.parallel.DistributedDataParallel, "
            f"got {type(model).__name__}"
        )
    averager = BucketAverager(team)
    model.register_comm_hook(averager, _hook)
    return averager
