"""The teams' threads ask Linux for the time slice ML_COMM_THREAD_SLICE_US says (100 µs
by default; 0: the kernel's own), and a negative value fails init on every rank. Plain
pytest around `mpiexec -n 2 python scripts/thread_slice_job.py`, each with its own
environment; the slices are read back from /proc (se.slice, shown by Linux 6.6 and later;
a slice of its own for an ordinary thread needs 6.12)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from jobs import mpiexec_job

TIMEOUT_S = 90
NTHREADS = 2


def kernel_takes_slices() -> bool:
    release = tuple(int(x) for x in re.findall(r"\d+", os.uname().release)[:2])
    shown = any(
        line.startswith("se.slice") for line in Path("/proc/self/sched").read_text().splitlines()
    )
    return shown and release >= (6, 12)


def slices_per_rank(env: dict[str, str]) -> dict[int, list[int]]:
    # ML_COMM_INLINE_BYTES=0: the average (a ring) runs on the team's threads.
    job = mpiexec_job(
        2, "thread_slice_job.py", str(NTHREADS), timeout=TIMEOUT_S, ML_COMM_INLINE_BYTES="0", **env
    )
    assert job.returncode == 0, job.detail()
    found = re.findall(r"rank (\d+) slices ([0-9,]*)", job.stdout)
    assert sorted(int(r) for r, _ in found) == [0, 1], job.detail()
    return {int(r): [int(s) for s in values.split(",")] for r, values in found}


@pytest.mark.skipif(not kernel_takes_slices(), reason="needs Linux 6.12+ (se.slice in /proc)")
@pytest.mark.parametrize(("value", "want_ns"), [(None, 100_000), ("250", 250_000)])
def test_team_threads_ask_for_the_slice(value, want_ns):
    env = {} if value is None else {"ML_COMM_THREAD_SLICE_US": value}
    for rank, slices in slices_per_rank(env).items():
        assert slices.count(want_ns) == NTHREADS, f"rank {rank}: slices {slices}"


@pytest.mark.skipif(not kernel_takes_slices(), reason="needs Linux 6.12+ (se.slice in /proc)")
def test_zero_keeps_the_kernels_slice():
    default_ns = slices_per_rank({"ML_COMM_THREAD_SLICE_US": "0"})
    for rank, slices in default_ns.items():
        assert len(set(slices)) == 1, f"rank {rank}: slices {slices}"
        assert slices[0] not in (100_000, 250_000), f"rank {rank}: slices {slices}"


def test_a_negative_slice_fails_init_on_every_rank():
    job = mpiexec_job(
        2, "thread_slice_job.py", str(NTHREADS), timeout=TIMEOUT_S, ML_COMM_THREAD_SLICE_US="-3"
    )
    assert job.returncode == 0, job.detail()
    # The launcher may run two ranks' lines together: search, do not split.
    raised = re.findall(
        r"rank (\d+) raised: .*?ML_COMM_THREAD_SLICE_US must be >= 0, got -3", job.stdout
    )
    assert sorted(int(r) for r in raised) == [0, 1], job.detail()
