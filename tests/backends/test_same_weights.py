"""The same Keras script (scripts/same_weights.py: SGD, shuffle=False, fixed data) with
only ml_comm.keras's init() and finalize() added trains at 2 ranks x batch B to the
weights of one process without ml_comm on the global batch 2B (allclose rtol 1e-5,
atol 1e-6), bit-identical on both ranks, on the backend KERAS_BACKEND names. Run
without --with-mpi: it launches its own processes (mpiexec from this Python's folder)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

SCRIPT = Path(__file__).resolve().parent / "scripts" / "same_weights.py"
MPIEXEC = Path(sys.executable).parent / "mpiexec"


def run(cmd: list, tmp_path: Path) -> str:
    done = subprocess.run(
        [str(c) for c in cmd], capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.mark.skipif(not MPIEXEC.exists(), reason=f"no mpiexec beside {sys.executable}")
def test_two_ranks_train_as_one_process_on_the_global_batch(tmp_path):
    python = [sys.executable, "-P"]  # -P: the installed ml_comm, not a checkout's folder
    run([*python, SCRIPT, "serial", tmp_path, "2"], tmp_path)
    out = run([MPIEXEC, "-n", "2", *python, SCRIPT, "ml_comm", tmp_path], tmp_path)
    backend = os.environ.get("KERAS_BACKEND", "tensorflow")
    assert f"backend {backend}" in out
    if backend != "tensorflow":
        assert "tensorflow imported: False" in out, out
    serial = np.load(tmp_path / "serial_rank0.npz")
    ranks = [np.load(tmp_path / f"ml_comm_rank{r}.npz") for r in (0, 1)]
    for name in serial.files:
        assert np.array_equal(ranks[0][name], ranks[1][name]), f"{name} differs across ranks"
        np.testing.assert_allclose(ranks[0][name], serial[name], rtol=1e-5, atol=1e-6)
