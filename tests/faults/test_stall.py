"""The stall watchdog: ranks that wait too long in a team operation say which ranks
they wait for (ML_COMM_STALL_WARN_SECONDS), and past ML_COMM_STALL_ABORT_SECONDS the
job ends with MPI_Abort and a non-zero exit status.

Plain pytest: each test launches `mpiexec -n N python scripts/stall_job.py` under a
timeout (docs/faults.md).
"""

from __future__ import annotations

import re

from jobs import mpiexec_job, wait_gone

SCRIPT = "stall_job.py"
TIMEOUT_S = 90
WARNING = (
    r"ml_comm: rank {waiting}: team 0 request 2 \(average of 1 float32 tensor, 10 elements\) "
    r"has waited \d+\.\d s for rank {late} to reach it"
)


def test_a_late_rank_is_named_and_the_job_then_succeeds():
    job = mpiexec_job(2, SCRIPT, "sleep", "4", timeout=TIMEOUT_S, ML_COMM_STALL_WARN_SECONDS="1.5")
    assert job.returncode == 0, job.detail()
    warnings = re.findall(WARNING.format(waiting=0, late=1), job.stderr)
    # at 1.5 s and 3.0 s (and not more often than every 1.5 s)
    assert 1 <= len(warnings) <= 3, job.detail()
    assert "rank 1: team" not in job.stderr, "the late rank waited for nobody\n" + job.detail()
    assert re.search(r"done rank 0, average 0\.5", job.stdout), job.detail()


def test_every_waiting_rank_warns():
    job = mpiexec_job(3, SCRIPT, "sleep", "3", timeout=TIMEOUT_S, ML_COMM_STALL_WARN_SECONDS="1")
    assert job.returncode == 0, job.detail()
    for waiting in (0, 1):
        assert re.search(WARNING.format(waiting=waiting, late=2), job.stderr), job.detail()


def test_no_warning_below_the_limit():
    job = mpiexec_job(2, SCRIPT, "sleep", "0.5", timeout=TIMEOUT_S, ML_COMM_STALL_WARN_SECONDS="20")
    assert job.returncode == 0, job.detail()
    assert "has waited" not in job.stderr, job.detail()


def test_abort_limit_ends_the_job():
    """With the abort limit at 5 s the job ends within 30 s."""
    job = mpiexec_job(
        2,
        SCRIPT,
        "sleep",
        "600",
        timeout=TIMEOUT_S,
        ML_COMM_STALL_WARN_SECONDS="2",
        ML_COMM_STALL_ABORT_SECONDS="5",
    )
    assert job.returncode is not None, f"the job hung (killed after {TIMEOUT_S} s)\n{job.detail()}"
    assert job.returncode != 0, job.detail()
    assert job.seconds < 30, job.detail()
    assert re.search(WARNING.format(waiting=0, late=1), job.stderr), job.detail()
    aborting = WARNING.format(waiting=0, late=1) + r"; aborting the job \(stall abort limit 5 s\)"
    assert re.search(aborting, job.stderr), job.detail()
    assert not wait_gone(job.token), job.detail()


def test_a_rank_stopped_mid_operation():
    """A rank halts inside a reduction the others have started (a hung node): they
    name it as the rank whose data they wait for, and the abort limit ends the job."""
    job = mpiexec_job(
        2,
        SCRIPT,
        "stop",
        "2",
        timeout=TIMEOUT_S,
        ML_COMM_STALL_WARN_SECONDS="1",
        ML_COMM_STALL_ABORT_SECONDS="4",
    )
    assert job.returncode not in (0, None), job.detail()
    assert job.seconds < 30, job.detail()
    # Almost always mid-ring ("data from rank 1"); if rank 1 stopped between two
    # reductions, it is named as not having reached the next one.
    named = (
        r"ml_comm: rank 0: team 0 request \d+ \(average of 1 float32 tensor, 4194304 elements\) "
        r"has waited \d+\.\d s for (data from rank 1|rank 1 to reach it)"
    )
    assert re.search(named, job.stderr), job.detail()
    assert "aborting the job (stall abort limit 4 s)" in job.stderr, job.detail()
    assert not wait_gone(job.token), job.detail()
