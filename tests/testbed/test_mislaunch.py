"""srun without the PMI that the MPI speaks (here --mpi=none; the test bed's default is
pmi2): each task's MPI sees one rank, and ml_comm's init stops every task with the
cause and the fix instead of training two separate 1-rank jobs (ml_comm/mpi/launch.py)."""

from __future__ import annotations

import sys
import uuid

PY = sys.executable
SCRIPT = "tests/faults/scripts/launch_job.py"


def test_srun_without_pmi2_fails_on_every_task_with_the_fix(testbed):
    token = f"mlcfault-{uuid.uuid4().hex[:12]}"
    proc = testbed.srun([PY, SCRIPT, token], mpi="none", timeout=90)
    detail = (
        f"exit {proc.returncode}\nstdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}"
    )
    assert proc.returncode != 0, detail
    assert "trained:" not in proc.stdout, detail
    said = "the launcher started this job as 2 tasks (SLURM_STEP_NUM_TASKS=2 (srun)"
    # The first task to fail ends the step (--kill-on-bad-exit=1): the other may be
    # terminated before it has said it too.
    assert proc.stderr.count(said) >= 1, detail
    assert "srun --mpi=pmi2" in proc.stderr, detail


def test_srun_with_pmi2_trains_as_one_job(testbed):
    token = f"mlcfault-{uuid.uuid4().hex[:12]}"
    proc = testbed.srun([PY, SCRIPT, token], timeout=90)
    detail = (
        f"exit {proc.returncode}\nstdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}"
    )
    assert proc.returncode == 0, detail
    for rank in (0, 1):
        assert f"trained: rank {rank} of 2, average 1.5" in proc.stdout, detail
