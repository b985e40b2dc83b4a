"""A module fixture for the ml_comm.horovod tests (hvd.init() for the module, shutdown
after) and Horovod's arithmetic, to check results against."""

from __future__ import annotations

import numpy as np
import pytest
from mpi_helpers import WEIGHTS_CHECK_OFF, comm_world, init_settings

import ml_comm.horovod.tensorflow as hvd


@pytest.fixture(scope="module")
def hvd_session():
    """hvd.init for a module, the check that a job shares its weights off: its tests
    average tensors that are no model's gradients (test_tf_weights_check.py tests it)."""
    comm_world().barrier()
    with init_settings(WEIGHTS_CHECK_OFF):
        hvd.init()
    try:
        yield hvd.rank(), hvd.size()
    finally:
        hvd.shutdown()


def horovod_scaled(values: np.ndarray, factor: float) -> np.ndarray:
    """values * factor as Horovod's CPU ScaleBuffer computes it (horovod/common/ops,
    v0.28.1): floats multiply in their dtype (16-bit ones in float32) by the factor rounded
    to it; integers in double, truncated toward zero by the C conversion. A factor of 1
    leaves the values alone, as Horovod skips the scaling then (int64 values past 2**53
    would not survive double)."""
    if factor == 1.0:
        return values
    dtype = values.dtype
    if dtype.kind in "iu":
        return np.trunc(values.astype(np.float64) * factor).astype(dtype)
    wide = np.dtype(np.float32) if dtype.itemsize == 2 else dtype
    return (values.astype(wide) * wide.type(factor)).astype(dtype)


def horovod_average(summed: np.ndarray, nranks: int, postscale_factor: float = 1.0):
    """Horovod's Average of a rank-wise sum: the sum times postscale_factor / size, the
    factor a float32 attribute and the quotient taken in double."""
    return horovod_scaled(summed, float(np.float32(postscale_factor)) / nranks)
