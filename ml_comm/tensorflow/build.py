"""Build and cache the TensorFlow op library.

The ops (ops/*.cc) are compiled against the TensorFlow that is
installed, with the flags from tf.sysconfig, and linked to ml_comm's own core
module. The result is cached under a key made of everything that must match
(TensorFlow version and flags, compiler, ml_comm version, the sources, the core
module's file), so upgrading any of them builds a new library instead of ever
loading a stale one ("undefined symbol"). Ranks that start together build once:
the first takes a file lock, the others wait for it and load its result.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from ..core import settings
from ..core.errors import MLCommError

PACKAGE = Path(__file__).resolve().parent.parent
OPS_DIR = Path(__file__).resolve().parent / "ops"


def op_sources() -> list[Path]:
    return sorted(OPS_DIR.glob("*.cc"))


RETRY = "python -m ml_comm build-tf"


def header_dir() -> Path:
    """The public C header: shipped in the package, or csrc/include in a checkout."""
    for d in (PACKAGE / "include", PACKAGE.parent / "csrc" / "include"):
        if (d / "ml_comm.h").exists():
            return d
    raise MLCommError("ml_comm.h not found next to the package; reinstall ml_comm")


def cache_dir() -> Path:
    base = settings.get("ML_COMM_CACHE_DIR")
    if base:
        return Path(base)
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(xdg) / "ml_comm"


def compiler() -> str:
    return os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++") or "g++"


def build_command(output: Path) -> list[str]:
    import tensorflow as tf

    from .. import _core

    core = Path(_core.__file__).resolve()
    return [
        compiler(),
        "-shared",
        "-fPIC",
        "-O2",
        "-std=c++17",
        "-Wno-deprecated-declarations",
        *tf.sysconfig.get_compile_flags(),
        f"-I{header_dir()}",
        *(str(source) for source in op_sources()),
        "-o",
        str(output),
        *tf.sysconfig.get_link_flags(),
        # The core's C functions come from the module Python has already loaded.
        f"-L{core.parent}",
        f"-l:{core.name}",
        f"-Wl,-rpath,{core.parent}",
    ]


def cache_key() -> str:
    import tensorflow as tf

    from .. import _core
    from ..core.version import VERSION

    core = Path(_core.__file__).resolve()
    try:
        cxx = subprocess.run([compiler(), "--version"], capture_output=True, text=True).stdout
    except OSError:
        cxx = "no compiler"
    h = hashlib.sha256()
    for part in (
        tf.__version__,
        getattr(tf, "__git_version__", ""),
        " ".join(build_command(Path("out.so"))),
        cxx.splitlines()[0] if cxx else "",
        VERSION,
        str(core),
        str(core.stat().st_mtime_ns),
    ):
        h.update(part.encode())
        h.update(b"\0")
    for source in sorted(OPS_DIR.glob("*.[ch]*")):
        h.update(source.read_bytes())
    h.update((header_dir() / "ml_comm.h").read_bytes())
    return f"tf{tf.__version__}-{h.hexdigest()[:16]}"


def library_path() -> Path:
    return cache_dir() / f"ml_comm_tf_ops-{cache_key()}.so"


def build(force: bool = False, verbose: bool = False) -> Path:
    """Return the cached op library, compiling it first if needed."""
    target = library_path()
    if target.exists() and not force:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if target.exists() and not force:
            return target  # another rank built it while we waited
        fd, tmp = tempfile.mkstemp(dir=target.parent, suffix=".so.tmp")
        os.close(fd)
        cmd = build_command(Path(tmp))
        if verbose:
            print("+", " ".join(cmd), flush=True)
        try:
            run = subprocess.run(cmd, capture_output=True, text=True)
        except OSError as exc:
            os.unlink(tmp)
            raise MLCommError(
                f"cannot run the C++ compiler ({exc}); install g++ and run: {RETRY}"
            ) from exc
        if run.returncode != 0:
            os.unlink(tmp)
            raise MLCommError(
                "building ml_comm's TensorFlow ops failed:\n"
                f"{' '.join(cmd)}\n{run.stderr.strip()}\n"
                f"Fix the cause above, then retry with: {RETRY}"
            )
        os.replace(tmp, target)
    return target
