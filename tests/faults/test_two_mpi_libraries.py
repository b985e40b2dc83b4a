"""One MPI per process: a core bound to one MPI library while mpi4py loaded another
fails at init, on every rank, with both named (ml_comm/mpi/library.py); a core that
finds no MPI library at all says at import what to install or load.

The second library is real: the core is compiled a second time with the mpich wheel's
`mpicc_abi` (the MPI-5 standard ABI, libmpi_abi.so.1) into a copy of the package,
while mpi4py loads the wheel's MPICH-ABI libmpi.so.12. Each test runs real processes.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest
from jobs import MPIEXEC, PY, clean_env, run_job

ROOT = Path(__file__).resolve().parents[2]
MPICC_ABI = Path(PY).parent / "mpicc_abi"
VENV_LIB = Path(PY).parent.parent / "lib"
TIMEOUT_S = 60

pytestmark = pytest.mark.skipif(
    not MPICC_ABI.exists(), reason="needs the mpich wheel's mpicc_abi (the MPI-5 ABI compiler)"
)


@pytest.fixture(scope="module")
def abi_package(tmp_path_factory) -> Path:
    """A copy of ml_comm whose core is compiled against libmpi_abi.so.1."""
    top = tmp_path_factory.mktemp("abi")
    shutil.copytree(ROOT / "csrc", top / "csrc")
    shutil.copytree(
        ROOT / "ml_comm",
        top / "ml_comm",
        ignore=shutil.ignore_patterns("_core*.so", "*.o", "_core.c", "__pycache__"),
    )
    build = "import sys; sys.path.insert(0, 'ml_comm/core'); import build_ffi; "
    build += "build_ffi.ffibuilder.compile(tmpdir='.')"
    env = {**os.environ, "ML_COMM_MPICC": str(MPICC_ABI)}
    done = subprocess.run(
        [PY, "-c", build], cwd=top, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return top


def job(nranks: int, top: Path, code: str, **env: str):
    token = f"mlcfault-{uuid.uuid4().hex[:12]}"
    script = f"import sys; sys.path.insert(0, {str(top)!r}); {code}"
    cmd = [MPIEXEC, "-n", str(nranks), PY, "-X", f"ml_comm_token={token}", "-c", script]
    return run_job(cmd, token, TIMEOUT_S, clean_env(**env))


@pytest.mark.parametrize("nranks", [1, 2])
def test_a_core_on_another_mpi_library_than_mpi4py_fails_at_init_with_both_named(
    abi_package, nranks
):
    code = "import ml_comm as mc; mc.init(1, 1, 16); print('init passed', flush=True)"
    result = job(nranks, abi_package, code, LD_LIBRARY_PATH=str(VENV_LIB))
    assert result.returncode not in (0, None), result.detail()
    assert "init passed" not in result.stdout, result.detail()
    assert result.stderr.count("two MPI libraries in one process") == nranks, result.detail()
    assert "mpi4py uses /" in result.stderr and "libmpi.so.12 (MPICH Version: " in result.stderr
    assert "ml_comm's core uses /" in result.stderr, result.detail()
    assert "libmpi_abi.so.1 (MPICH Version: " in result.stderr, result.detail()


def test_no_mpi_library_for_the_core_says_what_to_install(abi_package):
    # No LD_LIBRARY_PATH: nothing on the core's run path holds a libmpi_abi.so.1.
    result = job(1, abi_package, "import ml_comm", LD_LIBRARY_PATH="")
    assert result.returncode not in (0, None), result.detail()
    assert "ml_comm's C core could not load an MPI library" in result.stderr, result.detail()
    assert "libmpi_abi.so.1" in result.stderr, result.detail()
    assert "pip install 'mpich==5.0.2'" in result.stderr, result.detail()
