"""One MPI per process: the library the C core calls must be the one mpi4py loaded.

The core (ml_comm._core) is bound by the dynamic loader to whatever libmpi its
NEEDED entry and RUNPATH find; mpi4py picks its own (MPI4PY_LIBMPI, the
environment's lib folder, ...). Two different libraries in one process do not
fail cleanly: communicator handles of one mean nothing to the other, or both
"work" and each rank trains alone. `init` compares them (check_one_library) and
fails with both named; `python -m ml_comm --check` prints them.
"""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass

from ..core.errors import MLCommError

INSTALL_HINT = (
    "install an MPI: `pip install 'mpich==5.0.2'` (the MPICH wheel that ml_comm's `mpich` "
    "extra installs, for a machine without one), or load your site's MPI (e.g. "
    "`module load cray-mpich-abi`, Intel MPI's "
    "`source <oneapi>/mpi/latest/env/vars.sh`) so that LD_LIBRARY_PATH holds its libmpi; "
    "docs/install.md, 'Which MPI'"
)


@dataclass(frozen=True)
class MpiLibrary:
    path: str  # the file holding the MPI symbols; "" when the loader cannot tell
    version: str  # MPI_Get_library_version

    @property
    def normalised(self) -> str:
        """The version without the NUL and spacing that differ between callers (Open MPI
        counts the NUL in the length that mpi4py returns)."""
        return " ".join(self.version.replace("\0", " ").split())

    @property
    def first_line(self) -> str:
        lines = self.version.replace("\0", "").strip().splitlines()
        return " ".join(lines[0].split()) if lines else "(no version)"

    def describe(self) -> str:
        return f"{self.path or '(path unknown)'} ({self.first_line})"


def missing_mpi_message(exc: BaseException) -> str:
    return f"ml_comm's C core could not load an MPI library ({exc}); {INSTALL_HINT}"


def core_library() -> MpiLibrary:
    from .._core import ffi, lib

    buf = ffi.new("char[8192]")
    version = ffi.string(lib.mlc_mpi_library_version(buf, 8192)).decode(errors="replace")
    path = ffi.string(lib.mlc_mpi_library_path(buf, 8192)).decode(errors="replace")
    return MpiLibrary(os.path.realpath(path) if path else "", version)


class _DlInfo(ctypes.Structure):
    _fields_ = [
        ("dli_fname", ctypes.c_char_p),
        ("dli_fbase", ctypes.c_void_p),
        ("dli_sname", ctypes.c_char_p),
        ("dli_saddr", ctypes.c_void_p),
    ]


def _dladdr():
    for name in (None, "libdl.so.2"):  # glibc >= 2.34 has dladdr in libc itself
        fn = getattr(ctypes.CDLL(name), "dladdr", None)
        if fn is not None:
            fn.argtypes = [ctypes.c_void_p, ctypes.POINTER(_DlInfo)]
            fn.restype = ctypes.c_int
            return fn
    return None


def symbol_file(module_file: str, symbol: str) -> str:
    """The file that defines `symbol` as seen from an already loaded extension module
    (dlsym on its handle searches the module and the libraries it was linked with)."""
    try:
        handle = ctypes.CDLL(module_file, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
        address = ctypes.cast(getattr(handle, symbol), ctypes.c_void_p).value
        dladdr = _dladdr()
    except (OSError, AttributeError):
        return ""
    info = _DlInfo()
    if not address or dladdr is None or not dladdr(address, ctypes.byref(info)):
        return ""
    return os.path.realpath(info.dli_fname.decode()) if info.dli_fname else ""


def mpi4py_library(MPI) -> MpiLibrary:
    return MpiLibrary(
        symbol_file(MPI.__file__, "MPI_Get_library_version"), MPI.Get_library_version()
    )


def how_mpi4py_found_it() -> str:
    """mpi4py >= 4.1 chooses its library at import: say which way it went."""
    if os.environ.get("MPI4PY_LIBMPI"):
        return f"MPI4PY_LIBMPI={os.environ['MPI4PY_LIBMPI']}"
    try:
        from mpi4py import _mpiabi

        abi = getattr(_mpiabi._get_mpiabi, "mpiabi", None)
    except ImportError:
        return "its build-time link"
    how = "the first libmpi of the environment's lib folder, then the loader's search path"
    return f"{how} (ABI {abi})" if abi else how


def same_library(a: MpiLibrary, b: MpiLibrary) -> bool:
    if a.path and b.path:
        try:
            if not os.path.samefile(a.path, b.path):
                return False
        except OSError:
            if a.path != b.path:
                return False
    return a.normalised == b.normalised


def check_one_library(MPI) -> MpiLibrary:
    """Raise unless the core and mpi4py use the same MPI library; return it."""
    core, theirs = core_library(), mpi4py_library(MPI)
    if same_library(core, theirs):
        return core
    raise MLCommError(
        "two MPI libraries in one process: mpi4py uses "
        f"{theirs.describe()}, found by {how_mpi4py_found_it()}; ml_comm's core uses "
        f"{core.describe()}. Use one MPI: point mpi4py at the core's library "
        f"(MPI4PY_LIBMPI={core.path or '<its libmpi>'}) or put that MPI's lib folder first "
        "on LD_LIBRARY_PATH, or rebuild ml_comm against mpi4py's MPI (MPICC=<its mpicc> pip "
        "install --no-build-isolation --force-reinstall <ml_comm>); docs/install.md, 'Which MPI'"
    )
