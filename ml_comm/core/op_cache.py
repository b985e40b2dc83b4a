"""Where the TensorFlow op library is cached, found without importing TensorFlow.

The library (ml_comm/tensorflow/build.py compiles it) is cached under a key made of
everything that must match: the TensorFlow installation (its folder, version, and the
size and time of its framework library, which fix the flags tf.sysconfig gives), the
compiler, ml_comm's version, the core module's file and the op sources. Upgrading any
of them builds a new library instead of ever loading a stale one ("undefined symbol").
The key needs no import of TensorFlow, which takes seconds: whether the first `init`
will compile (minutes) can be said before, at once (`announce`).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import subprocess
from collections.abc import Callable
from importlib import metadata
from pathlib import Path

from . import settings
from .output import say
from .version import VERSION

PACKAGE = Path(__file__).resolve().parent.parent
OPS_DIR = PACKAGE / "tensorflow" / "ops"
# Our compiler flags for each source (TensorFlow's own come from tf.sysconfig at build time).
CXX_FLAGS = ("-fPIC", "-O2", "-std=c++17", "-Wno-deprecated-declarations")
AHEAD = "python -m ml_comm build-tf"

_announced = False


def op_sources() -> list[Path]:
    return sorted(OPS_DIR.glob("*.cc"))


def cache_dir() -> Path:
    base = settings.get("ML_COMM_CACHE_DIR")
    if base:
        return Path(base)
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(xdg) / "ml_comm"


def compiler() -> str:
    return os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++") or "g++"


def header_dir() -> Path | None:
    """The public C header: shipped in the package, or csrc/include in a checkout."""
    for d in (PACKAGE / "include", PACKAGE.parent / "csrc" / "include"):
        if (d / "ml_comm.h").exists():
            return d
    return None


def tensorflow_dir() -> Path | None:
    """The installed TensorFlow's package folder (located, not imported), or None."""
    try:
        spec = importlib.util.find_spec("tensorflow")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))).resolve()


def tensorflow_version(folder: Path) -> str:
    """The version of the distribution that installed `folder` ("unknown" if none says)."""
    for dist in metadata.distributions(path=[str(folder.parent)]):
        top = (dist.read_text("top_level.txt") or "").split()
        if "tensorflow" in top:
            return dist.version
    return "unknown"


def _framework_files(folder: Path) -> list[Path]:
    return sorted(folder.glob("libtensorflow_framework.so*"))


def cache_key(folder: Path) -> str:
    from .. import _core

    core = Path(_core.__file__).resolve()
    try:
        cxx = subprocess.run([compiler(), "--version"], capture_output=True, text=True).stdout
    except OSError:
        cxx = "no compiler"
    version = tensorflow_version(folder)
    h = hashlib.sha256()
    parts = [str(folder), version, compiler(), cxx.splitlines()[0] if cxx else "", VERSION]
    parts += [str(core), str(core.stat().st_mtime_ns), *CXX_FLAGS]
    for lib in _framework_files(folder):
        stat = lib.stat()
        parts += [lib.name, str(stat.st_size), str(stat.st_mtime_ns)]
    for part in parts:
        h.update(part.encode())
        h.update(b"\0")
    for source in sorted(OPS_DIR.glob("*.[ch]*")):
        h.update(source.read_bytes())
    header = header_dir()
    if header is not None:
        h.update((header / "ml_comm.h").read_bytes())
    return f"tf{version}-{h.hexdigest()[:16]}"


def library_path(folder: Path | None = None) -> Path:
    """The cached library's path for the installed TensorFlow (which must be there)."""
    folder = folder or tensorflow_dir()
    if folder is None:
        raise ImportError("TensorFlow is not installed (pip install 'ml_comm[tf]')")
    return cache_dir() / f"ml_comm_tf_ops-{cache_key(folder)}.so"


def notice(folder: Path | None = None) -> str:
    """The one line that says the ops are being compiled: what, where, that it is once."""
    folder = folder or tensorflow_dir()
    version = tensorflow_version(folder) if folder is not None else "unknown"
    return (
        f"ml_comm: compiling its TensorFlow ops for TensorFlow {version} (once, a few "
        f"minutes; cached in {cache_dir()}; `{AHEAD}` does it ahead of a job)"
    )


def announce(printer: Callable[[str], None] = say) -> None:
    """Print the notice now, once per process, if the op library is not cached yet."""
    global _announced
    if _announced:
        return
    folder = tensorflow_dir()
    if folder is not None and not library_path(folder).exists():
        printer(notice(folder))
        _announced = True
