"""A job launched as several tasks whose MPI sees one rank in each (srun without
--mpi=pmi2, another MPI's mpiexec) must not train as N separate 1-rank jobs: init
fails on every task with the cause and the fix (ml_comm/mpi/launch.py).

Each test starts real 1-rank MPI processes (`mpiexec -n 1`, or a singleton) and gives
them the environment a 2-task launcher would have set.
"""

from __future__ import annotations

import uuid

import pytest
from jobs import MPIEXEC, PY, SCRIPTS, clean_env, run_job

TIMEOUT_S = 60

# What each launcher puts in every task's environment for a 2-task job.
TWO_TASK_ENVIRONMENTS = {
    "srun": {"SLURM_STEP_NUM_TASKS": "2", "SLURM_STEP_ID": "0", "SLURM_NTASKS": "2"},
    "srun, SLURM_NTASKS only": {"SLURM_STEP_ID": "0", "SLURM_NTASKS": "2"},
    "Open MPI's mpirun": {"OMPI_COMM_WORLD_SIZE": "2"},
    "MVAPICH's mpirun_rsh": {"MV2_COMM_WORLD_SIZE": "2"},
}


def one_rank_job(singleton: bool = False, killed_at_raise: bool = False, **env: str):
    token = f"mlcfault-{uuid.uuid4().hex[:12]}"
    script = [PY, str(SCRIPTS / "launch_job.py"), token]
    if killed_at_raise:
        script.append("--killed-at-raise")
    cmd = script if singleton else [MPIEXEC, "-n", "1", *script]
    return run_job(cmd, token, TIMEOUT_S, clean_env(**env))


@pytest.mark.parametrize("launcher", sorted(TWO_TASK_ENVIRONMENTS))
def test_a_task_of_a_two_task_job_that_mpi_runs_alone_fails_with_the_fix(launcher):
    job = one_rank_job(**TWO_TASK_ENVIRONMENTS[launcher])
    assert job.returncode not in (0, None), job.detail()
    assert "trained:" not in job.stdout, job.detail()
    assert "the launcher started this job as 2 tasks" in job.stderr, job.detail()
    assert "but MPI sees 1 rank: every task would train alone" in job.stderr, job.detail()
    assert "srun --mpi=pmi2" in job.stderr, job.detail()
    assert "ML_COMM_ALLOW_ONE_RANK=1" in job.stderr, job.detail()
    name = next(iter(TWO_TASK_ENVIRONMENTS[launcher]))
    assert f"{name}=2" in job.stderr or "SLURM_" in job.stderr, job.detail()


def test_a_singleton_with_a_two_task_environment_fails_too():
    job = one_rank_job(singleton=True, SLURM_STEP_NUM_TASKS="2", SLURM_STEP_ID="0")
    assert job.returncode not in (0, None), job.detail()
    assert "SLURM_STEP_NUM_TASKS=2 (srun)" in job.stderr, job.detail()


def test_a_task_killed_as_init_raises_has_already_said_why():
    # srun --kill-on-bad-exit ends the other tasks as soon as one fails: a task may be
    # gone before its traceback is printed, and the message must be out by then.
    job = one_rank_job(killed_at_raise=True, SLURM_STEP_NUM_TASKS="2", SLURM_STEP_ID="0")
    assert job.returncode not in (0, None), job.detail()
    assert "Traceback" not in job.stderr, job.detail()
    assert "ml_comm: the launcher started this job as 2 tasks" in job.stderr, job.detail()
    assert "srun --mpi=pmi2" in job.stderr, job.detail()


def test_the_opt_out_lets_a_task_run_alone():
    job = one_rank_job(ML_COMM_ALLOW_ONE_RANK="1", SLURM_STEP_NUM_TASKS="2", SLURM_STEP_ID="0")
    assert job.returncode == 0, job.detail()
    assert "trained: rank 0 of 1, average 1.0" in job.stdout, job.detail()


def test_one_task_of_one_or_a_batch_script_allocation_is_not_a_mislaunch():
    # SLURM_NTASKS outside a step is the allocation's (a batch script running python itself).
    for env in ({"SLURM_STEP_NUM_TASKS": "1", "SLURM_STEP_ID": "0"}, {"SLURM_NTASKS": "4"}):
        job = one_rank_job(**env)
        assert job.returncode == 0, job.detail()
        assert "trained: rank 0 of 1, average 1.0" in job.stdout, job.detail()
