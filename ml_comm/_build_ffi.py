"""cffi builder for ml_comm._core (out-of-line API mode).

The public header csrc/include/ml_comm.h is the cdef, so the C API is declared
once. MPI comes from the `mpich` wheel: its include and lib directories are found
through the wheel's `mpicc -show`, and an rpath relative to the module lets
`ml_comm._core` load libmpi without mpi4py being imported first.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from cffi import FFI

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
# setuptools wants relative source paths.
# Every layer's sources (csrc/<layer>/*.c), less the loopback transport, which only the
# C tests use (tests/c).
SOURCES = sorted(
    os.path.relpath(p, ROOT) for p in ROOT.glob("csrc/*/*.c") if p.name != "loopback.c"
)


def find_mpicc() -> str:
    """The mpicc of the mpich wheel in the environment doing the build."""
    candidates = [Path(sys.prefix) / "bin" / "mpicc", Path(sys.executable).parent / "mpicc"]
    for c in candidates:
        if c.exists():
            return str(c)
    found = shutil.which("mpicc")
    if not found:
        raise RuntimeError("mpicc not found: install the 'mpich' wheel (pip install mpich==5.0.2)")
    return found


def mpi_flags() -> tuple[list[str], list[str], list[str]]:
    """include dirs, library dirs and libraries from `mpicc -show`."""
    words = shlex.split(subprocess.check_output([find_mpicc(), "-show"], text=True))
    incs = [w[2:] for w in words if w.startswith("-I")]
    libdirs = [w[2:] for w in words if w.startswith("-L")]
    libs = [w[2:] for w in words if w.startswith("-l")]
    return incs, libdirs, libs


ffibuilder = FFI()
ffibuilder.cdef((ROOT / "csrc" / "include" / "ml_comm.h").read_text())
# Python functions the core calls back (report.py implements them with ffi.def_extern).
ffibuilder.cdef('extern "Python" void mlc_py_report(void *, const mlc_team_stats *);')

_incs, _libdirs, _libs = mpi_flags()
ffibuilder.set_source(
    "ml_comm._core",
    '#include "team/team.h"\n',
    sources=SOURCES,
    include_dirs=["csrc", "csrc/include", *_incs],
    library_dirs=_libdirs,
    libraries=[*_libs, "pthread"],
    # $ORIGIN/../../..: site-packages/ml_comm -> <venv>/lib, where the wheel puts libmpi;
    # $ORIGIN/../.venv/lib: the same for an editable install in the repository.
    extra_link_args=["-Wl,-rpath,$ORIGIN/../../..", "-Wl,-rpath,$ORIGIN/../.venv/lib"],
    extra_compile_args=[
        "-O3",
        "-std=gnu11",
        "-Wall",
        "-Wextra",
        "-Wno-unused-parameter",
        *shlex.split(os.environ.get("ML_COMM_CFLAGS", "")),
    ],
)

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
