"""Fixtures for the MPI integration tests; helpers and the rules tests follow are in
mpi_helpers.py."""

from __future__ import annotations

import sys

import pytest
from ml_comm._core import ffi, lib
from mpi_helpers import MSGLEN, NTEAMS, NTHREAD_PER_TEAM, ml_comm_session


def pytest_runtest_logreport(report):
    """At more than one rank a failure is printed the moment it happens, under the rank's
    name: when the job ends early (a rank aborts it, or a peer a request ahead makes
    finalize abort it), the ranks never reach pytest's summary or write their reports, and
    this is then the only record of which test failed and why."""
    mpi = sys.modules.get("mpi4py.MPI")  # never started here: some tests start it themselves
    if not report.failed or mpi is None or not mpi.Is_initialized() or mpi.Is_finalized():
        return
    if mpi.COMM_WORLD.Get_size() > 1:
        rank = mpi.COMM_WORLD.Get_rank()
        sys.stderr.write(f"\nrank {rank}: FAILED {report.nodeid} ({report.when})\n")
        sys.stderr.write(f"{report.longreprtext}\nrank {rank}: end of {report.nodeid}\n")
        sys.stderr.flush()


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
