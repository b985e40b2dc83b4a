"""A serial Keras script with keras.callbacks.BackupAndRestore, plus ml_comm, at 2 ranks:
SIGTERM to one rank in the third epoch ends every rank within 60 s with exit status
ml_comm.keras.callbacks.STOPPED_EXIT_CODE and a backup written by rank 0 alone; the same
command run again finishes, and its final weights equal an uninterrupted run's bit for
bit on every rank (op determinism on, no shuffling). The same with Adam and
gradient_accumulation_steps=2, resumed from a backup taken after an odd number of
micro-steps (mid-cycle).

Plain pytest around `mpiexec -n 2 python scripts/keras_backup.py ...` (ml_comm/keras/callbacks.py),
on the Keras backend KERAS_BACKEND names (tools/dev.py runs it on JAX and torch too).
"""

from __future__ import annotations

import json
import re
import time
import uuid

import numpy as np
from jobs import MPIEXEC, PY, SCRIPTS, clean_env, run_job

STOPPED_EXIT_CODE = 75  # ml_comm.keras.callbacks.STOPPED_EXIT_CODE (not imported: no TF here)
TIMEOUT_S = 300
NRANKS = 2


def keras_job(backup, out, *signal_at: str, **env: str):
    token = f"mlckeras-{uuid.uuid4().hex[:12]}"
    script = str(SCRIPTS / "keras_backup.py")
    cmd = [MPIEXEC, "-n", str(NRANKS), PY, script, str(backup), str(out), *signal_at, token]
    return run_job(cmd, token, TIMEOUT_S, clean_env(TF_CPP_MIN_LOG_LEVEL="2", **env))


def weights(out) -> list[list[np.ndarray]]:
    per_rank = []
    for r in range(NRANKS):
        with np.load(out / f"weights.rank{r}.npz") as f:
            per_rank.append([f[k] for k in sorted(f.files, key=lambda k: int(k.split("_")[1]))])
    return per_rank


def test_sigterm_then_rerun_resumes_exactly(tmp_path):
    plain_out, cut_out = tmp_path / "plain", tmp_path / "cut"
    plain_out.mkdir()
    cut_out.mkdir()

    plain = keras_job(tmp_path / "backup-plain", plain_out)
    assert plain.returncode == 0, plain.detail()
    assert re.findall(r"epoch (\d)", plain.stdout) == ["0", "1", "2", "3", "4"], plain.detail()
    assert not (tmp_path / "backup-plain").exists(), "Keras deletes the backup at a normal end"
    # ModelCheckpoint wrote (on rank 0 only: every rank writing one h5 file fails).
    assert (plain_out / "checkpoint.weights.h5").stat().st_size > 0

    backup = tmp_path / "backup"
    cut = keras_job(backup, cut_out, "1", "2", "3")  # rank 1, third epoch, after batch 4
    ended = time.time()
    assert cut.returncode == STOPPED_EXIT_CODE, cut.detail()
    sent = re.search(r"rank 1 sends itself SIGTERM at (\d+\.\d+)", cut.stdout)
    assert sent, cut.detail()
    assert ended - float(sent.group(1)) < 60, cut.detail()
    for r in range(NRANKS):
        assert f"ml_comm: rank {r} stopped on request; exiting with status 75" in cut.stderr
    assert "done rank" not in cut.stdout, cut.detail()
    assert "BAD TERMINATION" not in cut.output, cut.detail()
    # Stopped inside epoch 2: the backup is the one from the end of epoch 1 (Keras counts
    # the epochs done), not a cut epoch recorded as done.
    meta = json.loads((backup / "training_metadata.json").read_text())
    assert meta["epoch"] == 2, meta
    assert re.findall(r"epoch (\d)", cut.stdout) == ["0", "1", "2"], cut.detail()

    resumed = keras_job(backup, cut_out)
    assert resumed.returncode == 0, resumed.detail()
    # It resumed (a run from scratch would end with the same weights too).
    assert re.findall(r"epoch (\d)", resumed.stdout) == ["2", "3", "4"], resumed.detail()
    want = weights(plain_out)
    got = weights(cut_out)
    for r in range(NRANKS):
        assert len(got[r]) == len(want[0])
        for a, b in zip(got[r], want[0]):
            assert a.dtype == b.dtype and a.tobytes() == b.tobytes(), f"rank {r} differs"
        for a, b in zip(want[r], want[0]):
            assert a.tobytes() == b.tobytes(), f"uninterrupted run: rank {r} differs from rank 0"


def test_accumulation_resumes_mid_cycle_exactly(tmp_path):
    """7 batches per epoch: the backup after epoch 0 holds 7 micro-steps, half a cycle."""
    env = {"ML_COMM_TEST_ACCUMULATE": "2"}
    plain_out, cut_out = tmp_path / "plain", tmp_path / "cut"
    plain_out.mkdir()
    cut_out.mkdir()
    plain = keras_job(tmp_path / "backup-plain", plain_out, **env)
    assert plain.returncode == 0, plain.detail()

    backup = tmp_path / "backup"
    cut = keras_job(backup, cut_out, "1", "1", "3", **env)  # rank 1, second epoch, batch 3
    assert cut.returncode == STOPPED_EXIT_CODE, cut.detail()
    meta = json.loads((backup / "training_metadata.json").read_text())
    assert meta["epoch"] == 1, meta  # resumes after epoch 0: 7 micro-steps done

    resumed = keras_job(backup, cut_out, **env)
    assert resumed.returncode == 0, resumed.detail()
    assert re.findall(r"epoch (\d)", resumed.stdout) == ["1", "2", "3", "4"], resumed.detail()
    want = weights(plain_out)
    got = weights(cut_out)
    for r in range(NRANKS):
        assert len(got[r]) == len(want[0])
        for a, b in zip(got[r], want[0]):
            assert a.dtype == b.dtype and a.tobytes() == b.tobytes(), (
                f"rank {r} differs by {np.max(np.abs(a - b))}"
            )
        for a, b in zip(want[r], want[0]):
            assert a.tobytes() == b.tobytes(), f"uninterrupted run: rank {r} differs from rank 0"
