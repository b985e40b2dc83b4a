"""Which MPI the core is built against, and the flags of its `mpicc -show`.

Used by the cffi builder (build_ffi.py) only. The choice follows mpi4py's:
`ML_COMM_MPICC` or `MPICC` when set, else the first `mpicc` on PATH, else the
`mpicc` of the `mpich` wheel (a build requirement, so an isolated build always
has one). On PATH, the build requirement's own wheel is passed over, so a site's
mpicc (a loaded module, a venv's Open MPI wheel) wins over the one pip put in the
temporary build environment. Standard library only: it runs before anything else.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path


@dataclass
class MpiBuildFlags:
    mpicc: str
    why: str
    include_dirs: list[str] = field(default_factory=list)
    library_dirs: list[str] = field(default_factory=list)
    libraries: list[str] = field(default_factory=list)
    compile_args: list[str] = field(default_factory=list)  # -D, -U, -pthread, ...
    link_args: list[str] = field(default_factory=list)  # -Wl,... without run paths


def wheel_mpicc() -> Path | None:
    """The mpicc of the `mpich` wheel visible to this interpreter, if any."""
    try:
        dist = metadata.distribution("mpich")
    except metadata.PackageNotFoundError:
        return None
    for f in dist.files or []:
        if f.name == "mpicc" and f.parent.name == "bin":
            return Path(str(dist.locate_file(f))).resolve()
    return None


def find_mpicc() -> tuple[str, str]:
    """(mpicc, why it was chosen)."""
    for var in ("ML_COMM_MPICC", "MPICC"):
        if os.environ.get(var):
            return os.environ[var], f"${var}"
    wheel = wheel_mpicc()
    for entry in os.environ.get("PATH", "").split(os.pathsep):
        found = shutil.which("mpicc", path=entry or ".")
        if found and (wheel is None or Path(found).resolve() != wheel):
            return found, "the first mpicc on PATH"
    if wheel is not None and wheel.exists():
        return str(wheel), "the mpich wheel's"
    raise RuntimeError(
        "no MPI to build ml_comm against: set MPICC (or ML_COMM_MPICC) to your MPI's mpicc, "
        "load your site's MPI module, or install the MPICH wheel: pip install 'mpich==5.0.2'"
    )


def linker_words(words: list[str]) -> tuple[list[str], list[str]]:
    """Split compiler words from linker words (-Wl,a,b and -Xlinker a)."""
    compiler, linker = [], []
    i = 0
    while i < len(words):
        w = words[i]
        if w.startswith("-Wl,"):
            linker += w[4:].split(",")
        elif w == "-Xlinker" and i + 1 < len(words):
            i += 1
            linker.append(words[i])
        else:
            compiler.append(w)
        i += 1
    return compiler, linker


def without_run_paths(linker: list[str]) -> list[str]:
    """Drop -rpath DIR / -rpath=DIR / -R DIR: a path of the build machine (an isolated build's
    temporary environment, say) must not end up in the module's RUNPATH."""
    kept, i = [], 0
    while i < len(linker):
        w = linker[i]
        if w in ("-rpath", "-R", "--rpath"):
            i += 2
            continue
        if w.startswith(("-rpath=", "--rpath=", "-R/")):
            i += 1
            continue
        kept.append(w)
        i += 1
    return kept


def parse_show(text: str) -> tuple[list[str], list[str], list[str], list[str], list[str]]:
    """include dirs, library dirs, libraries, compile args, link args of `mpicc -show`."""
    words = shlex.split(text)[1:]  # the first word is the compiler itself
    compiler, linker = linker_words(words)
    incs, libdirs, libs, cflags, by_path = [], [], [], [], []
    for w in compiler:
        if w.startswith("-I"):
            incs.append(w[2:])
        elif w.startswith("-L"):
            libdirs.append(w[2:])
        elif w.startswith("-l"):
            libs.append(w[2:])
        elif w.endswith((".so", ".a")) or ".so." in w:
            by_path.append(w)  # a library named by its path
        else:
            cflags.append(w)  # -D, -U, -pthread, -f..., -m...: every flag is kept
    link = [f"-Wl,{w}" for w in without_run_paths(linker)] + by_path
    link += [w for w in cflags if w == "-pthread"]
    return incs, libdirs, libs, cflags, link


def mpi_build_flags() -> MpiBuildFlags:
    mpicc, why = find_mpicc()
    try:
        text = subprocess.check_output([*shlex.split(mpicc), "-show"], text=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        raise RuntimeError(f"`{mpicc} -show` failed ({why}): {exc}") from exc
    incs, libdirs, libs, cflags, link = parse_show(text)
    return MpiBuildFlags(mpicc, why, incs, libdirs, libs, cflags, link)
