"""A job that averages gradients without sharing its weights fails on every rank at a
model's second step (csrc/team/weights_check.c, core/weights_notice.py); a job that
broadcasts or checks them, before the first step or right after it, does not; a job of
one step is warned at finalize by rank 0 (a traced step: test_tf_weights_check.py). This
module manages init itself (no `session` fixture)."""

from __future__ import annotations

import numpy as np
import pytest
from mpi_helpers import CHUNK_BYTES, ml_comm_session

import ml_comm as mc

pytestmark = pytest.mark.mpi

WARNING = "ml_comm: warning: gradients were averaged"
REFUSAL = "averaged the gradients of a model's second step, but no weights were broadcast"

# What each call of a job does: "g" averages a model's gradients on team 0, "g3" another
# model's (another layout) on team 0, "g@1" a model's on team 1; "marked" is a step
# marked with mc.step() that averages "g" twice; "broadcast" and "check" share the
# weights, "check differing" checks weights that differ between the ranks.
LAYOUTS = {"g": (0, 7), "g3": (0, 3), "g@1": (1, 7)}


def run(name: str, rank: int, size: int) -> None:
    if name in LAYOUTS:
        team, n = LAYOUTS[name]
        out = mc.gradients([np.full(n, float(rank), np.float32)], team)[0]
        assert out.tolist() == [(size - 1) / 2] * n
    elif name == "marked":
        with mc.step():
            run("g", rank, size)
            run("g", rank, size)
    elif name == "broadcast":
        mc.broadcast([np.ones(5, np.float32)])
    elif name == "check":
        assert mc.check_buffers_match([np.ones(5, np.float32)], 0) == 0
    elif name == "check differing":
        assert mc.check_buffers_match([np.full(5, float(rank), np.float32)], 0) == size - 1


def run_job(capfd, calls, weights_check=True):
    """Run `calls` in a session of its own: this rank and the number of ranks in it, the
    message of each call's StateError ("" where none), and whether rank 0 warned at
    finalize."""
    capfd.readouterr()
    refused = []
    with ml_comm_session(1, 2, 1024, CHUNK_BYTES, weights_check=weights_check):
        rank, size = mc.get_rank(), mc.get_nranks()  # the session's (a suite comm may reorder)
        for name in calls:
            try:
                run(name, rank, size)
                refused.append("")
            except mc.StateError as e:
                refused.append(str(e))
        assert WARNING not in capfd.readouterr().err
    return rank, size, refused, WARNING in capfd.readouterr().err


@pytest.mark.parametrize(
    "calls, refused_at, warned",
    [
        # every call from the model's second step on, on every rank
        (["g", "g", "g"], [1, 2], False),
        (["g"], [], True),  # one step: finalize says it
        (["broadcast", "g", "g"], [], False),
        (["g", "broadcast", "g", "g"], [], False),  # after the first step
        (["check", "g", "g"], [], False),
        (["broadcast"], [], False),
        # two models (a GAN) on two teams, or on one: each one's first step comes before
        # the broadcast
        (["g", "g@1", "broadcast", "g", "g@1"], [], False),
        (["g", "g3", "broadcast", "g", "g3"], [], False),
        (["g", "g@1", "g", "g@1"], [2, 3], False),
        (["g", "g3", "g", "g3"], [2, 3], False),
        # a step marked with mc.step() is one step, whatever it averages twice
        (["marked", "broadcast", "marked"], [], False),
        (["marked", "marked"], [1], False),
        # a job that catches the error and checks its weights goes on
        (["g", "g", "check", "g"], [1], False),
        # a check that finds the weights differ shares nothing
        (["g", "check differing", "g"], [2], False),
    ],
)
def test_refused_on_every_rank_from_the_second_step(capfd, calls, refused_at, warned):
    rank, size, refused, warned_here = run_job(capfd, calls)
    if size == 1:  # one rank has nothing to differ from
        refused_at, warned = [], False
    assert [i for i, text in enumerate(refused) if text] == refused_at, (rank, size, refused)
    for i in refused_at:
        team = LAYOUTS.get(calls[i], (0,))[0]
        assert f"team {team} {REFUSAL}" in refused[i], refused[i]
        assert "mc.broadcast(weights)" in refused[i] and "ML_COMM_WEIGHTS_CHECK=0" in refused[i]
    assert warned_here == (warned and rank == 0), f"rank {rank} of {size}: {calls}"


def test_turned_off_it_neither_refuses_nor_warns(capfd):
    rank, size, refused, warned = run_job(capfd, ["g"] * 3, weights_check=False)
    assert refused == [""] * 3 and not warned, f"rank {rank} of {size}"
