"""NumPy dtypes the core reduces, mapped to the core's dtype codes (read from C)."""

from __future__ import annotations

import ml_dtypes
import numpy as np

from ._core import lib

CODES: dict[np.dtype, int] = {
    np.dtype(np.float32): lib.MLC_FLOAT32,
    np.dtype(np.float64): lib.MLC_FLOAT64,
    np.dtype(np.float16): lib.MLC_FLOAT16,
    np.dtype(ml_dtypes.bfloat16): lib.MLC_BFLOAT16,
    np.dtype(np.int32): lib.MLC_INT32,
    np.dtype(np.int64): lib.MLC_INT64,
}
SUPPORTED = ", ".join(str(d) for d in CODES)


def code_of(dtype: np.dtype) -> int:
    try:
        return CODES[dtype]
    except KeyError:
        raise TypeError(f"ml_comm cannot reduce dtype {dtype}; supported: {SUPPORTED}") from None


def bits(dtypes) -> int:
    """The core's mask of a call's dtypes: bit (1 << code) for each (csrc/signature.c)."""
    return sum(1 << CODES[np.dtype(d)] for d in set(dtypes))
