"""A rank that dies, raises or leaves early ends the whole mpiexec job within
seconds, with a message that names it, and leaves no process behind; jobs in which
every rank ends well still exit 0 (finalize twice, at exit, a busy peer).

Plain pytest: each test launches `mpiexec -n N python scripts/faulty_training.py`
under a timeout. See ml_comm/faults/abort.py and docs/faults.md.
"""

from __future__ import annotations

import os
import re
import select
import signal
import subprocess
import time
import uuid

import pytest
from jobs import (
    MPIEXEC,
    PY,
    SCRIPTS,
    alive,
    children,
    clean_env,
    kill_all_with,
    mpiexec_job,
    wait_gone,
)

SCRIPT = "faulty_training.py"
# The job must end within this (it takes seconds); the subprocess timeout is larger so
# that a slow start on a loaded machine is reported as "too slow", not as a hang.
END_WITHIN_S = 30
TIMEOUT_S = 90


def assert_ended_cleanly_after_failure(job, want_stderr: list[str]):
    assert job.returncode is not None, f"the job hung (killed after {TIMEOUT_S} s)\n{job.detail()}"
    assert job.returncode != 0, f"the job reported success\n{job.detail()}"
    assert job.seconds < END_WITHIN_S, f"the job took {job.seconds:.1f} s\n{job.detail()}"
    for pattern in want_stderr:
        assert re.search(pattern, job.stderr), f"stderr lacks {pattern!r}\n{job.detail()}"
    left = wait_gone(job.token)
    assert not left, "processes of the job are still running:\n" + "\n".join(left) + job.detail()


@pytest.mark.parametrize("nranks,victim", [(2, 1), (3, 1), (3, 0)])
def test_sigkill_ends_the_job(nranks, victim):
    job = mpiexec_job(nranks, SCRIPT, "kill", str(victim), timeout=TIMEOUT_S)
    pids = job.started_pids()
    assert sorted(pids) == list(range(nranks)), f"not every rank started\n{job.detail()}"
    # Hydra names a process of the job and the signal. Which process is a race: the
    # first one it sees end, which may be a survivor that it has just killed itself.
    named = re.search(r"PID (\d+) RUNNING AT", job.output)
    assert named and int(named.group(1)) in pids.values(), job.detail()
    assert "Killed (signal 9)" in job.output, job.detail()
    assert_ended_cleanly_after_failure(job, [])


@pytest.mark.parametrize("nranks,victim", [(2, 1), (3, 2)])
def test_uncaught_exception_aborts_the_job(nranks, victim):
    job = mpiexec_job(nranks, SCRIPT, "raise", str(victim), timeout=TIMEOUT_S)
    assert_ended_cleanly_after_failure(
        job,
        [
            rf"ml_comm: rank {victim} of {nranks}: uncaught RuntimeError; aborting the job",
            rf"RuntimeError: injected failure on rank {victim} at step 20",  # the traceback
        ],
    )
    # MPI_Abort's error code is the job's exit status. (MPICH's own "MPI_Abort(...)"
    # line is not asserted: the launcher may kill the rank before it is printed.)
    assert job.returncode == 1, job.detail()


@pytest.mark.parametrize("nranks,victim", [(2, 1), (3, 0)])
def test_uncaught_exception_in_a_thread_aborts_the_job(nranks, victim):
    """Without the thread hook the main thread trains on for a minute and the job
    ends well: the test would fail on its time and exit status."""
    job = mpiexec_job(nranks, SCRIPT, "thread_raise", str(victim), timeout=TIMEOUT_S)
    assert_ended_cleanly_after_failure(
        job,
        [
            rf"ml_comm: rank {victim} of {nranks}: uncaught RuntimeError in thread 'loader'; "
            "aborting the job",
            rf"RuntimeError: injected failure in a thread of rank {victim} at step 20",
        ],
    )
    assert job.seconds < 10, f"the job took {job.seconds:.1f} s\n{job.detail()}"
    assert job.returncode == 1, job.detail()


def test_uncaught_exception_opt_out_still_ends_the_job():
    """ML_COMM_ABORT_ON_EXCEPTION=0: no abort from the hook, so the rank exits through
    finalize at exit, which finds rank 0 waiting for it and aborts there instead."""
    job = mpiexec_job(2, SCRIPT, "raise", "1", timeout=TIMEOUT_S, ML_COMM_ABORT_ON_EXCEPTION="0")
    assert "uncaught RuntimeError; aborting" not in job.stderr, job.detail()
    assert_ended_cleanly_after_failure(
        job,
        [
            r"RuntimeError: injected failure on rank 1",
            r"rank 1 of 2 is leaving .* while rank 0 waits for it in team 0's request \d+ or "
            r"later, which rank 1 never made \(its last on team 0 was request \d+: ",
        ],
    )


@pytest.mark.parametrize(
    "mode,nranks,victim", [("exit", 2, 1), ("exit", 3, 1), ("finalize_exit", 2, 0)]
)
def test_leaving_while_others_wait_aborts_the_job(mode, nranks, victim):
    job = mpiexec_job(nranks, SCRIPT, mode, str(victim), timeout=TIMEOUT_S)
    assert_ended_cleanly_after_failure(
        job,
        [
            rf"ml_comm: rank {victim} of {nranks} is leaving \(finalize\(\), sys.exit\(\) or the "
            rf"end of the script\) while rank \d waits for it in team 0's (first )?request",
        ],
    )
    assert job.returncode == 1, job.detail()  # MPI_Abort's error code
    waiting = int(re.search(r"while rank (\d) waits", job.stderr).group(1))
    assert waiting != victim and 0 <= waiting < nranks, job.detail()


def test_an_exception_through_finalize_is_named_with_its_traceback():
    """A rank whose exception goes through a `finally: finalize()` while the others wait
    for it: the abort ends the process before Python would print the exception, so the
    message names it and carries its traceback."""
    job = mpiexec_job(2, SCRIPT, "raise_finally", "1", timeout=TIMEOUT_S)
    assert_ended_cleanly_after_failure(
        job,
        [
            r"ml_comm: rank 1 of 2 is leaving \(finalize\(\) with a RuntimeError in flight, "
            r"traceback below\) while rank 0 waits for it in team 0's request",
            r"RuntimeError: injected failure on rank 1 at step 20",
        ],
    )
    assert job.returncode == 1, job.detail()


@pytest.mark.parametrize(
    "mode,nranks", [("no_finalize", 3), ("finalize_twice", 2), ("busy_peer", 2)]
)
def test_jobs_that_end_well_exit_zero(mode, nranks):
    """finalize is safe twice and at exit, and a rank that is merely busy (not in an
    ml_comm call) when the others leave is waited for, not aborted."""
    job = mpiexec_job(nranks, SCRIPT, mode, "0", timeout=TIMEOUT_S)
    assert job.returncode == 0, job.detail()
    for r in range(nranks):
        assert f"done rank {r}" in job.stdout, job.detail()
    assert "ml_comm:" not in job.stderr, job.detail()
    assert not wait_gone(job.token)


def test_ranks_exit_when_the_launcher_dies():
    """mpiexec's proxy is SIGKILLed (as in a clean-up race of the launcher), then a
    rank: the surviving rank, now an orphan whose peer is gone, must not spin in its
    reduction forever; it notices that its parent is gone and exits."""
    token = f"mlcfault-{uuid.uuid4().hex[:12]}"
    cmd = [MPIEXEC, "-n", "2", PY, str(SCRIPTS / SCRIPT), "long", "0", token]
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
        env=clean_env(),
        start_new_session=True,
    )
    try:
        pids = read_started(proc, 2, timeout=60)
        proxies = [p for p, name in children(proc.pid) if name == "hydra_pmi_proxy"]
        assert len(proxies) == 1, f"mpiexec's children: {children(proc.pid)}"
        time.sleep(0.5)  # the ranks are training
        os.kill(proxies[0], signal.SIGKILL)
        os.kill(pids[1], signal.SIGKILL)
        deadline = time.monotonic() + 10
        while alive(pids[0]) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not alive(pids[0]), "rank 0 is still running 10 s after its launcher died"
        left = wait_gone(token)
        assert not left, "processes of the job are still running:\n" + "\n".join(left)
    finally:
        kill_all_with(token)
        proc.kill()
        proc.communicate(timeout=30)


def read_started(proc, nranks: int, timeout: float) -> dict[int, int]:
    """rank -> pid from the job's "started" lines, read as they come."""
    text = ""
    fd = proc.stdout.fileno()  # raw reads: a buffered reader would hide data from select
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.5)
        if ready:
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            text += chunk.decode(errors="replace")
        pids = {int(r): int(p) for r, p in re.findall(r"started rank (\d+) pid (\d+)", text)}
        if len(pids) == nranks:
            return pids
    raise AssertionError(f"the ranks did not start within {timeout} s: {text!r}")
