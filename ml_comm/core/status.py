"""The core's status codes and error text as Python exceptions.

The one place that maps a status of the core (`enum mlc_status`, read from ml_comm.h
through cffi) to its class of errors.py; every layer raises a failed call's status
through `error` or `check`.
"""

from __future__ import annotations

from .._core import ffi, lib
from .errors import KINDS, MLCommError

ERR_LEN = 512  # bytes of the error-text buffers handed to the core

# name -> code of every status the core has, from the header's enum
STATUSES: dict[str, int] = dict(ffi.typeof("enum mlc_status").relements)
CLASSES: dict[int, type[MLCommError]] = {STATUSES[kind.status_name]: kind for kind in KINDS}


def text(buf) -> str:
    return ffi.string(buf).decode(errors="replace")


def name(status: int) -> str:
    """The core's words for a status ("ranks disagree on the request", ...)."""
    return ffi.string(lib.mlc_status_name(status)).decode()


def error_class(status: int) -> type[MLCommError]:
    """The class of errors of a failure status (MLCommError for a code the core lacks)."""
    return CLASSES.get(status, MLCommError)


def error(status: int, message: str) -> MLCommError:
    """The exception of a failed call: the class of its status, with `message`."""
    return error_class(status)(message)


def check(rc: int, what: str, err=None) -> None:
    """Raise the class of rc ("<what> failed: ...") unless rc is MLC_OK; err: the call's
    text buffer, or its text."""
    if rc != lib.MLC_OK:
        detail = err if isinstance(err, str) else text(err) if err is not None else ""
        raise error(rc, f"{what} failed: {detail or name(rc)}")
