"""A rank that dies, raises or leaves mid-training ends the whole srun job on the test bed
(two namespace nodes, one rank each) within seconds, and no process is left.

SIGKILL relies on Slurm ending the step when a task dies: srun --kill-on-bad-exit=1
(the fixture's srun passes it; docs/faults.md). An uncaught exception (the
excepthook) and leaving early (finalize at exit) end it through MPI_Abort.
"""

from __future__ import annotations

import sys
import time
import uuid
from pathlib import Path

import pytest

PY = sys.executable
SCRIPT = "tests/faults/scripts/faulty_training.py"
END_WITHIN_S = 30


def processes_with(token: str) -> list[str]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (entry / "status").read_text()
        except OSError:
            continue
        if token in cmdline and "\nState:\tZ" not in state:
            found.append(f"{entry.name}: {cmdline.strip()}")
    return found


@pytest.mark.parametrize(
    "mode,want",
    [
        ("kill", "task 1: Killed"),
        ("raise", "ml_comm: rank 1 of 2: uncaught RuntimeError; aborting the job"),
        ("exit", "ml_comm: rank 1 of 2 is leaving (finalize(), sys.exit() or the end of the"),
    ],
    ids=["kill", "raise", "exit"],
)
def test_failing_rank_ends_the_srun_job(testbed, mode, want):
    token = f"mlcfault-{uuid.uuid4().hex[:12]}"
    start = time.monotonic()
    proc = testbed.srun([PY, SCRIPT, mode, "1", token], timeout=90)
    seconds = time.monotonic() - start
    detail = (
        f"exit {proc.returncode} after {seconds:.1f} s\n"
        f"stdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}"
    )
    assert "started rank 0" in proc.stdout and "started rank 1" in proc.stdout, detail
    assert proc.returncode != 0, detail
    assert seconds < END_WITHIN_S, detail
    assert want in proc.stderr, detail
    deadline = time.monotonic() + 10
    while processes_with(token) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = processes_with(token)
    assert not left, "processes of the job are still running:\n" + "\n".join(left)
