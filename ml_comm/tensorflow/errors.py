"""ml_comm's error classes for the errors of its TensorFlow ops.

An op that fails sets a TensorFlow status whose code tells the kind (ops/errors.cc: ranks
that disagree FailedPrecondition, a bad argument or bad values InvalidArgument, a stall
DeadlineExceeded, a lost rank Unavailable, a cancelled request Cancelled) and whose
payload holds the core's status. TensorFlow raises it as its own class (e.g.
tf.errors.FailedPreconditionError), the payload in `experimental_payloads`; `typed` turns
it into an exception of both that class and ml_comm's class of the status
(core/errors.py), so that `except tf.errors.FailedPreconditionError` and
`except ml_comm.MismatchError` both catch it. ml_comm's calls that run ops eagerly raise
it so (`raising_typed`), as does the Keras hook for its training steps; inside a
tf.function, TensorFlow raises the op's error itself, and `typed(error)` converts it.
"""

from __future__ import annotations

import functools

import tensorflow as tf

from ..core.errors import MLCommError
from ..core.status import error_class
from . import library

# (ml_comm's class, TensorFlow's class) -> the class of both
_BOTH: dict[tuple[type, type], type] = {}


def status_of(exc: BaseException) -> int | None:
    """The core's status an error of ml_comm's ops carries, or None (not one of them)."""
    key = library.status_payload()
    while isinstance(exc, tf.errors.OpError):
        for name, value in exc.experimental_payloads.items():
            if _text(name) == key:
                return int(_text(value))
        # tf.compat.v1.Session.run raises a copy of the op's error without its payloads,
        # from within its handler: the op's own error is the copy's context.
        exc = exc.__context__
    return None


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def typed(exc: BaseException) -> BaseException:
    """`exc` as an instance of ml_comm's class of its status too (an error of ml_comm's ops;
    any other exception, or one typed already, is returned as it is)."""
    status = status_of(exc)
    if status is None or isinstance(exc, MLCommError):
        return exc
    kind, tf_class = error_class(status), type(exc)
    both = _BOTH.get((kind, tf_class))
    if both is None:
        both = type(kind.__name__, (kind, tf_class), {"__module__": kind.__module__})
        _BOTH[(kind, tf_class)] = both
    converted = both.__new__(both, exc.message)
    tf_class.__init__(converted, exc.node_def, exc.op, exc.message, exc.experimental_payloads)
    return converted.with_traceback(exc.__traceback__)


def raising_typed(function):
    """Decorator: errors of ml_comm's ops that `function` runs (eagerly) come out typed."""

    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        try:
            return function(*args, **kwargs)
        except tf.errors.OpError as exc:
            converted = typed(exc)
            if converted is exc:
                raise
            raise converted from None

    return wrapper
