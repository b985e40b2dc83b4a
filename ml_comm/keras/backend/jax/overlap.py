"""Keras's JAX train step with the average overlapping backprop.

Keras's `JAXTrainer.train_step` takes the gradients of `compute_loss_and_updates` with
`jax.value_and_grad` and hands them to the optimizer; averaged there, after backprop,
the reduction adds its whole time to the step. Here, while the step is traced, its start
opens one group of the core over the model's trainable weights, each weight goes into the
forward pass through an identity whose backward rule submits its gradient to the group,
and the hooked `apply` (backend.average) waits for the group: XLA runs each submit where
backprop produces that gradient, so the core reduces the leading segments while backprop
computes the rest (ml_comm/jax/step.py, ml_comm/jax/ffi/overlap.cc).

A step is armed only where the plain path would average the same list once: a hooked
optimizer on a synchronous team, its first update's broadcast done, no gradient
accumulation, more than one rank, the FFI handlers loaded, and trainable weights of one
dtype the core reduces; every input of that choice is the same on ranks that train one
model, and it is made once per trace. Where `apply` gets other gradients than backprop's
(an optimizer that changes them in its `stateless_apply`), the group is waited for and discarded and
`apply` averages what it got, as the plain path does; the reason is printed once.
"""

from __future__ import annotations

import functools
import sys
import threading

from .... import api as mc
from ....jax import step as overlap_step
from ...apply import overlap_team

_local = threading.local()  # .step: the step being traced on this thread, and its model
_said: set[str] = set()


def install(patches, overlap_backprop: bool) -> None:
    if not overlap_backprop:
        return
    from keras.src.backend.jax.trainer import JAXTrainer

    patches.replace(JAXTrainer, "train_step", _armed(JAXTrainer.train_step))
    patches.replace(
        JAXTrainer, "compute_loss_and_updates", _routed(JAXTrainer.compute_loss_and_updates)
    )


def forget() -> None:
    """finalize: the notices may be said again in the next session."""
    _said.clear()


def active(team: int):
    """The armed step being traced on this thread for `team`, or None."""
    armed = getattr(_local, "step", None)
    return armed if armed is not None and armed.team == team else None


class _Armed:
    """A train step of `model` being traced with its group (step.OverlappedStep)."""

    def __init__(self, model, team: int, step: overlap_step.OverlappedStep):
        self.model, self.team, self.step = model, team, step
        self.routed = False  # the forward got the routed weights (once per step)

    def finish(self, grads: list) -> list:
        if self.step.is_backprops(grads):
            return self.step.wait(grads)
        _say_once(
            "the gradients given to the optimizer are not backprop's own (the train step "
            "changed them), so they are averaged after backprop"
        )
        self.step.wait(self.step.submitted_or_zeros())  # the group ends alike on every rank
        return mc.gradients(grads, self.team)


def _armed(original):
    @functools.wraps(original)
    def train_step(self, state, data):
        armed = _arm(self, state[0])
        if armed is None:
            return original(self, state, data)
        _local.step = armed
        try:
            result = original(self, state, data)
            if not armed.step.waited:  # apply was not reached through the hook
                armed.step.wait(armed.step.submitted_or_zeros())
            return result
        finally:
            _local.step = None

    return train_step


def _routed(original):
    @functools.wraps(original)
    def compute_loss_and_updates(self, trainable_variables, *args, **kwargs):
        armed = getattr(_local, "step", None)
        if armed is not None and armed.model is self and not armed.routed:
            armed.routed = True
            trainable_variables = [
                armed.step.route(k, v) for k, v in enumerate(trainable_variables)
            ]
        return original(self, trainable_variables, *args, **kwargs)

    return compute_loss_and_updates


def _arm(model, trainable_values) -> _Armed | None:
    from keras.src.backend.jax.trainer import JAXTrainer

    if type(model).compute_loss_and_updates is not JAXTrainer.compute_loss_and_updates:
        return None  # a model's own: its forward may not see the routed weights
    team = overlap_team(model)
    if team is None:
        return None
    team_ids = getattr(mc.session().backend, "team_ids", None)
    values = list(trainable_values)
    if team_ids is None or not overlap_step.overlappable(values):
        return None
    return _Armed(model, team, overlap_step.OverlappedStep(team_ids[team], values))


def _say_once(text: str) -> None:
    if text not in _said:
        _said.add(text)
        print(f"ml_comm.keras: {text}", file=sys.stderr, flush=True)
