"""A rank that reaches init seconds after the others: rank 0 says, once past 5 s, that it
waits for the other ranks, instead of a silence that looks like a hang (core/arrival.py). A
real 3-rank job whose last rank sleeps 8 s before init (speak_once_job.py late)."""

from __future__ import annotations

from jobs import mpiexec_job


def test_rank_0_says_it_waits_for_a_late_rank_in_init():
    job = mpiexec_job(3, "speak_once_job.py", "late", timeout=120)
    assert job.returncode == 0, job.detail()
    for rank in range(3):
        assert f"rank {rank} averaged to 3.0" in job.stdout, job.detail()
    said = [line for line in job.stderr.splitlines() if "init waits for" in line]
    want = "ml_comm: init waits for the other ranks of 3 to reach init (5 s)"
    assert said == [want], job.detail()


def test_ranks_that_arrive_together_hear_nothing():
    job = mpiexec_job(3, "speak_once_job.py", "together", timeout=120)
    assert job.returncode == 0, job.detail()
    assert "init waits for" not in job.stderr, job.detail()
