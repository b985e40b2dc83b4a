"""The failure paths past 33 ranks (34 and 64 real MPI ranks, oversubscribed on this
machine's cores, tiny tensors), and deadlocks found in minutes.

Past 33 ranks the agreement's table after a disagreement waits on more than the 64 requests
an MPI call once tested at a time; each case here failed there before. The test command runs
a sample (every failure case at 64 ranks in one job, the cross-order deadlock at 34, the
deadlock check at 2 ranks with a short limit); ML_COMM_LONG_TESTS=1 runs the rest: every
failure case at 34, the stall warning and a rank leaving at 34 and 64, the cross-order
deadlock at 64, and at
2 ranks with the default limits, a deadlock found within 3 minutes and a rank that computes
alone for 10 minutes that is not taken for one.
"""

from __future__ import annotations

import os
import re

import pytest
from jobs import mpiexec_job, wait_gone

LONG = os.environ.get("ML_COMM_LONG_TESTS") == "1"
long_only = pytest.mark.skipif(not LONG, reason="long: ML_COMM_LONG_TESTS=1")
CASES = (
    "mismatch",
    "nonfinite",
    "splits",
    "ahead",
    "left_step",
    "mid_step",
    "refused",
    "skipped",
)
# 64 Python processes take a minute to start on two loaded cores.
TIMEOUT_S = 420


def odd_rank(n: int) -> int:
    """A rank past 32 (the table's first window), but not the last."""
    return n // 2 + 1


@pytest.mark.parametrize("nranks", [pytest.param(34, marks=long_only), 64])
def test_every_failure_case_at_scale_then_the_job_ends_well(nranks):
    odd = odd_rank(nranks)
    job = mpiexec_job(
        nranks, "scale_job.py", "failures", str(odd), timeout=TIMEOUT_S, ML_COMM_CHECK_FINITE="1"
    )
    assert job.returncode == 0, job.detail()
    found = re.findall(r"rank (\d+) (\w+): ok", job.stdout)
    for case in CASES:
        ranks = sorted(int(r) for r, c in found if c == case)
        assert ranks == list(range(nranks)), f"{case}: ok on {ranks}\n{job.detail()}"
    assert "FAILED" not in job.stdout, job.detail()
    assert len(re.findall(r"done rank \d+", job.stdout)) == nranks, job.detail()
    assert not wait_gone(job.token)


def cross_order(nranks: int, limit: str | None, timeout: float):
    env = {"ML_COMM_DEADLOCK_SECONDS": limit} if limit else {}
    return mpiexec_job(nranks, "scale_job.py", "cross_order", "1", timeout=timeout, **env)


NUMPY_WAIT = r"request 1 \(average of 1 float32 tensor, 4 elements\)"


def assert_deadlock_named(
    job, nranks: int, within: float, wait: str = NUMPY_WAIT, limit: str = r"\d+"
) -> None:
    """The job ended, within `within` s, by the deadlock line naming rank 0 in team 0 and
    the others in team 1, each waiting in a request that `wait` matches."""
    assert job.returncode not in (0, None), job.detail()
    assert job.seconds < within, job.detail()
    assert "was not stopped" not in job.stdout, job.detail()
    team1 = "rank 1" if nranks == 2 else f"ranks 1-{nranks - 1}"
    want = (
        rf"ml_comm: rank \d+: deadlock: every rank has waited inside ml_comm for requests the "
        rf"others have not made, for at least {limit} s \(ML_COMM_DEADLOCK_SECONDS\): rank 0 in "
        rf"team 0 {wait}; {team1} in team 1 {wait}\. Every rank must call each "
        rf"team in the same order; aborting the job"
    )
    assert re.search(want, job.stderr), job.detail()
    assert not wait_gone(job.token, 10)


@pytest.mark.parametrize("nranks", [2, 34])
def test_teams_called_in_another_order_end_the_job_naming_every_rank(nranks):
    job = cross_order(nranks, "6", TIMEOUT_S)
    assert_deadlock_named(job, nranks, TIMEOUT_S)


def test_a_rank_busy_outside_ml_comm_is_not_a_deadlock():
    """Rank 1 computes for four deadlock limits while rank 0 waits in a call."""
    job = mpiexec_job(2, "stall_job.py", "sleep", "12", timeout=90, ML_COMM_DEADLOCK_SECONDS="3")
    assert job.returncode == 0, job.detail()
    assert "deadlock" not in job.stderr, job.detail()
    assert re.search(r"done rank 0, average 0\.5", job.stdout), job.detail()


@long_only
def test_at_64_ranks_teams_called_in_another_order_end_the_job():
    assert_deadlock_named(cross_order(64, "10", TIMEOUT_S), 64, TIMEOUT_S)


@long_only
def test_with_the_defaults_a_deadlock_ends_within_3_minutes():
    assert_deadlock_named(cross_order(2, None, 300), 2, 180)


@long_only
def test_with_the_defaults_a_rank_computing_10_minutes_alone_is_waited_for():
    job = mpiexec_job(2, "stall_job.py", "sleep", "600", timeout=900)
    assert job.returncode == 0, job.detail()
    assert "deadlock" not in job.stderr and "aborting" not in job.stderr, job.detail()
    assert re.search(r"done rank 0, average 0\.5", job.stdout), job.detail()


@long_only
@pytest.mark.parametrize("nranks", [34, 64])
def test_a_late_rank_is_named_by_every_waiting_rank_at_scale(nranks):
    job = mpiexec_job(
        nranks, "stall_job.py", "sleep", "20", timeout=TIMEOUT_S, ML_COMM_STALL_WARN_SECONDS="6"
    )
    assert job.returncode == 0, job.detail()
    late = nranks - 1
    named = set(
        int(r)
        for r in re.findall(
            rf"ml_comm: rank (\d+): team 0 request 2 \(.*?\) has waited \d+\.\d s for rank "
            rf"{late} to reach it",
            job.stderr,
        )
    )
    assert named == set(range(late)), f"named by {sorted(named)}\n{job.detail()}"


@long_only
@pytest.mark.parametrize("nranks", [34, 64])
def test_a_rank_leaving_at_scale_ends_the_job(nranks):
    victim = odd_rank(nranks)
    job = mpiexec_job(nranks, "faulty_training.py", "exit", str(victim), timeout=TIMEOUT_S)
    assert job.returncode == 1, job.detail()
    assert re.search(
        rf"ml_comm: rank {victim} of {nranks} is leaving \(finalize\(\), sys.exit\(\) or the end "
        rf"of the script\) while rank \d+ waits for it",
        job.stderr,
    ), job.detail()
    assert not wait_gone(job.token, 10)


@pytest.mark.parametrize("mode", ["eager", "keras"])
def test_tensorflow_steps_on_teams_called_in_another_order_end_the_job(mode):
    """The waits of TensorFlow's ops (eager calls, Keras steps) count for the deadlock
    check as a blocking call's do: the job ends naming where each rank waits."""
    job = mpiexec_job(2, "tf_cross_order_job.py", mode, timeout=180, ML_COMM_DEADLOCK_SECONDS="6")
    assert_deadlock_named(job, 2, 180, wait=r"request \d+ \(.*\)", limit="6")
