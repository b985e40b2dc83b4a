"""The dtypes the core reduces, read from the core's table (ml_comm.h): each code's
name ("float32", "bfloat16", ...) is NumPy's name of the type (bfloat16 from
ml_dtypes), so nothing here lists dtypes; a dtype added to the core appears here."""

from __future__ import annotations

import ml_dtypes
import numpy as np

from .._core import ffi, lib
from .errors import BadArgumentTypeError


def _numpy_dtype(name: str, code: int) -> np.dtype:
    scalar = getattr(np, name, None) or getattr(ml_dtypes, name, None)
    if scalar is None:
        raise ImportError(f"the core's dtype {code} ({name!r}) has no NumPy or ml_dtypes type")
    dtype = np.dtype(scalar)
    if dtype.itemsize != lib.mlc_dtype_size(code):
        raise ImportError(
            f"the core's dtype {name!r} is {lib.mlc_dtype_size(code)} bytes, NumPy's "
            f"{dtype.itemsize}"
        )
    return dtype


# core code -> name, in the core's order
NAMES: dict[int, str] = {
    code: ffi.string(lib.mlc_dtype_name(code)).decode() for code in range(lib.MLC_NUM_DTYPES)
}
FLOATS = frozenset(name for code, name in NAMES.items() if lib.mlc_dtype_is_float(code))
CODES: dict[np.dtype, int] = {_numpy_dtype(name, code): code for code, name in NAMES.items()}
SUPPORTED = ", ".join(str(d) for d in CODES)


def code_of(dtype: np.dtype) -> int:
    try:
        return CODES[dtype]
    except KeyError:
        raise BadArgumentTypeError(
            f"ml_comm cannot reduce dtype {dtype}; supported: {SUPPORTED}"
        ) from None


def bits(dtypes) -> int:
    """The core's mask of a call's dtypes: bit (1 << code) for each (csrc/agree/signature.c)."""
    return sum(1 << CODES[np.dtype(d)] for d in set(dtypes))
