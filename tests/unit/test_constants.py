"""Constants and kernels the Python layer reads from C."""

import ml_dtypes
import numpy as np
from ml_comm._core import ffi, lib

from ml_comm.core import dtypes as _dtypes


def test_dtype_sizes_match_numpy():
    for dtype, code in _dtypes.CODES.items():
        assert lib.mlc_dtype_size(code) == dtype.itemsize
    assert lib.mlc_dtype_size(lib.MLC_NUM_DTYPES) == 0
    assert len(_dtypes.CODES) == lib.MLC_NUM_DTYPES


def test_bfloat16_is_supported():
    assert _dtypes.code_of(np.dtype(ml_dtypes.bfloat16)) == lib.MLC_BFLOAT16


def test_status_names():
    assert ffi.string(lib.mlc_status_name(lib.MLC_OK)) == b"ok"
    assert b"MULTIPLE" in ffi.string(lib.mlc_status_name(lib.MLC_ERR_THREAD_LEVEL))
