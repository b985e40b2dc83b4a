"""The dtypes the core reduces, read from the core's table (ml_comm.h): each code's
name ("float32", "bfloat16", ...) is NumPy's name of the type (bfloat16 from
ml_dtypes), so nothing here lists dtypes; a dtype added to the core appears here.

CODES and SUPPORTED are made on first use: importing ml_dtypes takes seconds on a busy
machine, and `import ml_comm` should not (the first thing a job prints waits for it)."""

from __future__ import annotations

import numpy as np

from .._core import ffi, lib
from .errors import BadArgumentTypeError


def _numpy_dtype(name: str, code: int) -> np.dtype:
    import ml_dtypes

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


_codes_made: dict[np.dtype, int] | None = None


def _codes() -> dict[np.dtype, int]:
    """NumPy dtype -> the core's code (made once)."""
    global _codes_made
    if _codes_made is None:
        _codes_made = {_numpy_dtype(name, code): code for code, name in NAMES.items()}
    return _codes_made


_reduced_made: dict[np.dtype, int] | None = None


def _reduced_codes() -> dict[np.dtype, int]:
    """The dtypes that allreduce and reducescatter take (not bool, which is only moved);
    made once."""
    global _reduced_made
    if _reduced_made is None:
        _reduced_made = {d: c for d, c in _codes().items() if lib.mlc_dtype_is_reducible(c)}
    return _reduced_made


def __getattr__(attribute: str):
    """CODES (NumPy dtype -> core code), SUPPORTED (their names), REDUCED_CODES and
    REDUCED (the reductions' dtypes), made on first use."""
    if attribute == "CODES":
        return _codes()
    if attribute == "SUPPORTED":
        return ", ".join(str(d) for d in _codes())
    if attribute == "REDUCED_CODES":
        return _reduced_codes()
    if attribute == "REDUCED":
        return ", ".join(str(d) for d in _reduced_codes())
    raise AttributeError(f"module {__name__!r} has no attribute {attribute!r}")


def code_of(dtype: np.dtype, reduces: bool = False) -> int:
    """The core's code of dtype; BadArgumentTypeError naming the supported ones when it has
    none, or when the call reduces and the core never reduces it (bool)."""
    try:
        code = _codes()[dtype]
    except KeyError:
        supported = ", ".join(str(d) for d in (_reduced_codes() if reduces else _codes()))
        raise BadArgumentTypeError(
            f"ml_comm cannot {'reduce' if reduces else 'move'} dtype {dtype}; supported: "
            f"{supported}"
        ) from None
    reduced = _reduced_codes()
    if reduces and dtype not in reduced:
        raise BadArgumentTypeError(
            f"ml_comm cannot reduce dtype {dtype} (broadcast, allgather and alltoall move it); "
            f"reductions take {', '.join(str(d) for d in reduced)}"
        )
    return code


def bits(dtypes) -> int:
    """The core's mask of a call's dtypes: bit (1 << code) for each (csrc/agree/signature.c)."""
    return sum(1 << _codes()[np.dtype(d)] for d in set(dtypes))
