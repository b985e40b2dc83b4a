"""A module fixture for the ml_comm.horovod tests: hvd.init() for the module, shutdown after."""

from __future__ import annotations

import pytest
from mpi_helpers import comm_world

import ml_comm.horovod.tensorflow as hvd


@pytest.fixture(scope="module")
def hvd_session():
    comm_world().barrier()
    hvd.init()
    try:
        yield hvd.rank(), hvd.size()
    finally:
        hvd.shutdown()
