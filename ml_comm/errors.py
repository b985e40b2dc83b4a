"""The exceptions ml_comm raises: one class per kind of failure, each an MLCommError
([Troubleshooting](troubleshooting.md) lists their messages).

Every class is an MLCommError (a RuntimeError) with `status`, the core's code of its kind::

    try:
        grads = mc.gradients(grads)
    except mc.MismatchError as e:  # the ranks submitted different requests
        print(e.status, e)

With TensorFlow ops the error TensorFlow raises carries the kind too ([Errors](api.md#errors)).
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
    "MLCommError",
    "BadArgumentError",
    "BadArgumentTypeError",
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
