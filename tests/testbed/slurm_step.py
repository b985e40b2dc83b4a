"""One srun step for the test-bed tests: a time limit on both sides, and more starts when
Slurm's PMI server broke the step at MPI start-up.

Slurm's pmi2 server (22.05, and SchedMD's code since) reads a task's PMI-1 request with a
single read() of at most 1024 bytes and takes what it got as the whole request. The mpich
wheel (ch4:ucx) publishes its network address at start-up as 4096 bytes read from UCX's
much shorter address buffer, so most of them are whatever lies next to it on the heap; it
sends them hex-encoded (runs of zero bytes shortened) in segments of 511 bytes. A segment
with few zero bytes makes a request longer than 1024 bytes: the server rejects both pieces
(slurmstepd prints one or more of PMI_SERVER_BROKE), and the task hangs until the step's
time limit or fails in MPI_Init. Whether that happens depends on the heap's layout, which
is the same from one start to the next for the same install path, program and environment:
a step that breaks once breaks again when started the same way. Such a step never reached
the program under test, so it is ended at once and started again, up to STARTS times in
all, each time with an environment variable of another length (HEAP_SHIFT): Python copies
the environment onto the heap before MPI starts, so the bytes next to UCX's address
change. The same garbage can also pass the server and reach the peers, whose UCX then
cannot read it (UCX_ADDRESS_BROKE: seen once in a CI run): also a start that never reached
the program under test, started again the same way. Its lines hold raw address bytes,
which are not UTF-8, so the step's output is read with such bytes replaced. Anything else
(a failure, a hang) is the test's result.

    python tests/testbed/slurm_step.py TIMEOUT_S SRUN_OPTIONS... PROGRAM ARGS...

runs one such step from a shell (tools/testbed.sh's self-test, the requeue tests' batch
script), passing its output through as it comes, and exits with its status.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest

# slurmstepd's lines for a request it could not parse; which of them appear depends on
# where the read() cut the request.
PMI_SERVER_BROKE = (
    "mpi/pmi2: invalid client request",
    "mpi/pmi2: value not properly terminated in client request",
    "mpi/pmi2: request not begin with 'cmd='",
)
# UCX's line for a peer's published address it cannot read (MPI start-up, as above).
UCX_ADDRESS_BROKE = ("failed to unpack address",)
STARTS = 4
HEAP_SHIFT = "ML_COMM_TESTBED_HEAP_SHIFT"


def run_step(
    options: list[str], env: dict, cwd: Path, timeout: float, echo: bool = False
) -> subprocess.CompletedProcess:
    """`srun OPTIONS` (the program and its arguments last) with a job name of its own.
    With echo, the step's output goes on to this process's as it comes (the returned
    stdout is then empty): a batch script's log shows the epochs while the step runs."""
    proc, broke = _start(options, env, cwd, timeout, echo)
    for start in range(1, STARTS):
        if not broke:
            break
        print("test bed: Slurm's PMI server broke at MPI start-up; srun started again")
        time.sleep(1.0)
        # Larger than pymalloc's 512-byte objects, so that glibc's heap holds the copy.
        shifted = dict(env, **{HEAP_SHIFT: "x" * (1000 * start)})
        proc, broke = _start(options, shifted, cwd, timeout, echo)
    return proc


def _start(
    options: list[str], env: dict, cwd: Path, timeout: float, echo: bool
) -> tuple[subprocess.CompletedProcess, bool]:
    name = f"ml_comm-test-{uuid.uuid4().hex[:8]}"
    cmd = ["srun", f"--job-name={name}", "--kill-on-bad-exit=1", *options]
    with (
        tempfile.TemporaryFile("w+", errors="replace") as out,
        tempfile.TemporaryFile("w+", errors="replace") as err,
    ):
        stdout = None if echo else out
        job = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=stdout, stderr=err, text=True)
        deadline, broke, echoed = time.monotonic() + timeout, False, 0
        while job.poll() is None and time.monotonic() < deadline and not broke:
            time.sleep(0.2)
            err.seek(0)
            text = err.read()
            echoed = _echo(text, echoed) if echo else echoed
            broke = server_broke(text)
        timed_out = job.poll() is None and not broke
        if job.poll() is None:
            subprocess.run(["scancel", f"--name={name}"], env=env, timeout=30)
            if "SLURM_JOB_ID" in env:  # a step of a batch job: scancel --name names jobs
                job.terminate()  # srun passes it on to the step's tasks
            try:
                job.wait(timeout=30)
            except subprocess.TimeoutExpired:
                job.kill()
                job.wait()
        out.seek(0)
        err.seek(0)
        proc = subprocess.CompletedProcess(cmd, job.returncode, out.read(), err.read())
        if echo:
            _echo(proc.stderr, echoed)
    if timed_out:
        pytest.fail(f"timed out after {timeout} s: {' '.join(cmd)}\n{proc.stdout[-4000:]}")
    return proc, broke or (proc.returncode != 0 and server_broke(proc.stderr))


def _echo(stderr: str, echoed: int) -> int:
    """Write what the step added to its stderr since the last call; returns the length."""
    sys.stderr.write(stderr[echoed:])
    sys.stderr.flush()
    return len(stderr)


def server_broke(stderr: str) -> bool:
    """Whether MPI's start-up broke the step (Slurm's PMI server or UCX, as above)."""
    return any(line in stderr for line in (*PMI_SERVER_BROKE, *UCX_ADDRESS_BROKE))


if __name__ == "__main__":
    # Slurm ends an allocation (a requeue, a time limit) with SIGTERM to every process of
    # the batch step, srun and this one among them: srun passes it on to the tasks and
    # still forwards what they print last (rank 0's "requeued" line), so this one keeps
    # passing that on until srun has ended, instead of dying first.
    signal.signal(signal.SIGTERM, lambda signum, frame: None)
    step = run_step(sys.argv[2:], dict(os.environ), Path.cwd(), float(sys.argv[1]), echo=True)
    raise SystemExit(step.returncode)
