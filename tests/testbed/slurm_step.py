"""One srun step for the test-bed tests: a time limit on both sides, and one more start
when Slurm's PMI server broke the step at MPI start-up.

Slurm's pmi2 server (22.05, and SchedMD's code since) takes each read() of a task's
socket as one whole PMI-1 request. A long request that arrives in two pieces (MPICH's
start-up puts its address in segments of up to ~1 KB) is rejected, and the task then
waits for a reply that never comes: the step would hang until its time limit. Rare (none
in 450 start-ups here, but twice in a row in one CI run); slurmstepd then prints
PMI_SERVER_BROKE. Such a step never reached the program under test, so it is ended at
once and started again, up to STARTS times in all, a second apart; anything else (a
failure, a hang) is the test's result.
"""

from __future__ import annotations

import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import pytest

PMI_SERVER_BROKE = "mpi/pmi2: invalid client request"
STARTS = 4


def run_step(
    options: list[str], env: dict, cwd: Path, timeout: float
) -> subprocess.CompletedProcess:
    """`srun OPTIONS` (the program and its arguments last) with a job name of its own."""
    proc, broke = _start(options, env, cwd, timeout)
    for _ in range(STARTS - 1):
        if not broke:
            break
        print(f"test bed: {PMI_SERVER_BROKE!r} at MPI start-up; srun started again")
        time.sleep(1.0)
        proc, broke = _start(options, env, cwd, timeout)
    return proc


def _start(
    options: list[str], env: dict, cwd: Path, timeout: float
) -> tuple[subprocess.CompletedProcess, bool]:
    name = f"ml_comm-test-{uuid.uuid4().hex[:8]}"
    cmd = ["srun", f"--job-name={name}", "--kill-on-bad-exit=1", *options]
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        job = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=err, text=True)
        deadline, broke = time.monotonic() + timeout, False
        while job.poll() is None and time.monotonic() < deadline and not broke:
            time.sleep(0.2)
            err.seek(0)
            broke = PMI_SERVER_BROKE in err.read()
        timed_out = job.poll() is None and not broke
        if job.poll() is None:
            subprocess.run(["scancel", f"--name={name}"], env=env, timeout=30)
            try:
                job.wait(timeout=30)
            except subprocess.TimeoutExpired:
                job.kill()
                job.wait()
        out.seek(0)
        err.seek(0)
        proc = subprocess.CompletedProcess(cmd, job.returncode, out.read(), err.read())
    if timed_out:
        pytest.fail(f"timed out after {timeout} s: {' '.join(cmd)}\n{proc.stdout[-4000:]}")
    return proc, broke or (proc.returncode != 0 and PMI_SERVER_BROKE in proc.stderr)
