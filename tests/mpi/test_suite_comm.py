"""The suite runs on the communicator that ML_COMM_TEST_COMM names (mpi_helpers.suite_comm):
ml_comm's rank, size and reductions are that communicator's, not COMM_WORLD's."""

from __future__ import annotations

import numpy as np
import pytest
from mpi_helpers import Checks, comm_world, suite_comm, suite_comm_kind

import ml_comm as mc

pytestmark = pytest.mark.mpi


def test_ml_comm_runs_on_the_suite_communicator(session):
    c = Checks()
    comm, world, kind = suite_comm(), comm_world(), suite_comm_kind()
    c.true(
        (session.rank, session.nranks, mc.get_rank(), mc.get_nranks())
        == (comm.rank, comm.size, comm.rank, comm.size),
        f"{kind}: ml_comm rank/size {(mc.get_rank(), mc.get_nranks())}, "
        f"communicator's {(comm.rank, comm.size)}",
    )
    if kind == "split":
        half = (world.size + 1 - world.rank % 2) // 2  # ranks of this parity
        c.true(comm.size == half, f"split: size {comm.size}, want {half}")
    else:
        c.true(comm.size == world.size, f"{kind}: size {comm.size}, want {world.size}")
    # A sum over ml_comm's ranks adds exactly the communicator's members.
    total = np.array([world.rank], np.int64)
    mc.allreduce_sum(total)
    members = comm.allgather(world.rank)
    c.true(int(total[0]) == sum(members), f"{kind}: sum {total[0]} over {members}")
    c.finish()
