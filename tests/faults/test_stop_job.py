"""A signal that one rank receives (as Slurm sends at a time limit or on preemption)
stops every rank of a NumPy loop at the same step, with the same weights, through
ml_comm.catch_stop_signals() and should_stop(); the job then ends well (exit 0).

Each case launches `mpiexec -n N python scripts/stop_job.py ...` under a timeout.
"""

from __future__ import annotations

import re

import pytest
from jobs import mpiexec_job

TIMEOUT_S = 120
FIRE_STEP = 30


@pytest.mark.parametrize(
    "nranks,victim,signame,ksteps",
    [
        (2, 1, "SIGTERM", 0),
        (2, 0, "SIGUSR1", 0),
        (3, 2, "SIGTERM", 0),
        (3, 1, "SIGINT", 0),
        (2, 1, "SIGUSR2", -1),
        (3, 0, "SIGTERM", -1),
        (1, 0, "SIGTERM", 0),
    ],
)
def test_every_rank_stops_at_the_same_step(nranks, victim, signame, ksteps):
    job = mpiexec_job(
        nranks, "stop_job.py", signame, str(victim), str(FIRE_STEP), str(ksteps), timeout=TIMEOUT_S
    )
    assert job.returncode == 0, job.detail()
    steps = {
        int(r): int(s) for r, s in re.findall(r"rank (\d+) stopped after step (\d+)", job.stdout)
    }
    assert sorted(steps) == list(range(nranks)), job.detail()
    assert len(set(steps.values())) == 1, (
        f"ranks stopped at different steps {steps}\n{job.detail()}"
    )
    # The flag rides in the next request's signature: the stop comes within a step or two.
    assert FIRE_STEP <= steps[0] <= FIRE_STEP + 2, job.detail()
    assert f"rank {victim} stopped after step {steps[0]} (signals: {signame})" in job.stdout
    assert f"rank {victim}: received {signame}; every rank stops" in job.stderr, job.detail()
    # The launcher may run two ranks' lines together: match the number, not up to a space.
    weights = re.findall(r"rank \d+ of \d+ weights (-?[0-9.]+(?:e[-+]?\d+)?)", job.stdout)
    assert len(weights) == nranks, job.detail()
    weights = set(weights)
    assert len(weights) == 1, job.detail()
