"""What the Keras hook does differently on each of Keras 3's backends, one folder per
backend as Keras keeps them (keras/src/backend/<name>/): the hook's common parts (apply,
fit, metrics, callbacks, teams) call `current()` and never import a framework.

Each backend module provides:

    FRAMEWORK                      init's framework: the session's backend for gradients
    KEEPS_JIT                      whether a model's jit_compile may stay on
    install(patches, overlap_backprop)
                                   what the backend replaces in Keras's trainer besides
                                   apply (torch: its train step, to overlap backprop)
    forget()                       finalize: undo what install set up besides the patches
    average(grads, team)           the list averaged over the ranks (None stays None)
    accumulate_then_average(optimizer, team, steps, grads, variables)
                                   gradient accumulation, averaged once per applied update
    sync_before_first_update(optimizer, state, grads, variables, broadcast)
                                   rank 0's weights before the first update; the gradients
    is_eager(grads)                whether the update runs now (not being traced)
    to_numpy(value)                a variable's or tensor's value as a NumPy array
    batches_of(x)                  a dataset's batches per epoch (-1 unknown), None: not one
    first_batches(x, count)        the dataset cut to its first `count` batches per epoch
    failed_step_error(exc)         a failed step: what it left open is ended; its error
                                   (a compiled step's) as ml_comm's class of
                                   its status (None: not ml_comm's, or typed already)

Only the module of the backend in use is imported: TensorFlow only on its own backend.
"""

from __future__ import annotations

import importlib
from types import ModuleType

import keras

from ...core.errors import MLCommError

NAMES = ("tensorflow", "jax", "torch")


def name() -> str:
    return keras.backend.backend()


def current() -> ModuleType:
    """The module of the Keras backend in use (KERAS_BACKEND)."""
    backend = name()
    if backend not in NAMES:
        raise MLCommError(
            f"ml_comm.keras runs on Keras' {', '.join(NAMES)} backends, but KERAS_BACKEND "
            f"is {backend!r}"
        )
    return importlib.import_module(f"{__name__}.{backend}")
