"""ml_comm's errors raised inside a framework's compiled code come back as the
framework's runtime errors, with ml_comm's status in their text ("ml_comm (status 7,
ranks disagree on the request): ..."; ml_comm/jax/ffi/average.cc): this gives them
their MLCommError again."""

from __future__ import annotations

import re

from ...core.errors import MLCommError

_MARK = re.compile(r"ml_comm \(status (\d+)[^)]*\): (.*)", re.S)


def from_runtime_error(exc: BaseException) -> MLCommError | None:
    if isinstance(exc, MLCommError):
        return None
    found = _MARK.search(str(exc))
    if found is None:
        return None
    return MLCommError(found.group(2).strip())
