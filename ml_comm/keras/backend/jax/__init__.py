"""The Keras hook on Keras' JAX backend: gradients through ml_comm's JAX backend (init's
framework="jax": XLA custom calls inside the compiled step, see ml_comm/jax), so a
model's jit_compile stays on; in Keras's own train step each gradient is submitted as
backprop produces it, so that the average overlaps backprop (overlap.py), elsewhere one
custom call per update averages in `apply`. Weights are broadcast eagerly before
the first compiled step (fit's start, train_on_batch's first call): the step's state is
read from the variables before it runs."""

from __future__ import annotations

import numpy as np

from .... import api as mc
from .... import jax as binding
from ....core.errors import MLCommError, StateError
from .. import accumulation
from ..errors import from_runtime_error
from . import overlap
from .overlap import forget, install  # noqa: F401  (the backend protocol's)

FRAMEWORK = "jax"
KEEPS_JIT = True
BROADCAST_IN_TRACE = False


def count_step(team: int) -> None:
    """Steps are not counted on this backend (a pipelined team's requests carry none)."""


def average(grads: list, team: int) -> list:
    armed = overlap.active(team)
    if armed is not None:  # submitted during backprop: wait for them
        return armed.finish(grads)
    return mc.gradients(grads, team)


def accumulate_then_average(optimizer, team, steps: int, grads: list, variables) -> list:
    return accumulation.accumulate_then_average(average, optimizer, team, steps, grads, variables)


def is_eager(grads) -> bool:
    return not binding.is_traced([g for g in grads if g is not None])


def to_numpy(value) -> np.ndarray:
    import keras

    return np.asarray(keras.ops.convert_to_numpy(value))


def broadcast_values(values: list, root: int, team: int) -> list:
    import keras

    return mc.broadcast([keras.ops.convert_to_tensor(v) for v in values], root, team)


def sync_before_first_update(optimizer, state, grads, variables, broadcast_eagerly):
    raise StateError(
        "ml_comm.keras: the first update of this optimizer is being traced (jax.jit) before "
        "rank 0's weights and the optimizer's state were broadcast; the compiled step "
        "reads them before it runs. Once the optimizer is built, call "
        "ml_comm.keras.broadcast_weights(model) (with optimizer=... for one the model was "
        "not compiled with) before the first compiled step; fit and train_on_batch do it "
        "themselves"
    )


def batches_of(x) -> int | None:
    return None


def first_batches(x, count: int):
    raise TypeError(f"no datasets to cut on the JAX backend: {type(x).__name__}")


def failed_step_error(exc: BaseException) -> MLCommError | None:
    """The MLCommError behind a failed compiled step (the custom call's status), else None.
    A group the step left open (it failed inside XLA, between its submits and its wait)
    is cancelled first, so that the other ranks' steps fail now, naming this rank."""
    binding.handler.abandon_steps()
    return from_runtime_error(exc)
