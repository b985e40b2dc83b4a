"""The exceptions ml_comm raises (defined in core/errors.py, which every layer uses).

Every class is an MLCommError (a RuntimeError) with `status`, the core's code of its kind::

    try:
        grads = mc.gradients(grads)
    except mc.MismatchError as e:  # the ranks submitted different requests
        print(e.status, e)

With TensorFlow ops the error TensorFlow raises carries the kind too (docs/api.md, "Errors").
"""

from .core.errors import (
    BadArgumentError,
    BadArgumentTypeError,
    MismatchError,
    MLCommError,
    MPIError,
    NonFiniteError,
    OutOfMemoryError,
    PeerLostError,
    SettingsError,
    StallError,
    StateError,
    ThreadLevelError,
    WireOverflowError,
)

__all__ = [
    "BadArgumentError",
    "BadArgumentTypeError",
    "MLCommError",
    "MPIError",
    "MismatchError",
    "NonFiniteError",
    "OutOfMemoryError",
    "PeerLostError",
    "SettingsError",
    "StallError",
    "StateError",
    "ThreadLevelError",
    "WireOverflowError",
]
