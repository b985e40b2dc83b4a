"""An error that every rank meets is printed once for the job, by the lowest rank, and
every other rank says so in one line of its own; no line holds two ranks' text
(ml_comm/faults/abort.py, core/job_errors.py). A process that runs alone says so once
(mpi/launch.py). Real MPI jobs at 2 and 3 ranks (speak_once_job.py).
"""

from __future__ import annotations

import re
import uuid

import pytest
from jobs import MPIEXEC, PY, SCRIPTS, clean_env, mpiexec_job, run_job

TIMEOUT_S = 240
# The first TensorFlow job after the core was rebuilt compiles the ops (minutes here).
KERAS_TIMEOUT_S = 600
THREADS_MESSAGE = (
    "init failed: the ranks were started with different settings that change how they communicate"
)


def others_say_once(job, nranks: int, error: str) -> None:
    """Each rank above 0 has exactly one line, whole, which names rank 0 as the printer."""
    for rank in range(1, nranks):
        mine = [line for line in job.stderr.splitlines() if f"rank {rank} of {nranks}" in line]
        want = (
            f"ml_comm: rank {rank} of {nranks}: uncaught {error}, the same as rank 0's, "
            "which prints it and ends the job"
        )
        assert mine == [want], job.detail()


@pytest.mark.parametrize("nranks", [2, 3])
def test_ranks_started_with_other_thread_counts_get_the_message_once(nranks):
    job = mpiexec_job(nranks, "speak_once_job.py", "threads", timeout=TIMEOUT_S)
    assert job.returncode not in (0, None), job.detail()
    assert job.stderr.count(THREADS_MESSAGE) == 1, job.detail()
    # rank 0's banner and the exception's line, each whole on a line of its own
    assert re.search(
        rf"^ml_comm: rank 0 of {nranks}: uncaught MismatchError; aborting the job \(MPI_Abort\) "
        r"so that .*\(ML_COMM_ABORT_ON_EXCEPTION=0 turns this off\)$",
        job.stderr,
        re.M,
    ), job.detail()
    held = "; ".join(f"rank {r}: 3" for r in range(1, nranks))
    held = f"rank 0: 2; {held}" if nranks == 2 else "rank 0: 2; ranks 1-2: 3"
    assert re.search(
        rf"^ml_comm\S*MismatchError: {THREADS_MESSAGE}.*nthread_per_team: {held}\. "
        r"Give every rank .*\(mpiexec and srun pass the launching shell's environment on\), "
        r"and under ml_comm\.keras the same Keras backend and ml_comm\.keras\.init options$",
        job.stderr,
        re.M,
    ), job.detail()
    others_say_once(job, nranks, "MismatchError")


def test_a_different_keras_model_on_one_rank_says_the_models_differ():
    job = mpiexec_job(2, "speak_once_job.py", "keras-model", timeout=KERAS_TIMEOUT_S)
    assert job.returncode not in (0, None), job.detail()
    assert job.stderr.count("models differ") == 1, job.detail()
    assert re.search(
        r"^ml_comm\S*MismatchError: the ranks' models differ, so rank 0's weights cannot be "
        r"broadcast to the others: rank 0: 1 layer \(Dense\), 2 weights, 15 parameters; "
        r"rank 1: 2 layers \(Dense, Dense\), 4 weights, 27 parameters; first difference: "
        r"weight 2: rank 0 has none, rank 1 \S+/kernel \(3, 3\) float32\. Every rank must",
        job.stderr,
        re.M,
    ), job.detail()
    assert "submitted" not in job.stderr, job.detail()  # no agreement error after it
    others_say_once(job, 2, "MismatchError")


def test_a_process_without_a_launcher_says_once_that_it_is_alone():
    token = f"mlcfault-{uuid.uuid4().hex[:12]}"
    job = run_job([PY, str(SCRIPTS / "speak_once_job.py"), "alone", token], token, TIMEOUT_S)
    assert job.returncode == 0, job.detail()
    assert job.stdout.count("rank 0 of 1 averaged to 3.0") == 2, job.detail()
    alone = [line for line in job.stderr.splitlines() if "no launcher started" in line]
    assert alone == [
        "ml_comm: 1 rank: no launcher started this process, so it trains alone; "
        "`mpiexec -n N python SCRIPT` (or srun) runs it on N ranks"
    ], job.detail()


def test_a_one_rank_job_of_a_launcher_says_nothing_of_it():
    token = f"mlcfault-{uuid.uuid4().hex[:12]}"
    cmd = [MPIEXEC, "-n", "1", PY, str(SCRIPTS / "speak_once_job.py"), "alone", token]
    job = run_job(cmd, token, TIMEOUT_S, clean_env())
    assert job.returncode == 0, job.detail()
    assert "no launcher" not in job.stderr, job.detail()
