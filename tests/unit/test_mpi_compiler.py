"""Which mpicc the core is built with, and what of its `-show` reaches the compiler and
the linker (ml_comm/core/mpi_compiler.py): every flag, -D included, but no run path."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ml_comm.core import mpi_compiler

BIN = Path(sys.executable).parent
# `-show` of the Open MPI wheel and of Intel MPI's mpicc (-Xlinker style), as printed.
OPEN_MPI_SHOW = (
    "cc -I/v/include -pthread -L/v/lib -Wl,-rpath -Wl,/v/lib -Wl,--enable-new-dtags -lmpi"
)
INTEL_SHOW = (
    "gcc -I/o/mpi/include -L/o/mpi/lib -Xlinker --enable-new-dtags -Xlinker -rpath "
    "-Xlinker /o/mpi/lib -lmpi -lrt -lpthread -Wl,-z,now -Wl,-z,relro -ldl"
)


def test_the_mpich_abi_compiler_keeps_its_define_and_drops_the_run_path():
    mpicc_abi = BIN / "mpicc_abi"
    if not mpicc_abi.exists():
        pytest.skip("needs the mpich wheel's mpicc_abi")
    text = subprocess.check_output([str(mpicc_abi), "-show"], text=True)
    incs, libdirs, libs, cflags, link = mpi_compiler.parse_show(text)
    assert "-DMPI_ABI" in cflags
    assert libs == ["mpi_abi"]
    assert link == ["-Wl,--enable-new-dtags"], "no -rpath of the build machine"


def test_open_mpi_show_keeps_pthread_for_both_and_drops_the_run_path():
    incs, libdirs, libs, cflags, link = mpi_compiler.parse_show(OPEN_MPI_SHOW)
    assert (incs, libdirs, libs) == (["/v/include"], ["/v/lib"], ["mpi"])
    assert cflags == ["-pthread"]
    assert link == ["-Wl,--enable-new-dtags", "-pthread"]


def test_intel_xlinker_words_are_linker_words_and_the_run_path_goes():
    incs, libdirs, libs, cflags, link = mpi_compiler.parse_show(INTEL_SHOW)
    assert libs == ["mpi", "rt", "pthread", "dl"]
    assert cflags == []
    assert link == ["-Wl,--enable-new-dtags", "-Wl,-z", "-Wl,now", "-Wl,-z", "-Wl,relro"]


def test_the_choice_follows_ml_comm_mpicc_then_mpicc_then_path(tmp_path, monkeypatch):
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "mpicc").write_text("#!/bin/sh\necho cc -DSITE_MPI -lmpi\n")
    (fake / "mpicc").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("MPICC", raising=False)
    monkeypatch.delenv("ML_COMM_MPICC", raising=False)
    assert mpi_compiler.find_mpicc() == (str(fake / "mpicc"), "the first mpicc on PATH")
    assert "-DSITE_MPI" in mpi_compiler.mpi_build_flags().compile_args
    monkeypatch.setenv("MPICC", "/x/mpicc")
    assert mpi_compiler.find_mpicc() == ("/x/mpicc", "$MPICC")
    monkeypatch.setenv("ML_COMM_MPICC", "/y/mpicc")
    assert mpi_compiler.find_mpicc() == ("/y/mpicc", "$ML_COMM_MPICC")


def test_the_wheel_is_the_last_resort(monkeypatch):
    wheel = mpi_compiler.wheel_mpicc()
    if wheel is None:
        pytest.skip("needs the mpich wheel")
    monkeypatch.setenv("PATH", str(wheel.parent))  # only the wheel's own mpicc on PATH
    monkeypatch.delenv("MPICC", raising=False)
    monkeypatch.delenv("ML_COMM_MPICC", raising=False)
    assert mpi_compiler.find_mpicc() == (str(wheel), "the mpich wheel's")


def test_the_built_core_has_no_run_path_of_the_build_machine():
    import shutil

    from ml_comm import _core

    if shutil.which("readelf") is None:
        pytest.skip("needs readelf (binutils)")
    dynamic = subprocess.check_output(["readelf", "-d", _core.__file__], text=True)
    paths = [
        entry
        for line in dynamic.splitlines()
        if "(RUNPATH)" in line or "(RPATH)" in line
        for entry in line.split("[", 1)[1].rstrip("]").split(":")
    ]
    assert paths, dynamic
    assert all(p.startswith("$ORIGIN") for p in paths), paths
