"""The core's status codes and error text as Python exceptions."""

from __future__ import annotations

from .._core import ffi, lib
from .errors import MLCommError

ERR_LEN = 512  # bytes of the error-text buffers handed to the core


def text(buf) -> str:
    return ffi.string(buf).decode(errors="replace")


def check(rc: int, what: str, err=None) -> None:
    """Raise MLCommError("<what> failed: ...") unless rc is MLC_OK; err: the call's text buffer."""
    if rc != lib.MLC_OK:
        detail = text(err) if err is not None else ""
        name = ffi.string(lib.mlc_status_name(rc)).decode()
        raise MLCommError(f"{what} failed: {detail or name}")
