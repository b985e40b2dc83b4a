"""Requeue the Slurm batch job after every rank stopped together (opt-in).

ML_COMM_REQUEUE_ON_STOP=1: after a stop on a signal (`ml_comm.keras.callbacks.StopTogether`, or a
custom loop that calls `requeue_slurm_job()` after `finalize`), rank 0 runs
`scontrol requeue $SLURM_JOB_ID`, so that the job of an `sbatch --requeue` goes back to
the queue and resumes from its backup in its next allocation. It is done here, after
`finalize` (every rank has written what it had to), rather than by the batch script
from srun's exit status: with `srun --kill-on-bad-exit=1`, srun kills the ranks that
are still shutting down when the first one exits with a non-zero status, and what it
then reports is not always the status the ranks chose.
"""

from __future__ import annotations

import os
import subprocess
import sys

from ..core import settings

ENV = "ML_COMM_REQUEUE_ON_STOP"


def wanted() -> bool:
    return settings.get(ENV)


def requeue_slurm_job(rank: int) -> bool:
    """On rank 0 of a Slurm job: `scontrol requeue` it. True when Slurm accepted it."""
    job = os.environ.get("SLURM_JOB_ID")
    if rank != 0:
        return False
    if not job:
        print(f"ml_comm: {ENV}=1 but this is not a Slurm job: not requeued", file=sys.stderr)
        return False
    done = subprocess.run(["scontrol", "requeue", job], capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        print(
            f"ml_comm: scontrol requeue {job} failed (was it submitted with sbatch "
            f"--requeue?): {done.stderr.strip()}",
            file=sys.stderr,
            flush=True,
        )
        return False
    print(f"ml_comm: job {job} requeued; it resumes from the backup", file=sys.stderr, flush=True)
    return True
