"""Requeue on the test bed (two namespace nodes, real Slurm): an `sbatch --requeue` job
that runs the batch script of docs/faults.md around a serial Keras script with
BackupAndRestore is signalled (`scancel --signal=USR1`, or `--signal=USR1@60` before a
time limit shorter than the training), stops on every rank with status 75, requeues
itself (`scontrol requeue`), resumes from the backup in the next allocation, and ends
with the weights of an uninterrupted run, bit for bit.
"""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path

import numpy as np
import pytest

PY = sys.executable
ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tests" / "faults" / "scripts" / "keras_backup.py"
STEP = ROOT / "tests" / "testbed" / "slurm_step.py"
# Slurm makes a requeued job wait about 2 minutes before it is eligible again.
JOB_TIMEOUT_S = 1500
# Rank 0's "epoch E" lines; not anchored: srun may run two tasks' lines together.
EPOCH = r"epoch (\d+)\b"
# 8 batches an epoch, each followed by a 1 s sleep: 4 minutes or more in all, longer than
# any allocation of --time=3 runs before its signal (2 to 3 minutes) on however fast a
# machine. Sleeps of 0.25 s, 45 epochs, took 15 to 21 epochs an allocation on a loaded
# 2-core machine, and on an idle one ended in 90 s, before the signal.
LONG_EPOCHS = 30
LONG_BATCH_SLEEP_S = "1.0"
# Each requeue waits about 2 minutes in Slurm: CI runs the scancel case only; these two
# (10-20 minutes together) run with ML_COMM_LONG_TESTBED=1.
long_testbed = pytest.mark.skipif(
    os.environ.get("ML_COMM_LONG_TESTBED") != "1",
    reason="a requeue cycle takes minutes (Slurm delays requeued jobs); ML_COMM_LONG_TESTBED=1",
)

# The batch script's srun goes through slurm_step.py, which starts a step whose MPI
# start-up Slurm's PMI server broke again, in every allocation (a requeued one included).
SRUN = "{py} {step} {timeout} --mpi=pmi2 {py} {script} {backup} {out} {token}"
BATCH = """#!/bin/bash
SRUN
status=$?
echo "ml_comm-test: srun status $status restart ${{SLURM_RESTART_COUNT:-0}}"
if [ "$status" -eq 75 ]; then
    scontrol requeue "$SLURM_JOB_ID"
fi
exit "$status"
"""
# ML_COMM_REQUEUE_ON_STOP=1: rank 0 requeues the job itself (ml_comm/faults/requeue.py).
BATCH_OPT_IN = """#!/bin/bash
SRUN
status=$?
echo "ml_comm-test: srun status $status restart ${{SLURM_RESTART_COUNT:-0}}"
exit "$status"
"""


def weights(out: Path, rank: int) -> list[np.ndarray]:
    with np.load(out / f"weights.rank{rank}.npz") as f:
        return [f[k] for k in sorted(f.files, key=lambda k: int(k.split("_")[1]))]


def slurm(testbed, *args: str) -> str:
    return subprocess.run(
        list(args), env=testbed.env, capture_output=True, text=True, timeout=60
    ).stdout


def run_batch_job(
    testbed,
    tmp_path: Path,
    token: str,
    env: dict,
    sbatch_args: list[str],
    signal_at_epoch: int | None = None,
    template: str = BATCH,
) -> str:
    """Submit the batch script; with signal_at_epoch, `scancel --signal=USR1` the job
    once rank 0 has begun that epoch (first allocation). Returns the job's log once it
    ended with srun status 0; fails at once when srun ended with another status than 0
    or 75 (a stop)."""
    srun = SRUN.format(
        py=PY, step=STEP, timeout=JOB_TIMEOUT_S, script=SCRIPT,
        backup=tmp_path / "backup", out=tmp_path / "job", token=token,
    )  # fmt: skip
    batch = tmp_path / "job.sh"
    batch.write_text(template.replace("SRUN", srun).format())
    log = tmp_path / "job.log"
    job = submit(batch, log, token, env, sbatch_args)
    return wait_for_job(testbed, log, job, env, signal_at_epoch)


def submit(batch: Path, log: Path, token: str, env: dict, sbatch_args: list[str]) -> str:
    cmd = ["sbatch", "--parsable", "--requeue", "--open-mode=append", f"--output={log}"]
    cmd += ["--nodes=2", "--ntasks-per-node=1", f"--job-name={token}", *sbatch_args, str(batch)]
    submitted = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
    assert submitted.returncode == 0, submitted.stderr
    return submitted.stdout.strip().split(";")[0]


def wait_for_job(testbed, log: Path, job: str, env: dict, signal_at_epoch: int | None) -> str:
    """The job's log once it ended with srun status 0."""
    deadline = time.monotonic() + JOB_TIMEOUT_S
    text = ""
    try:
        while time.monotonic() < deadline:
            text = log.read_text(errors="replace") if log.exists() else ""
            if signal_at_epoch is not None and re.search(rf"epoch {signal_at_epoch}\b", text):
                subprocess.run(["scancel", "--signal=USR1", job], env=env, timeout=60, check=True)
                signal_at_epoch = None
            ended = re.findall(r"srun status (\d+) restart", text)
            if ended and not slurm(testbed, "squeue", "-h", "-j", job):
                if ended[-1] == "0":
                    return text
                if ended[-1] != "75":
                    raise AssertionError(f"job {job}: srun status {ended[-1]}:\n{text[-4000:]}")
            time.sleep(0.2)
        raise AssertionError(f"job {job} did not end in {JOB_TIMEOUT_S} s:\n{text[-4000:]}")
    finally:
        subprocess.run(["scancel", job], env=env, capture_output=True, timeout=60)


def plain_run(testbed, tmp_path: Path, token: str, env: dict) -> Path:
    out = tmp_path / "plain"
    out.mkdir()
    plain = dataclasses.replace(testbed, env=env).srun(
        [PY, str(SCRIPT), str(tmp_path / "plain-backup"), str(out), token]
    )
    assert plain.returncode == 0, plain.stdout[-3000:] + plain.stderr[-3000:]
    return out


def check_resumed_exactly(testbed, text: str, tmp_path: Path, plain_out: Path, last_epoch: int):
    stops = re.findall(r"srun status 75 restart (\d+)", text)
    assert stops, text[-4000:]
    assert "ml_comm: rank 0 stopped on request; exiting with status 75" in text, text[-4000:]
    # Every allocation after a stop resumed at the epoch of the backup, not at epoch 0.
    for later in text.split("srun status 75 restart")[1:]:
        epochs = re.findall(EPOCH, later)
        assert epochs and epochs[0] != "0", text[-4000:]
    assert re.findall(EPOCH, text)[-1] == str(last_epoch), text[-4000:]
    for rank in range(testbed.nodes):
        for a, b in zip(weights(tmp_path / "job", rank), weights(plain_out, 0), strict=True):
            assert a.tobytes() == b.tobytes(), f"rank {rank}: weights differ\n{text[-3000:]}"


def test_scancel_signal_requeues_and_resumes_exactly(testbed, tmp_path):
    (tmp_path / "job").mkdir()
    token = f"mlcrequeue-{uuid.uuid4().hex[:12]}"
    env = dict(testbed.env, ML_COMM_TEST_BATCH_SLEEP="0.25", TF_CPP_MIN_LOG_LEVEL="2")
    plain_out = plain_run(testbed, tmp_path, token, env)
    text = run_batch_job(testbed, tmp_path, token, env, ["--time=6"], signal_at_epoch=2)
    assert "srun status 75 restart 0" in text and "srun status 0 restart 1" in text, text[-4000:]
    check_resumed_exactly(testbed, text, tmp_path, plain_out, last_epoch=4)


@long_testbed
def test_time_limit_shorter_than_training_requeues_and_resumes(testbed, tmp_path):
    """--time=3 with --signal=USR1@60: Slurm sends SIGUSR1 60 s (up to 60 s more, by its
    own rules) before each allocation's limit; the training needs more than one."""
    (tmp_path / "job").mkdir()
    token = f"mlcrequeue-{uuid.uuid4().hex[:12]}"
    env = dict(
        testbed.env,
        ML_COMM_TEST_EPOCHS=str(LONG_EPOCHS),
        ML_COMM_TEST_CATCH_AT_INIT="1",
        TF_CPP_MIN_LOG_LEVEL="2",
    )
    plain_out = plain_run(testbed, tmp_path, token, env)
    env["ML_COMM_TEST_BATCH_SLEEP"] = LONG_BATCH_SLEEP_S
    text = run_batch_job(testbed, tmp_path, token, env, ["--time=3", "--signal=USR1@60"])
    check_resumed_exactly(testbed, text, tmp_path, plain_out, last_epoch=LONG_EPOCHS - 1)


@long_testbed
def test_opt_in_requeue_by_rank_0(testbed, tmp_path):
    (tmp_path / "job").mkdir()
    token = f"mlcrequeue-{uuid.uuid4().hex[:12]}"
    env = dict(testbed.env, ML_COMM_TEST_BATCH_SLEEP="0.25", TF_CPP_MIN_LOG_LEVEL="2")
    plain_out = plain_run(testbed, tmp_path, token, env)
    env["ML_COMM_REQUEUE_ON_STOP"] = "1"
    text = run_batch_job(
        testbed, tmp_path, token, env, ["--time=6"], signal_at_epoch=2, template=BATCH_OPT_IN
    )
    assert re.search(r"ml_comm: job \d+ requeued; it resumes from the backup", text), text[-4000:]
    assert "srun status 0 restart 1" in text, text[-4000:]
    # The requeue may end the stopped allocation before its batch script prints srun's
    # status: check the resume after rank 0's message instead.
    second = text.split("requeued; it resumes from the backup", 1)[1]
    epochs = re.findall(EPOCH, second)
    assert epochs and epochs[0] != "0" and epochs[-1] == "4", text[-4000:]
    for rank in range(testbed.nodes):
        for a, b in zip(weights(tmp_path / "job", rank), weights(plain_out, 0), strict=True):
            assert a.tobytes() == b.tobytes(), f"rank {rank}: weights differ\n{text[-3000:]}"
