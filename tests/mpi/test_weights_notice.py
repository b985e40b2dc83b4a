"""A job that averages gradients without broadcasting its weights is warned, once, by
rank 0 (core/weights_notice.py); a job that broadcasts or checks them, before the first
step or right after it, is not (a traced step: test_tf_weights_notice.py). This module
manages init itself (no `session` fixture)."""

from __future__ import annotations

import numpy as np
import pytest
from mpi_helpers import CHUNK_BYTES, ml_comm_session

import ml_comm as mc

pytestmark = pytest.mark.mpi

WARNING = "no weights were broadcast"


def run_job(capfd, calls) -> tuple[int, int, list[str]]:
    """Run `calls` (names, in order) in a session of its own: (this rank and the number
    of ranks in it, this rank's stderr after each call, and last after finalize)."""
    capfd.readouterr()
    weights = [np.ones(5, np.float32)]
    said = []
    with ml_comm_session(1, 2, 1024, CHUNK_BYTES):
        rank, size = mc.get_rank(), mc.get_nranks()  # the session's (a suite comm may reorder)
        for name in calls:
            if name.startswith("gradients"):  # "gradients" on team 0, "gradients 1" on 1
                team = int(name.split()[1]) if " " in name else 0
                assert np.array_equal(
                    mc.gradients([np.ones(7, np.float32)], team)[0], np.ones(7, np.float32)
                )
            elif name == "broadcast":
                mc.broadcast(weights)
            elif name == "check":
                mc.check_buffers_match(weights, 0)
            said.append(capfd.readouterr().err)
    said.append(capfd.readouterr().err)
    return rank, size, said


@pytest.mark.parametrize(
    "calls, warned_after",
    [
        (["gradients", "gradients", "gradients"], 1),  # the second call says it
        (["gradients"], 1),  # finalize says it (a step traced once calls gradients once)
        (["broadcast", "gradients", "gradients"], None),
        (["gradients", "broadcast", "gradients", "gradients"], None),  # after the first step
        (["check", "gradients", "gradients"], None),
        (["broadcast"], None),
        # two models (a GAN): each team's first call comes before the broadcast
        (["gradients", "gradients 1", "broadcast", "gradients", "gradients 1"], None),
        (["gradients", "gradients 1", "gradients", "gradients 1"], 2),
    ],
)
def test_warned_once_by_rank_zero(capfd, calls, warned_after):
    rank, size, errs = run_job(capfd, calls)
    said = [err.count(WARNING) for err in errs]
    expected = [0] * (len(calls) + 1)
    if warned_after is not None and rank == 0 and size > 1:
        expected[warned_after] = 1
    assert said == expected, f"rank {rank} of {size}, calls {calls}: warnings {said}"
