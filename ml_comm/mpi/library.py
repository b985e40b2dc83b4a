"""One MPI per process: the library the C core calls must be the one mpi4py loaded.

The core (ml_comm._core) is bound by the dynamic loader to whatever libmpi its
NEEDED entry and RUNPATH find; mpi4py picks its own (MPI4PY_LIBMPI, the
environment's lib folder, ...). Two different libraries in one process do not
fail cleanly: communicator handles of one mean nothing to the other, or both
"work" and each rank trains alone. `init` compares them (check_one_library) and
fails with both named; `python -m ml_comm --check` prints them.

One library in use is not yet the one the user chose. Whichever of the two loads first
serves both (a library already loaded answers the other's request for its name), so
the import order would decide: mpi4py first takes the environment's lib folder before
LD_LIBRARY_PATH, and the core first leaves MPI4PY_LIBMPI unread. `init` therefore also
compares the library in use with the one the environment names (chosen_library): an
LD_PRELOAD of a libmpi, MPI4PY_LIBMPI, else the file the loader would give the core in
a fresh process (LD_LIBRARY_PATH, then the core's run path; elf_dynamic.py reads it).
"""

from __future__ import annotations

import ctypes
import filecmp
import os
from dataclasses import dataclass

from ..core.errors import MLCommError
from . import elf_dynamic

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


@dataclass(frozen=True)
class Choice:
    path: str  # the library file the environment names
    how: str  # the setting that names it, for messages: "LD_LIBRARY_PATH (as /x/libmpi.so.12)"


def _mpi4py_candidates(value: str) -> list[str]:
    """The libraries MPI4PY_LIBMPI names, in mpi4py's order: each entry a file, or a folder
    searched for libmpi.so, libmpi.so.12 and libmpi.so.40; only those it could load (the
    mpich wheel's libmpi.so is a linker script, which mpi4py tries and passes over)."""
    names = ("libmpi.so", "libmpi.so.12", "libmpi.so.40")
    found = []
    for entry in filter(None, value.split(os.pathsep)):
        entry = os.path.expanduser(os.path.expandvars(entry))
        found += [os.path.join(entry, n) for n in names] if os.path.isdir(entry) else [entry]
    return [f for f in found if _is_elf(f)]


def _is_elf(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"\x7fELF"
    except OSError:
        return False


def _needed_mpi(elf: elf_dynamic.Dynamic | None) -> str | None:
    """The libmpi name the core asks the loader for (libmpi.so.12, libmpi.so.40, ...)."""
    return next((n for n in elf.needed if n.startswith("libmpi")), None) if elf else None


def _loader_choice(core_file: str, elf: elf_dynamic.Dynamic, env) -> Choice | None:
    """The file the dynamic loader binds the core's libmpi to when nothing loaded one
    before: DT_RPATH (only without DT_RUNPATH), LD_LIBRARY_PATH, then DT_RUNPATH. None
    when it would come from the loader's cache or system folders (not judged)."""
    needed = _needed_mpi(elf)
    if needed is None:
        return None
    origin = os.path.dirname(os.path.abspath(core_file))

    def expand(folders: list[str]) -> list[str]:
        return [
            os.path.normpath(d.replace("${ORIGIN}", origin).replace("$ORIGIN", origin))
            for d in folders
        ]

    searched = [d for d in env.get("LD_LIBRARY_PATH", "").replace(";", ":").split(":") if d]
    order = [(d, "the core's run path") for d in expand(elf.rpath)] if not elf.runpath else []
    order += [(d, "LD_LIBRARY_PATH") for d in searched]
    order += [(d, "the core's run path") for d in expand(elf.runpath)]
    for folder, how in order:
        candidate = os.path.join(folder, needed)
        if os.path.isfile(candidate):
            return Choice(os.path.realpath(candidate), f"{how} (as {candidate})")
    return None


def _answers_to(path: str, name: str) -> bool:
    """Whether the shared object at path is a library of that name (its DT_SONAME)."""
    elf = elf_dynamic.read(path)
    return elf is not None and elf.soname == name


def _mpi4py_reads_libmpi(env) -> bool:
    """mpi4py >= 4.1 opens MPI4PY_LIBMPI, unless MPI4PY_MPIABI names the ABI instead."""
    import importlib.util

    return importlib.util.find_spec("mpi4py._mpiabi") is not None and not env.get("MPI4PY_MPIABI")


def chosen_library(
    core_file: str, env=None, elf: elf_dynamic.Dynamic | None = None
) -> Choice | None:
    """The MPI library the environment names for this process, or None where it names
    none that exists here. elf: the core's dynamic section, where the caller read it."""
    env = os.environ if env is None else env
    elf = elf or elf_dynamic.read(core_file)
    needed = _needed_mpi(elf)
    if elf is None or needed is None:
        return None
    for preloaded in env.get("LD_PRELOAD", "").replace(":", " ").split():
        # the MPI itself, not a library beside it (Cray's GPU transport libmpi_gtl_cuda,
        # a profiler's libmpiP): it answers to the name the core asks for
        if _answers_to(preloaded, needed):
            return Choice(os.path.realpath(preloaded), f"LD_PRELOAD (as {preloaded})")
    if env.get("MPI4PY_LIBMPI") and _mpi4py_reads_libmpi(env):
        files = _mpi4py_candidates(env["MPI4PY_LIBMPI"])
        if not files:
            return None
        return Choice(os.path.realpath(files[0]), f"MPI4PY_LIBMPI (as {files[0]})")
    return _loader_choice(core_file, elf, env)


def same_file_or_copy(a: str, b: str) -> bool:
    """One file, or two with the same bytes: a wheel cannot hold symbolic links, so Intel's
    impi-rt ships libmpi.so and libmpi.so.12 as copies (mpi4py loads the first, the core
    asks for the second). True where either cannot be read: nothing to judge by."""
    try:
        return os.path.samefile(a, b) or filecmp.cmp(a, b, shallow=False)
    except OSError:
        return True


def not_chosen_message(used: MpiLibrary, core_file: str, env=None) -> str:
    """Why the library in use is not the one the environment names; "" when it is (or
    when the environment names none that can be found)."""
    elf = elf_dynamic.read(core_file)
    choice = chosen_library(core_file, env, elf)
    needed = _needed_mpi(elf)
    # used.path holds the core's MPI_Get_library_version: judged only where that is the
    # MPI library itself, not a profiler's or interposer's file in front of it
    if choice is None or not needed or not used.path or not _answers_to(used.path, needed):
        return ""
    if same_file_or_copy(choice.path, used.path):
        return ""
    if choice.how.startswith("MPI4PY_LIBMPI"):
        why = (
            "mpi4py takes an MPI library already loaded over MPI4PY_LIBMPI, and ml_comm's core "
            f"had loaded its own. Let the core find the same one: a folder first on "
            f"LD_LIBRARY_PATH that holds it as {needed}; or unset MPI4PY_LIBMPI"
        )
    else:
        why = (
            "another MPI library was loaded before ml_comm's core, which then shared it: by "
            "mpi4py, imported first (it looks in the environment's lib folder before "
            "LD_LIBRARY_PATH), or by another module. Import ml_comm first, or point mpi4py at "
            f"the chosen library (MPI4PY_LIBMPI={choice.path})"
        )
    return (
        f"this process runs on {used.describe()}, but {choice.how} names {choice.path}: {why}; "
        "docs/install.md, 'Which MPI'"
    )


def check_one_library(MPI) -> MpiLibrary:
    """Raise unless the core and mpi4py use the same MPI library, the one the environment
    names; return it."""
    core, theirs = core_library(), mpi4py_library(MPI)
    if same_library(core, theirs):
        from .. import _core

        wrong = not_chosen_message(core, _core.__file__)
        if wrong:
            raise MLCommError(f"not the MPI chosen: {wrong}")
        return core
    raise MLCommError(
        "two MPI libraries in one process: mpi4py uses "
        f"{theirs.describe()}, found by {how_mpi4py_found_it()}; ml_comm's core uses "
        f"{core.describe()}. Use one MPI: point mpi4py at the core's library "
        f"(MPI4PY_LIBMPI={core.path or '<its libmpi>'}) or put that MPI's lib folder first "
        "on LD_LIBRARY_PATH, or rebuild ml_comm against mpi4py's MPI (MPICC=<its mpicc> pip "
        "install --no-build-isolation --force-reinstall <ml_comm>); docs/install.md, 'Which MPI'"
    )
