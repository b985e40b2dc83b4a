"""When mpi4py finds no MPI library, starting MPI says what to install or load
(ml_comm/mpi/init.py), instead of mpi4py's bare "cannot load MPI library"."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_mpi4py_without_a_library_names_the_mpich_extra_and_site_modules(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI", "MPI", "HYDRA"))}
    env["MPI4PY_LIBMPI"] = str(tmp_path / "libmpi.so.12")  # a library that is not there
    env["PYTHONPATH"] = str(ROOT)
    code = "import ml_comm as mc; mc.init_mpi()"
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode != 0, proc.stdout + proc.stderr
    assert "ImportError: mpi4py could not load an MPI library" in proc.stderr, proc.stderr
    # ml_comm is installed from its checkout: a bare `pip install ml_comm[...]` would fetch
    # whatever a stranger published under that name.
    assert "pip install 'mpich==5.0.2'" in proc.stderr, proc.stderr
    assert "install 'ml_comm" not in proc.stderr, proc.stderr
    assert "module load" in proc.stderr, proc.stderr
