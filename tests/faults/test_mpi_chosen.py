"""The MPI a job runs on is the one its environment names, whatever the import order
(ml_comm/mpi/library.py): where mpi4py or ml_comm's core loaded another library first,
which then served both, init fails on every rank naming both, and `--check` says so.

The second library is real: a copy of the mpich wheel's libmpi.so.12 in a folder of its
own (beside a link to the wheel's mpich/ folder, which its run path needs), a few bytes
longer (a byte-identical copy counts as the same library, as impi-rt's libmpi.so and
libmpi.so.12 must), so that which library runs is a question of which file.
"""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

import pytest
from jobs import MPIEXEC, PY, clean_env, run_job

VENV_LIB = Path(PY).parent.parent / "lib"
TIMEOUT_S = 60
EXACT = (  # one write per line: the ranks share the launcher's stdout
    "import os, numpy as np, ml_comm as mc; mc.init(1, 1, 16); "
    "from ml_comm.mpi.library import core_library; "
    "out = mc.gradients([np.full(3, mc.get_rank() + 1.0, np.float32)]); "
    "line = f'rank {mc.get_rank()} ran on {core_library().path} got {out[0].tolist()}'; "
    "os.write(1, (line + chr(10)).encode())"
)

pytestmark = pytest.mark.skipif(
    not (VENV_LIB / "libmpi.so.12").exists(), reason="needs the mpich wheel's libmpi.so.12"
)


@pytest.fixture(scope="module")
def other_mpi(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("site_mpi")
    shutil.copy2(VENV_LIB / "libmpi.so.12", folder / "libmpi.so.12")
    with open(folder / "libmpi.so.12", "ab") as f:  # another build: bytes past the ELF's end
        f.write(b"another build")
    if (VENV_LIB / "mpich").exists():
        (folder / "mpich").symlink_to(VENV_LIB / "mpich")
    return folder


def job(nranks: int, code: str, **env: str):
    token = f"mlcfault-{uuid.uuid4().hex[:12]}"
    cmd = [MPIEXEC, "-n", str(nranks), PY, "-X", f"ml_comm_token={token}", "-c", code]
    return run_job(cmd, token, TIMEOUT_S, clean_env(**env))


def test_mpi4py_first_takes_the_venv_library_over_ld_library_path_and_init_says_so(other_mpi):
    result = job(2, "from mpi4py import MPI; " + EXACT, LD_LIBRARY_PATH=str(other_mpi))
    assert result.returncode not in (0, None), result.detail()
    assert "ran on" not in result.stdout, result.detail()
    assert result.stderr.count("not the MPI chosen: this process runs on") == 2, result.detail()
    assert f"LD_LIBRARY_PATH (as {other_mpi}/libmpi.so.12) names" in result.stderr
    assert "Import ml_comm first" in result.stderr, result.detail()


def test_mpi4py_libmpi_left_unread_after_the_core_loaded_its_own_fails_init(other_mpi):
    result = job(2, EXACT, MPI4PY_LIBMPI=str(other_mpi / "libmpi.so.12"))
    assert result.returncode not in (0, None), result.detail()
    assert result.stderr.count("not the MPI chosen: this process runs on") == 2, result.detail()
    assert "mpi4py takes an MPI library already loaded over MPI4PY_LIBMPI" in result.stderr
    token = f"mlcfault-{uuid.uuid4().hex[:12]}"
    check = [MPIEXEC, "-n", "2", PY, "-X", f"ml_comm_token={token}", "-m", "ml_comm", "--check"]
    env = clean_env(MPI4PY_LIBMPI=str(other_mpi / "libmpi.so.12"))
    said = run_job(check, token, TIMEOUT_S, env)
    assert said.returncode not in (0, None), said.detail()
    assert "PROBLEM" in said.output and "not the MPI chosen" in said.output, said.detail()


@pytest.mark.parametrize("first", ["mpi4py", "ml_comm"])
def test_the_library_named_both_ways_runs_in_either_order(other_mpi, first):
    code = ("from mpi4py import MPI; " if first == "mpi4py" else "") + EXACT
    env = {"LD_LIBRARY_PATH": str(other_mpi), "MPI4PY_LIBMPI": str(other_mpi / "libmpi.so.12")}
    result = job(2, code, **env)
    assert result.returncode == 0, result.detail()
    for rank in (0, 1):
        line = f"rank {rank} ran on {other_mpi}/libmpi.so.12 got [1.5, 1.5, 1.5]"
        assert line in result.stdout, result.detail()
