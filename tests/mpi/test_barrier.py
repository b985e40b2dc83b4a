"""mc.barrier() (ml_comm/faults/barrier.py: a polled dissemination barrier): no rank leaves
barrier k before every rank has entered it, for many barriers in a row with ranks
arriving late in turn. The ranks share one machine, so CLOCK_MONOTONIC is one clock."""

from __future__ import annotations

import time

import pytest
from mpi_helpers import Checks, suite_comm

import ml_comm as mc

pytestmark = pytest.mark.mpi


def test_no_rank_leaves_before_all_entered(session):
    c = Checks()
    rank, nranks = mc.get_rank(), mc.get_nranks()
    rounds = 12
    entered, left = [], []
    for k in range(rounds):
        if k % nranks == rank:
            time.sleep(0.02)  # this rank arrives last in round k
        entered.append(time.monotonic())
        mc.barrier()
        left.append(time.monotonic())
    all_entered = suite_comm().allgather(entered)
    all_left = suite_comm().allgather(left)
    for k in range(rounds):
        last_in = max(e[k] for e in all_entered)
        first_out = min(x[k] for x in all_left)
        c.true(first_out >= last_in, f"barrier {k}: a rank left {last_in - first_out:.4f} s early")
    c.finish()
