"""Keras's torch train step with the average overlapping backprop.

Keras's `TorchTrainer.train_step` runs `loss.backward()` and then hands every weight's
`.grad` to `optimizer.apply`. Averaged there, after backprop, the reduction adds its
whole time to the step. Here each training step opens one keyed group of the core
(csrc/team/group.c) over the model's trainable weights, and each gradient is handed to
it from torch's post-accumulate-grad hook as soon as backprop has it, in place, so that
the core reduces the leading segments while backprop computes the rest. The hooked
`apply` (backend.average) then only waits for the group (an mlc_latch: the core's done
callbacks count down on its threads, the wait releases the GIL).

The layout is the core's (core/layout.py) plus one last tensor, the presence vector: 1
for each weight that has a gradient on this rank, 0 for one that has none (a weight the
loss did not use; its slot carries zeros). Averaged over the ranks it is 1 where every
rank had the gradient, 0 where none had, and between for a weight some ranks had a
gradient for: that fails on every rank alike, naming the weights, where averaging would
have mixed gradients with zeros. The group's arrival order does not matter (each tensor
names its slot), so ranks whose backprop runs in a different order still pair every
gradient with its own.

A step is armed only where the plain path would average the same list once: a hooked
optimizer on a synchronous team, its first update's broadcast done, no gradient
accumulation, more than one rank, every trainable weight a CPU tensor of one float
dtype, and the step not compiled (`jit_compile`); elsewhere `apply` averages as before.
Every input of that choice is the same on ranks that train one model. A step that raises
after its group opened cancels the group (the other ranks' step fails too, naming this
rank) and waits until the core no longer reads this rank's gradients.
"""

from __future__ import annotations

import functools
import threading
import weakref

import numpy as np
import torch

from .... import api as mc
from ...._core import ffi, lib
from ....arrays.buffers import dims_digest
from ....core import dtypes as _dtypes
from ....core.errors import MismatchError, StateError
from ....core.layout import fused_order
from ....core.status import ERR_LEN, check, error, text
from ...apply import overlap_team

GROUP_KEY = 1  # one open group per team at a time on this path
OVERLAPPED_DTYPES = (torch.float32, torch.float64)  # the presence vector's 0/1 averages exactly

_local = threading.local()  # .step: the armed step of this thread (backprop runs its hooks here)
_hooks: dict[int, tuple] = {}  # id(parameter) -> (weakref to it, its hook's handle)
_last_step: dict[int, int] = {}  # team -> the id of its last armed step
_overlapped = [0]  # steps whose gradients went through a keyed group, for tests


def install(patches, overlap_backprop: bool) -> None:
    if not overlap_backprop:
        return
    from keras.src.backend.torch.trainer import TorchTrainer

    patches.replace(TorchTrainer, "train_step", _armed(TorchTrainer.train_step))


def forget() -> None:
    """finalize: the parameters' hooks go, and the step ids start again."""
    for _, handle in _hooks.values():
        handle.remove()
    _hooks.clear()
    _last_step.clear()


def overlapped_steps() -> int:
    return _overlapped[0]


def active(team: int):
    """The armed step of this thread on `team`, or None."""
    step = getattr(_local, "step", None)
    return step if step is not None and step.team == team else None


def _armed(original):
    @functools.wraps(original)
    def train_step(self, data):
        step = _arm(self)
        if step is None:
            return original(self, data)
        _local.step = step
        try:
            return original(self, data)
        finally:
            _local.step = None
            step.close()

    return train_step


def _arm(model):
    """An OverlappedStep for this training step of `model`, or None (apply averages)."""
    team = overlap_team(model)
    if team is None or torch.compiler.is_compiling():  # jit_compile: torch.compile traces it
        return None
    variables = list(model.trainable_weights)
    params = [getattr(v, "value", None) for v in variables]
    if not params or not all(isinstance(p, torch.Tensor) for p in params):
        return None
    dtype = params[0].dtype
    if dtype not in OVERLAPPED_DTYPES or any(
        p.dtype != dtype or p.device.type != "cpu" or p.numel() == 0 for p in params
    ):
        return None
    for p in params:  # by id: a tensor's == compares values
        known_hook = _hooks.get(id(p))
        if known_hook is None or known_hook[0]() is not p:
            _hooks[id(p)] = (weakref.ref(p), p.register_post_accumulate_grad_hook(_on_gradient))
    step_id = _last_step.get(team, 0) + 1
    _last_step[team] = step_id
    return OverlappedStep(mc.session().team(team), team, variables, params, step_id)


def _on_gradient(param: torch.Tensor) -> None:
    step = getattr(_local, "step", None)
    if step is not None:
        step.arrived_in_backprop(param)


class OverlappedStep:
    """One training step's keyed group: the model's gradients and the presence vector."""

    def __init__(self, handle, team: int, variables: list, params: list, step_id: int):
        self.handle, self.team, self.variables, self.step_id = handle, team, variables, step_id
        n = len(params)
        self.dtype = params[0].dtype
        self.np_dtype = np.dtype(str(self.dtype).removeprefix("torch."))
        self.code = _dtypes.CODES[self.np_dtype]
        self.slot_of = [0] * n + [n]  # list index -> place in the layout; presence last
        for place, k in enumerate(fused_order([p.dim() for p in params], range(n))):
            self.slot_of[k] = place
        self.position = {id(p): k for k, p in enumerate(params)}
        self.params = params
        counts, shapes = [0] * (n + 1), [0] * (n + 1)
        for k, p in enumerate(params):
            counts[self.slot_of[k]] = p.numel()
            shapes[self.slot_of[k]] = dims_digest(tuple(p.shape))
        counts[n], shapes[n] = n, dims_digest((n,))
        self.counts = ffi.new("int64_t[]", counts)
        self.shapes = ffi.new("uint64_t[]", shapes)
        self.handed: list[torch.Tensor | None] = [None] * (n + 1)
        self.keep: list = []
        self.err = ffi.new("char[]", ERR_LEN)
        self.finished = False
        self.latch = lib.mlc_latch_create()
        if self.latch == ffi.NULL:
            raise MemoryError("ml_comm: no memory for a training step's wait")
        opener = ffi.new("int64_t *")
        rc = lib.mlc_team_group_open_part(
            handle, GROUP_KEY, n + 1, self.counts, self.shapes, ffi.NULL, self.code,
            lib.MLC_OP_AVERAGE, 0, 1, 1 << self.code, step_id, opener, self.err, ERR_LEN,
        )  # fmt: skip
        if rc != lib.MLC_OK:
            lib.mlc_latch_free(self.latch)
            check(rc, "gradients", self.err)
        self.opener = opener[0]

    def arrived_in_backprop(self, param: torch.Tensor) -> None:
        k = self.position.get(id(param))
        grad = param.grad
        if k is None or self.handed[k] is not None or grad is None:
            return
        if grad.dtype == self.dtype and grad.layout == torch.strided and grad.is_contiguous():
            self._hand_over(k, grad)  # in place; else finish() hands over a copy

    def _hand_over(self, k: int, tensor: torch.Tensor) -> None:
        array = tensor.detach().numpy()
        buf = ffi.from_buffer(array)
        self.keep.append(buf)  # the core reads and writes it until the done callback
        lib.mlc_latch_add(self.latch, 1)
        rc = lib.mlc_team_group_arrive_part(
            self.handle, GROUP_KEY, len(self.handed), self.counts, self.shapes, ffi.NULL, self.code,
            lib.MLC_OP_AVERAGE, 0, 1, 1 << self.code, self.slot_of[k], self.step_id,
            buf, buf, ffi.addressof(lib, "mlc_latch_done"), self.latch, self.err, ERR_LEN,
        )  # fmt: skip
        if rc != lib.MLC_OK:
            lib.mlc_latch_done(self.latch, lib.MLC_OK)  # not handed over: nothing to wait for
            check(rc, "gradients", self.err)
        self.handed[k] = tensor

    def finish(self, grads: list) -> list:
        """The averaged gradients (apply's list, which is the weights' .grad in order)."""
        n = len(self.params)
        if len(grads) != n:
            raise StateError(
                f"ml_comm.keras: the train step applied {len(grads)} gradients to a model "
                f"with {n} trainable weights"
            )
        present = np.zeros(n, self.np_dtype)
        for k, g in enumerate(grads):
            if g is None:
                if self.handed[k] is None:
                    self._hand_over(k, torch.zeros(self.params[k].shape, dtype=self.dtype))
                continue
            present[k] = 1
            if self.handed[k] is None:
                self._hand_over(k, g.detach().to(self.dtype).contiguous().clone())
            elif g is not self.handed[k]:
                raise StateError(
                    f"ml_comm.keras: {self.variables[k].path}'s gradient changed after "
                    "backprop handed it over"
                )
        presence = torch.from_numpy(present)
        self._hand_over(n, presence)
        status = lib.mlc_latch_wait(self.latch)
        self.finished = True
        if status != lib.MLC_OK:
            buf = ffi.new("char[]", 512)
            lib.mlc_team_last_error(self.handle, buf, 512)
            raise error(status, "gradients failed: " + (text(buf) or "the group failed"))
        _overlapped[0] += 1
        shares = presence.numpy()
        partial = [k for k in range(n) if shares[k] not in (0.0, 1.0)]
        if partial:
            names = ", ".join(self.variables[k].path for k in partial[:8])
            raise MismatchError(
                f"ml_comm.keras: some ranks have gradients for {names} and others none "
                f"(the loss used these weights on {shares[partial[0]] * 100:.0f} % of the "
                "ranks); every rank must compute gradients for the same weights"
            )
        return [None if shares[k] == 0.0 else t for k, t in enumerate(self.handed[:n])]

    def close(self) -> None:
        """After the step: a group left open (the step raised) is cancelled, and the core's
        use of this rank's tensors waited for."""
        if not self.finished:
            if self.opener:
                lib.mlc_team_group_cancel_opened(self.handle, self.opener)  # ERR_STATE: complete
            lib.mlc_latch_wait(self.latch)
            self.finished = True
        lib.mlc_latch_free(self.latch)
        self.latch = ffi.NULL
        self.keep.clear()
