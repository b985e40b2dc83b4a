"""Exceptions raised by ml_comm: one class per kind of failure, under MLCommError.

Each kind of the core's `enum mlc_status` (csrc/include/ml_comm.h) has a class here,
which names its status by the enum's name; core/status.py maps the core's codes to these
classes (reading the codes through cffi) and is the only place that does. `error.status`
is the code, so that a retry policy can tell a disagreement of the ranks from a lost
rank. Errors that ml_comm finds itself, before the core is called (a call before init,
a team out of range, an unsupported dtype), take the class of the same kind. Setup
failures of no core kind (a second MPI library, a failed build of the TensorFlow ops)
are plain MLCommError, whose status is None.

Pure Python at import: settings.py imports this file, and the documentation build loads
settings.py without the compiled core.
"""

from __future__ import annotations

from typing import ClassVar


class MLCommError(RuntimeError):
    """ml_comm is in the wrong state for the call, or the communication failed.

    `status` is the core's status code of the error's kind (`enum mlc_status` in
    ml_comm.h; the class tells the kind), or None for a setup failure of no core kind.
    """

    status_name: ClassVar[str | None] = None  # the kind's name in enum mlc_status
    # Exception's own: tf.function's tracing (autograph) re-raises an error raised in the
    # traced code as its own class only when its __init__ is Exception's (else as a
    # StagingError), so that a bad argument inside a tf.function stays a BadArgumentError.
    __init__ = Exception.__init__

    @property
    def status(self) -> int | None:
        if self.status_name is None:
            return None
        # Imported here: this file must import without the compiled core (see above).
        from .._core import lib

        return getattr(lib, self.status_name)


class BadArgumentError(MLCommError, ValueError):
    """A call's argument is wrong on this rank (a team or root out of range, a read-only
    buffer, a bad option): raised before any data is sent (where the other ranks made the
    call, theirs fails too, naming this rank); the session stays usable."""

    status_name = "MLC_ERR_ARG"
    # What the other ranks' matching call names when this error refuses a call on this
    # rank (core/calls.py): a name of the core's enum mlc_refusal, and the place of the
    # tensor in the call's list (-1: none said). `refused` sets them.
    refusal = "MLC_REFUSED_VALUE"
    tensor = -1


class BadArgumentTypeError(BadArgumentError, TypeError):
    """An argument of the wrong type (a dtype ml_comm cannot reduce, a tensor where a
    list was expected); also a TypeError."""

    refusal = "MLC_REFUSED_TYPE"


def refused(error: BadArgumentError, refusal: str, tensor: int = -1) -> BadArgumentError:
    """`error`, saying what the other ranks are told of it (refusal: MLC_REFUSED_*)."""
    error.refusal, error.tensor = refusal, tensor
    return error


class SettingsError(BadArgumentError):
    """An ML_COMM_* environment variable holds a value that does not parse or is not
    one of its choices ([Environment variables](environment.md)); raised by init before
    anything starts."""


class OutOfMemoryError(MLCommError, MemoryError):
    """The core could not allocate a buffer (e.g. a team's fusion buffer)."""

    status_name = "MLC_ERR_NOMEM"


class MPIError(MLCommError):
    """An MPI call failed; the message holds MPI's own text."""

    status_name = "MLC_ERR_MPI"


class ThreadLevelError(MLCommError):
    """MPI was initialised below MPI_THREAD_MULTIPLE, which the teams' threads need."""

    status_name = "MLC_ERR_THREAD_LEVEL"


class StateError(MLCommError):
    """ml_comm is in the wrong state for the call: not initialised, finalized, already
    initialised, or the request was cancelled with the step that submitted it."""

    status_name = "MLC_ERR_STATE"


class MismatchError(MLCommError):
    """The ranks disagree: they submitted different requests (shapes, dtypes, counts,
    operations, settings) or ran different numbers of steps; the message names what
    each rank did. Every rank raises it."""

    status_name = "MLC_ERR_MISMATCH"


class NonFiniteError(MLCommError):
    """A reduction's input holds NaN or Inf (ML_COMM_CHECK_FINITE=1); the message names
    the ranks and tensors."""

    status_name = "MLC_ERR_NONFINITE"


class WireOverflowError(MLCommError):
    """float16 on the wire (compression "fp16"): a value or a partial sum beyond
    float16's range."""

    status_name = "MLC_ERR_OVERFLOW"


class StallError(MLCommError):
    """A wait passed its stall limit: the ranks wait for requests that cannot match (a
    deadlock), or a peer stopped answering."""

    status_name = "MLC_ERR_STALL"


class PeerLostError(MLCommError):
    """A rank left the job or died while this rank waited for it."""

    status_name = "MLC_ERR_PEER_LOST"


# The class of each kind: one per failure status of the core (a unit test holds it so).
KINDS: tuple[type[MLCommError], ...] = (
    BadArgumentError,
    OutOfMemoryError,
    MPIError,
    ThreadLevelError,
    StateError,
    MismatchError,
    NonFiniteError,
    WireOverflowError,
    StallError,
    PeerLostError,
)
