"""A training step whose average overlaps backprop, in JAX's terms: the three custom calls
of ffi/overlap.cc, traced into one step (jax.jit) by a caller that knows the step's
weights (the Keras hook: ml_comm/keras/backend/jax/overlap.py).

    step = OverlappedStep(team_id, values)    # at the step's start: opens the group
    w = step.route(k, w)                      # each weight, before the forward uses it:
                                              # its gradient is submitted as backprop makes it
    grads = step.wait(grads)                  # the averages, once every gradient is in

`route` is an identity whose backward rule submits the weight's gradient (a
`jax.custom_vjp`), so XLA runs each submit where backprop produces that gradient and the
core reduces the leading segments while backprop computes the rest.
"""

from __future__ import annotations

from functools import partial

import jax
import numpy as np

from ..arrays.buffers import dims_digest
from ..core import dtypes as _dtypes
from ..core.layout import fused_order
from . import handler

_TICKET = jax.ShapeDtypeStruct((), np.int32)


def overlappable(values: list) -> bool:
    """Whether these weights' gradients can share one step's group: one dtype the core
    reduces, none empty."""
    if not values:
        return False
    dtype = np.dtype(values[0].dtype)
    if dtype not in _dtypes.CODES:
        return False
    return all(np.dtype(v.dtype) == dtype and int(np.prod(v.shape)) > 0 for v in values)


class OverlappedStep:
    """One traced step's group over `values` (the weights, in the caller's order)."""

    def __init__(self, team_id: int, values: list):
        self.team_id = np.int64(team_id)
        n = len(values)
        self.shapes = [tuple(v.shape) for v in values]
        self.slot_of = [0] * n  # list index -> place in the core's fused layout
        for place, k in enumerate(fused_order([len(s) for s in self.shapes], range(n))):
            self.slot_of[k] = place
        counts, digests = [0] * n, [0] * n
        for k, shape in enumerate(self.shapes):
            counts[self.slot_of[k]] = int(np.prod(shape))
            digests[self.slot_of[k]] = dims_digest(shape)
        self.dtype = np.dtype(values[0].dtype)
        code = _dtypes.CODES[self.dtype]
        self.submitted: list = [None] * n  # each weight's submit result (a tracer)
        self.waited = False
        self.ticket = jax.ffi.ffi_call(handler.STEP_OPEN, _TICKET, has_side_effect=True)(
            team_id=self.team_id,
            counts=np.array(counts, np.int64),
            shapes=np.array(digests, np.uint64).view(np.int64),
            dtype=np.int64(code),
        )

    def route(self, k: int, value):
        """`value` unchanged; in backprop, its gradient goes to the group."""
        return _route(self, k, value, self.ticket)

    def _submit(self, k: int, grad, ticket):
        out = jax.ffi.ffi_call(
            handler.STEP_SUBMIT,
            jax.ShapeDtypeStruct(grad.shape, grad.dtype),
            has_side_effect=True,
            input_output_aliases={0: 0},
        )(grad, ticket, team_id=self.team_id, slot=np.int64(self.slot_of[k]))
        self.submitted[k] = out
        return out

    def is_backprops(self, grads: list) -> bool:
        """Whether `grads` (one per weight, in order) hold backprop's submitted gradients
        themselves (a weight the loss does not use submits nothing: any value passes)."""
        return len(grads) == len(self.submitted) and all(
            s is None or g is s for g, s in zip(grads, self.submitted)
        )

    def submitted_or_zeros(self) -> list:
        """What backprop submitted, zeros for the weights it did not reach."""
        return [
            jax.numpy.zeros(shape, self.dtype) if s is None else s
            for s, shape in zip(self.submitted, self.shapes)
        ]

    def wait(self, grads: list) -> list:
        """The averaged gradients (`grads`: one per weight, in order; those backprop did
        not submit are handed over here)."""
        self.waited = True
        shapes = [jax.ShapeDtypeStruct(g.shape, g.dtype) for g in grads]
        return jax.ffi.ffi_call(
            handler.STEP_WAIT,
            shapes,
            has_side_effect=True,
            input_output_aliases={k + 1: k for k in range(len(grads))},
        )(
            self.ticket,
            *grads,
            team_id=self.team_id,
            slots=np.array(self.slot_of, np.int64),
        )


@partial(jax.custom_vjp, nondiff_argnums=(0, 1))
def _route(step: OverlappedStep, k: int, value, ticket):
    return value


def _route_forward(step, k, value, ticket):
    return value, ticket


def _route_backward(step, k, ticket, grad):
    return step._submit(k, grad, ticket), None


_route.defvjp(_route_forward, _route_backward)
