"""Ranks that average arrays of different lengths both raise, within seconds, with a
message that names each rank and its size; the job then goes on and exits 0.

Plain pytest around `mpiexec -n 2 python scripts/mismatch_job.py` (the in-process
cases, at 2-4 ranks, are in tests/mpi/test_mismatch.py).
"""

from __future__ import annotations

import re

import pytest
from jobs import mpiexec_job

TIMEOUT_S = 90


@pytest.mark.parametrize("count", [100, 1 << 20], ids=["latency-path", "threads"])
def test_length_mismatch_raises_on_both_within_10s(count):
    job = mpiexec_job(2, "mismatch_job.py", str(count), timeout=TIMEOUT_S)
    assert job.returncode == 0, job.detail()
    want = (
        rf"ranks disagree on team 0 request 1: rank 0 submitted 1 tensor, {count} float32 "
        rf"elements \(average\); rank 1 submitted 1 tensor, {count + 1} float32 elements"
    )
    for rank in (0, 1):
        found = re.search(
            rf"rank {rank} raised after (\d+\.\d+) s: average failed: {want}", job.stdout
        )
        assert found, job.detail()
        assert float(found.group(1)) < 10, job.detail()
        assert f"rank {rank} then averaged to 0.5" in job.stdout, job.detail()
