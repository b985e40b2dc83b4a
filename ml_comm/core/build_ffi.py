"""cffi builder for ml_comm._core (out-of-line API mode).

The public header csrc/include/ml_comm.h is the cdef, so the C API is declared
once. MPI is the user's: the core is compiled with the flags of an `mpicc -show`
(mpi_compiler.py says which mpicc), and an rpath relative to the module lets
`ml_comm._core` find a libmpi that a wheel put in the same environment.
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

from cffi import FFI

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))  # the builder runs as a plain script, outside the package
from mpi_compiler import mpi_build_flags  # noqa: E402

# Every layer's sources (csrc/<layer>/*.c, relative: setuptools wants that), less the
# loopback transport, which only the C tests use (tests/c).
SOURCES = sorted(
    os.path.relpath(p, ROOT) for p in ROOT.glob("csrc/*/*.c") if p.name != "loopback.c"
)

ffibuilder = FFI()
ffibuilder.cdef((ROOT / "csrc" / "include" / "ml_comm.h").read_text())
# Python functions the core calls back (report.py implements them with ffi.def_extern).
ffibuilder.cdef('extern "Python" void mlc_py_report(void *, const mlc_team_stats *);')

_mpi = mpi_build_flags()
print(f"ml_comm: building against {_mpi.mpicc} ({_mpi.why})", file=sys.stderr)
ffibuilder.set_source(
    "ml_comm._core",
    '#include "team/team.h"\n',
    sources=SOURCES,
    include_dirs=["csrc", "csrc/include", *_mpi.include_dirs],
    library_dirs=_mpi.library_dirs,
    libraries=[*_mpi.libraries, "pthread", "dl"],
    # $ORIGIN/../../..: site-packages/ml_comm -> <venv>/lib, where an MPI wheel puts libmpi;
    # $ORIGIN/../.venv/lib: the same for an editable install in the repository. A cluster's
    # MPI is found through LD_LIBRARY_PATH (what `module load` sets), not a path baked in.
    extra_link_args=[
        "-Wl,-rpath,$ORIGIN/../../..",
        "-Wl,-rpath,$ORIGIN/../.venv/lib",
        *_mpi.link_args,
    ],
    extra_compile_args=[
        "-O3",
        "-std=gnu11",
        "-Wall",
        "-Wextra",
        "-Wno-unused-parameter",
        *_mpi.compile_args,
        *shlex.split(os.environ.get("ML_COMM_CFLAGS", "")),
    ],
)

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
