"""The test bed's srun starts a step again when Slurm's PMI server (or UCX, reading a peer's
address) broke it at MPI start-up, and only then, STARTS times at most, each time with the
heap shifted by another length.
Runs without the test bed: `srun` and `scancel` here are scripts that play the broken step
(its slurmstepd line, then a hang or a quick failure) and the good one."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from slurm_step import HEAP_SHIFT, PMI_SERVER_BROKE, STARTS, UCX_ADDRESS_BROKE, run_step

FAKE_SRUN = """#!/bin/bash
n=$(cat "$STATE/calls" 2>/dev/null || echo 0); echo $((n + 1)) > "$STATE/calls"
echo "${{#{shift}}}" >> "$STATE/shifts"
if [ "$n" -lt "$BROKEN_STARTS" ]; then
    echo "slurmstepd-node1: error: $BROKEN_LINE" >&2
    printf 'address bytes, not UTF-8: \\xb4\\x1f\\n' >&2
    [ -n "$BROKEN_EXIT" ] && exit "$BROKEN_EXIT"
    echo $$ > "$STATE/pid"; exec sleep 600
fi
echo "ran: $*"; exit "${{EXIT:-0}}"
"""
FAKE_SCANCEL = '#!/bin/bash\nkill "$(cat "$STATE/pid")"\n'


def fake_env(tmp_path: Path, broken_starts: int, **env: str) -> dict:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (
        ("srun", FAKE_SRUN.format(shift=HEAP_SHIFT)),
        ("scancel", FAKE_SCANCEL),
    ):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    path = f"{bin_dir}{os.pathsep}{os.environ['PATH']}"
    full = dict(
        os.environ,
        PATH=path,
        STATE=str(tmp_path),
        BROKEN_STARTS=str(broken_starts),
        BROKEN_LINE=PMI_SERVER_BROKE[0],
        BROKEN_EXIT="",
    )
    return dict(full, **env)


def srun(tmp_path: Path, env: dict, timeout: float = 60):
    return run_step(["--nodes=2", "python", "x.py"], env, tmp_path, timeout)


def calls(tmp_path: Path) -> int:
    return int((tmp_path / "calls").read_text())


def heap_shifts(tmp_path: Path) -> list[int]:
    """The length of HEAP_SHIFT that each start saw (0: not set)."""
    return [int(line) for line in (tmp_path / "shifts").read_text().split()]


def test_a_step_broken_at_start_up_runs_again_at_once(tmp_path):
    t0 = time.monotonic()
    proc = srun(tmp_path, fake_env(tmp_path, broken_starts=1))
    assert proc.returncode == 0 and "ran: " in proc.stdout, proc
    assert calls(tmp_path) == 2
    assert time.monotonic() - t0 < 20  # ended on the line, not at the time limit


@pytest.mark.parametrize("line", [*PMI_SERVER_BROKE, *UCX_ADDRESS_BROKE])
@pytest.mark.parametrize("exit_code", ["", "143"], ids=["hangs", "fails"])
def test_each_line_of_a_broken_start_starts_the_step_again(tmp_path, line, exit_code):
    env = fake_env(tmp_path, broken_starts=1, BROKEN_LINE=line, BROKEN_EXIT=exit_code)
    proc = srun(tmp_path, env)
    assert proc.returncode == 0 and "ran: " in proc.stdout, proc
    assert calls(tmp_path) == 2


def test_a_step_broken_at_every_start_but_the_last_runs(tmp_path):
    proc = srun(tmp_path, fake_env(tmp_path, broken_starts=STARTS - 1))
    assert proc.returncode == 0 and "ran: " in proc.stdout, proc
    assert calls(tmp_path) == STARTS
    # The same start-up breaks the same way: every start has a heap layout of its own.
    shifts = heap_shifts(tmp_path)
    assert shifts[0] == 0 and len(set(shifts)) == STARTS, shifts
    assert min(shifts[1:]) > 512, shifts  # glibc's heap, not pymalloc's arenas


def test_it_gives_up_after_its_starts(tmp_path):
    proc = srun(tmp_path, fake_env(tmp_path, broken_starts=STARTS))
    assert proc.returncode != 0 and PMI_SERVER_BROKE[0] in proc.stderr
    assert calls(tmp_path) == STARTS


def test_a_failing_program_is_not_run_again(tmp_path):
    proc = srun(tmp_path, fake_env(tmp_path, broken_starts=0, EXIT="3"))
    assert proc.returncode == 3
    assert calls(tmp_path) == 1 and heap_shifts(tmp_path) == [0]


def test_a_hung_step_still_fails_at_its_timeout(tmp_path):
    env = fake_env(tmp_path, broken_starts=0)
    (tmp_path / "bin" / "srun").write_text('#!/bin/bash\necho $$ > "$STATE/pid"; exec sleep 600\n')
    with pytest.raises(pytest.fail.Exception, match="timed out after 2 s"):
        srun(tmp_path, env, timeout=2)


def test_from_a_shell_it_starts_again_passes_output_through_and_exits_with_the_status(tmp_path):
    """The requeue tests' batch scripts run their step this way, in every allocation."""
    env = fake_env(tmp_path, broken_starts=1, BROKEN_EXIT="143", EXIT="75")
    script = Path(__file__).with_name("slurm_step.py")
    proc = subprocess.run(
        [sys.executable, str(script), "60", "--mpi=pmi2", "python", "x.py"],
        env=env, cwd=tmp_path, capture_output=True, text=True, errors="replace", timeout=60,
    )  # fmt: skip
    assert proc.returncode == 75, proc
    assert calls(tmp_path) == 2
    assert "ran: " in proc.stdout and "srun started again" in proc.stdout, proc
    assert proc.stderr.count(PMI_SERVER_BROKE[0]) == 1, proc  # the broken start's, once
