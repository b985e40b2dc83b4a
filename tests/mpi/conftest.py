"""Fixtures for the MPI integration tests; helpers and the rules tests follow are in
mpi_helpers.py."""

from __future__ import annotations

import pytest
from mpi_helpers import MSGLEN, NTEAMS, NTHREAD_PER_TEAM, ml_comm_session


@pytest.fixture(scope="module")
def session():
    """ml_comm initialised for one test module (finalized after it)."""
    with ml_comm_session(NTHREAD_PER_TEAM, NTEAMS, MSGLEN) as s:
        yield s
