"""`python -m ml_comm --check` under mpiexec: one report from rank 0 with each rank's
line, a test reduction with its result and time, the task count against the MPI size,
the network variables in effect, each host's cores, and the loaded libmpi
(ml_comm/mpi/check_report.py)."""

from __future__ import annotations

import re
import uuid

from jobs import MPIEXEC, PY, clean_env, run_job

TIMEOUT_S = 120


# Runs the rest of its command line bound to the lowest CPU it may use now.
ONE_CORE = [PY, "-c", "import os, sys; os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}); "
            "os.execv(sys.argv[1], sys.argv[1:])"]  # fmt: skip


def check_job(nranks: int, prefix: tuple[str, ...] = (), **env: str):
    token = f"mlcfault-{uuid.uuid4().hex[:12]}"
    # The token rides on the command line as an -X option that Python only records.
    cmd = [*prefix, MPIEXEC, "-n", str(nranks), PY, "-X", f"ml_comm_token={token}"]
    cmd += ["-m", "ml_comm", "--check"]
    return run_job(cmd, token, TIMEOUT_S, clean_env(ML_COMM_CHECK_SKIP_TF="1", **env))


def test_two_ranks_give_one_report_with_every_rank_and_an_exact_reduction():
    job = check_job(2, FI_LOG_LEVEL="warn", UCX_LOG_LEVEL="error")
    assert job.returncode == 0, job.detail()
    out = job.stdout
    assert out.count("ml_comm check: 2 MPI ranks") == 1, job.detail()
    for rank in (0, 1):
        assert len(re.findall(rf"^rank {rank} +\S+ pid \d+ /\S*libmpi", out, re.M)) == 1, out
    assert re.search(
        r"test reduction average of \d+ float32 .* over 2 ranks: exact, [\d.]+ ms", out
    )
    assert re.search(r"^launcher +PMI_SIZE=2.*; MPI size 2: match$", out, re.M), out
    assert re.search(r"^network vars .*FI_LOG_LEVEL=warn UCX_LOG_LEVEL=error", out, re.M), out
    assert re.search(r"^MPI library +/\S*libmpi\S* \(MPICH Version: ", out, re.M), out
    assert "transport      device ch4:" in out, out
    assert re.search(
        r"^cores +\S+: ranks 0,1 on cpus [\d,-]+ \(\d+ cores?; each rank may use \d+\)$", out, re.M
    ), out
    assert "may run on one core only" not in out, out
    assert "PROBLEM" not in out, out


def test_ranks_bound_to_one_core_get_a_note_not_a_failure():
    job = check_job(2, prefix=tuple(ONE_CORE))
    assert job.returncode == 0, job.detail()
    out = job.stdout
    assert re.search(
        r"^cores +\S+: ranks 0,1 on cpus \d+ \(1 core; each rank may use 1\)$", out, re.M
    ), out
    assert re.search(r"^note +ranks 0,1 on \S+ may run on one core only: ", out, re.M), out
    assert "PROBLEM" not in out, out


def test_a_mislaunch_is_reported_and_fails():
    job = check_job(1, SLURM_STEP_NUM_TASKS="2", SLURM_STEP_ID="0", SLURM_JOB_ID="7")
    assert job.returncode == 1, job.detail()
    out = job.stdout
    assert "SLURM_STEP_NUM_TASKS=2" in out and "MPI size 1: DO NOT MATCH" in out, out
    assert "PROBLEM: the launcher started this job as 2 tasks" in out, out
    assert "test reduction not run" in out, out
    # The bundled wheel under Slurm gets its note.
    assert "note           this is the MPICH wheel bundled" in out, out


def test_the_settings_in_effect_are_listed_and_a_misspelt_one_fails():
    job = check_job(2, ML_COMM_STALL_ABORT_SECONDS="60", ML_COMM_COMPRESION="bf16")
    assert job.returncode == 1, job.detail()
    out = job.stdout
    assert re.search(r"^setting +ML_COMM_STALL_ABORT_SECONDS=60$", out, re.M), out
    assert re.search(r"^setting +ML_COMM_CHECK_SKIP_TF=1$", out, re.M), out
    assert re.search(
        r"^setting +ML_COMM_COMPRESION=bf16  NOT A SETTING \(did you mean ML_COMM_COMPRESSION\?\)$",
        out,
        re.M,
    ), out
    assert re.search(r"^settings +2 of \d+ set; the others at their defaults", out, re.M), out
    assert "PROBLEM: ML_COMM_COMPRESION is not a setting of ml_comm" in out, out
    assert re.search(r"over 2 ranks: exact", out), out  # the misspelt name does nothing
    assert "warning: ignoring" not in job.stderr, job.detail()  # the report says it


def test_a_value_init_would_refuse_is_a_problem():
    job = check_job(2, ML_COMM_COMPRESSION="bf17")
    assert job.returncode == 1, job.detail()
    out = job.stdout
    assert re.search(r"^setting +ML_COMM_COMPRESSION=bf17$", out, re.M), out
    for rank in (0, 1):
        assert f"PROBLEM: rank {rank}: environment variable ML_COMM_COMPRESSION must be" in out
    assert "test reduction not run" in out, out


def test_a_compared_setting_that_differs_between_ranks_is_a_problem():
    """init refuses to start where a setting that changes how ranks communicate differs;
    the report says so instead of the job ending in init's error."""
    token = f"mlcfault-{uuid.uuid4().hex[:12]}"
    rank = [PY, "-X", f"ml_comm_token={token}", "-m", "ml_comm", "--check"]
    cmd = [MPIEXEC, "-n", "1", *rank, ":", "-n", "1", "-env", "ML_COMM_DIRECT_BYTES", "0", *rank]
    job = run_job(cmd, token, TIMEOUT_S, clean_env(ML_COMM_CHECK_SKIP_TF="1"))
    assert job.returncode == 1, job.detail()
    out = job.stdout
    assert "PROBLEM: init refused to start: " in out, job.detail()
    assert "ML_COMM_DIRECT_BYTES: rank 0: unset (default); rank 1: 0" in out, job.detail()
    assert "test reduction not run" in out, out
