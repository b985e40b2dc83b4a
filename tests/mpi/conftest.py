"""Fixtures for the MPI integration tests; helpers and the rules tests follow are in
mpi_helpers.py."""

from __future__ import annotations

import pytest
from ml_comm._core import ffi, lib
from mpi_helpers import MSGLEN, NTEAMS, NTHREAD_PER_TEAM, ml_comm_session


@pytest.fixture(scope="module")
def session():
    """ml_comm initialised for one test module (finalized after it)."""
    with ml_comm_session(NTHREAD_PER_TEAM, NTEAMS, MSGLEN) as s:
        yield s


@pytest.fixture
def direct_4k():
    """Team 0's direct payload at the core's default, 4 KiB (the suite's sessions scale it
    down); list it after the test's session fixture."""
    from ml_comm import api

    team = api.session().team(0)
    before = ffi.new("mlc_team_settings *")
    lib.mlc_team_get_settings(team, before)
    lib.mlc_team_set_direct_threshold(team, 4096)
    yield team
    lib.mlc_team_set_direct_threshold(team, before.direct_bytes)
