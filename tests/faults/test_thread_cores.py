"""The teams' threads run on the cores ML_COMM_THREAD_CORES lists, the caller's thread
keeps its own, unset leaves the threads on the process's cores, and a list a rank cannot
use fails init on every rank, naming the ranks. Plain pytest around `mpiexec -n 2 python
scripts/thread_cores_job.py`, each run with its own environment and a timeout; the
cores are read back from /proc (Cpus_allowed_list of each thread the core named
ml_comm-w<i>)."""

from __future__ import annotations

import os
import re

import pytest
from jobs import mpiexec_job

from ml_comm.core.spans import spans

TIMEOUT_S = 90
NTHREADS = 2
ALLOWED = sorted(os.sched_getaffinity(0))  # what the ranks inherit from this process
ALL = spans(ALLOWED, ",")
needs_two_cores = pytest.mark.skipif(len(ALLOWED) < 2, reason="needs two allowed cores")


def run(value: str | None):
    env = {} if value is None else {"ML_COMM_THREAD_CORES": value}
    # ML_COMM_INLINE_BYTES=0: the average (a ring) runs on the team's threads.
    return mpiexec_job(
        2, "thread_cores_job.py", str(NTHREADS), timeout=TIMEOUT_S, ML_COMM_INLINE_BYTES="0", **env
    )


def cores_per_rank(value: str | None) -> dict[int, tuple[str, str, list[str]]]:
    """rank -> (main thread's cores after init, before init, each team thread's cores)."""
    job = run(value)
    assert job.returncode == 0, job.detail()
    # The launcher may run two ranks' lines together: search, do not split.
    main = {
        int(r): (a, b)
        for r, a, b in re.findall(r"rank (\d+) main ([0-9,-]+) before ([0-9,-]+)", job.stdout)
    }
    team = {int(r): c.split(";") for r, c in re.findall(r"rank (\d+) team ([0-9,;-]*)", job.stdout)}
    assert sorted(main) == sorted(team) == [0, 1], job.detail()
    return {r: (*main[r], team[r]) for r in main}


@needs_two_cores
def test_the_team_threads_run_on_the_core_listed():
    chosen = str(ALLOWED[-1])
    for rank, (main, before, team) in cores_per_rank(chosen).items():
        assert team == [chosen] * NTHREADS, f"rank {rank}: team threads on {team}"
        assert main == before == ALL, f"rank {rank}: the caller's thread moved to {main}"


def test_unset_leaves_the_team_threads_on_the_process_cores():
    for rank, (main, before, team) in cores_per_rank(None).items():
        assert team == [ALL] * NTHREADS, f"rank {rank}: team threads on {team}"
        assert main == before == ALL, f"rank {rank}"


@needs_two_cores
def test_each_local_rank_takes_its_own_list():
    first, second = str(ALLOWED[0]), str(ALLOWED[-1])
    per_rank = cores_per_rank(f"{second}:{first}")
    assert per_rank[0][2] == [second] * NTHREADS, per_rank
    assert per_rank[1][2] == [first] * NTHREADS, per_rank


def raised(job, message: str) -> list[int]:
    """The ranks that said they raised `message` (a regular expression)."""
    found = re.findall(rf"rank (\d+) raised: [^\n]*?{message}", job.stdout)
    return sorted(int(r) for r in found)


def test_an_unparsable_list_fails_init_on_every_rank():
    job = run("0-x")
    assert job.returncode == 0, job.detail()
    message = (
        re.escape(
            "environment variable ML_COMM_THREAD_CORES must be a Linux CPU list such as '6-7'"
        )
        + ".*?"
        + re.escape("got '0-x': '0-x' is neither a core nor a range")
    )
    assert raised(job, message) == [0, 1], job.detail()


def test_cores_outside_the_allowed_set_fail_init_on_every_rank():
    outside = ALLOWED[-1] + 1
    job = run(str(outside))
    assert job.returncode == 0, job.detail()
    message = re.escape(
        f"ranks 0-1 (ML_COMM_THREAD_CORES='{outside}'): core {outside} is outside the "
        f"cores the rank may run on: {ALL}"
    )
    assert raised(job, message) == [0, 1], job.detail()


def test_one_ranks_bad_list_fails_every_rank_naming_it():
    outside = ALLOWED[-1] + 1
    value = f"{ALLOWED[0]}:{outside}"
    job = run(value)
    assert job.returncode == 0, job.detail()
    # Rank 0's own list was fine: it raises all the same, and the message names rank 1 only.
    message = re.escape(
        f"communication threads on: rank 1 (ML_COMM_THREAD_CORES='{value}'): core {outside} "
        f"(local rank 1's list) is outside the cores the rank may run on: {ALL}. Give"
    )
    assert raised(job, message) == [0, 1], job.detail()


def test_a_local_rank_without_a_list_fails_every_rank_naming_it():
    job = mpiexec_job(3, "thread_cores_job.py", "1", timeout=TIMEOUT_S, ML_COMM_THREAD_CORES="0:0")
    assert job.returncode == 0, job.detail()
    message = re.escape(
        "rank 2 (ML_COMM_THREAD_CORES='0:0'): 2 CPU lists separated by ':' name cores for "
        "local ranks 0-1, but this node runs local rank 2"
    )
    assert raised(job, message) == [0, 1, 2], job.detail()
