"""A call that names no team of a one-team job on one rank only (a team out of range, or
no int): that rank raises its own error, naming the team; its call is refused on the
job's one team, so every other rank's call fails at once naming that rank, instead of
pairing with that rank's next call; then every rank goes on in step. (A job of several
teams cannot tell which team the others call: docs/faults.md.)"""

from __future__ import annotations

import numpy as np
import pytest
from mpi_helpers import MSGLEN, Checks, ml_comm_session

import ml_comm as mc

pytestmark = pytest.mark.mpi

CALLS = {
    "gradients": lambda x, team: mc.gradients([x], team)[0],
    "average": lambda x, team: mc.average(x, team),
    "allreduce_sum": lambda x, team: mc.allreduce_sum(x, team),
    "allgather": lambda x, team: mc.allgather(x, team),
    "broadcast": lambda x, team: mc.broadcast([x], 0, team)[0],
}


@pytest.fixture(scope="module")
def one_team():
    with ml_comm_session(1, 1, MSGLEN) as s:
        yield s


@pytest.mark.parametrize("bad_team", [5, "0"])
@pytest.mark.parametrize("call", sorted(CALLS))
def test_a_bad_team_on_one_rank_fails_on_every_rank(one_team, call, bad_team):
    rank, n = one_team.rank, one_team.nranks
    if n < 2:
        pytest.skip("one rank has no other rank to tell")
    c = Checks()
    last = n - 1
    x = np.full(4, float(rank + 1), np.float32)
    if rank == last:
        kind = mc.BadArgumentError if bad_team == 5 else mc.BadArgumentTypeError
        c.raises(kind, CALLS[call], x, bad_team, words=("team",))
    else:
        told = f"rank {last}: an argument"
        c.raises(mc.BadArgumentError, CALLS[call], x, 0, words=(told,))
    out = mc.average(np.full(4, float(rank + 1), np.float32))
    c.equal(out, np.full(4, (n + 1) / 2, np.float32), "the next average, on every rank")
    c.finish()
