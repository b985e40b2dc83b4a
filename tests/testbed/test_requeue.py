"""Requeue on the test bed (two namespace nodes, real Slurm): an `sbatch --requeue` job
that runs the README's batch script around a serial Keras script with
BackupAndRestore is signalled (`scancel --signal=USR1`, what `--signal=USR1@T` sends
before a time limit) in its first allocation, stops on every rank with status 75,
requeues itself (`scontrol requeue`), resumes from the backup in its second
allocation, and ends with the weights of an uninterrupted run, bit for bit.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
import uuid
from pathlib import Path

import numpy as np

PY = sys.executable
ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tests" / "faults" / "scripts" / "keras_backup.py"
JOB_TIMEOUT_S = 480

BATCH = """#!/bin/bash
srun --kill-on-bad-exit=1 --mpi=pmi2 {py} {script} {backup} {out} {token}
status=$?
echo "ml_comm-test: srun status $status restart ${{SLURM_RESTART_COUNT:-0}}"
if [ "$status" -eq 75 ]; then
    scontrol requeue "$SLURM_JOB_ID"
fi
exit "$status"
"""


def weights(out: Path, rank: int) -> list[np.ndarray]:
    with np.load(out / f"weights.rank{rank}.npz") as f:
        return [f[k] for k in sorted(f.files, key=lambda k: int(k.split("_")[1]))]


def slurm(testbed, *args: str) -> str:
    return subprocess.run(
        list(args), env=testbed.env, capture_output=True, text=True, timeout=60
    ).stdout


def test_sbatch_requeue_resumes_exactly(testbed, tmp_path):
    plain_out, job_out = tmp_path / "plain", tmp_path / "job"
    plain_out.mkdir()
    job_out.mkdir()
    env = dict(testbed.env, ML_COMM_TEST_BATCH_SLEEP="0.25", TF_CPP_MIN_LOG_LEVEL="2")
    token = f"mlcrequeue-{uuid.uuid4().hex[:12]}"
    plain = testbed.srun([PY, str(SCRIPT), str(tmp_path / "plain-backup"), str(plain_out), token])
    assert plain.returncode == 0, plain.stdout[-3000:] + plain.stderr[-3000:]

    batch = tmp_path / "job.sh"
    batch.write_text(
        BATCH.format(py=PY, script=SCRIPT, backup=tmp_path / "backup", out=job_out, token=token)
    )
    log = tmp_path / "job.log"
    submitted = subprocess.run(
        [
            "sbatch",
            "--parsable",
            "--requeue",
            "--open-mode=append",
            f"--output={log}",
            "--nodes=2",
            "--ntasks-per-node=1",
            "--time=6",
            f"--job-name={token}",
            str(batch),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert submitted.returncode == 0, submitted.stderr
    job = submitted.stdout.strip().split(";")[0]
    deadline = time.monotonic() + JOB_TIMEOUT_S
    signalled = False
    try:
        while time.monotonic() < deadline:
            text = log.read_text() if log.exists() else ""
            if not signalled and re.search(r"^epoch 2$", text, flags=re.M):
                subprocess.run(["scancel", "--signal=USR1", job], env=env, timeout=60, check=True)
                signalled = True
            if "srun status 0 restart 1" in text and not slurm(testbed, "squeue", "-h", "-j", job):
                break
            time.sleep(0.2)
        else:
            raise AssertionError(f"job {job} did not end in {JOB_TIMEOUT_S} s:\n{text[-4000:]}")
    finally:
        subprocess.run(["scancel", job], env=env, capture_output=True, timeout=60)
    text = log.read_text()
    assert signalled, text[-4000:]
    assert "srun status 75 restart 0" in text, text[-4000:]
    assert "ml_comm: rank 0 stopped on request; exiting with status 75" in text, text[-4000:]
    # The second allocation resumed at the epoch of the backup, not at epoch 0.
    second = text.split("srun status 75 restart 0", 1)[1]
    epochs = re.findall(r"^epoch (\d)$", second, flags=re.M)
    assert epochs and epochs[0] != "0" and epochs[-1] == "4", text[-4000:]
    for rank in range(testbed.nodes):
        for a, b in zip(weights(job_out, rank), weights(plain_out, 0), strict=True):
            assert a.tobytes() == b.tobytes(), f"rank {rank}: weights differ\n{text[-3000:]}"
