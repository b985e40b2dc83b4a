"""Compiling a framework's binding on first use, cached: the JAX FFI handler
(ml_comm/jax/build.py) is built against the framework that is installed and linked to the
core module Python has loaded, in the TensorFlow ops' cache folder (core/op_cache.py).
What must match goes into the library's file name (the framework's version and flags, the
compiler, ml_comm's version, the sources, the core module's file), so an upgrade builds a
new library instead of loading a stale one. Ranks that start together build once: the
first takes a file lock, the others wait for it and load its result.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import subprocess
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

from . import op_cache
from .errors import MLCommError
from .op_cache import compiler
from .version import VERSION


def header_dir() -> Path:
    """The public C header: shipped in the package, or csrc/include in a checkout."""
    found = op_cache.header_dir()
    if found is None:
        raise MLCommError("ml_comm.h not found next to the package; reinstall ml_comm")
    return found


def core_module() -> Path:
    """The compiled core (ml_comm._core) that Python loaded: the binding links to it."""
    from .. import _core

    return Path(_core.__file__).resolve()


def shared_library_command(
    output: Path, sources: Iterable[Path], include_dirs: Iterable[str], flags: Iterable[str] = ()
) -> list[str]:
    """The C++ compiler's command that builds a binding: C++17, the framework's
    `include_dirs` and `flags` (compile and link), ml_comm.h, linked to the core module."""
    return [
        compiler(),
        "-shared",
        "-fPIC",
        "-O2",
        "-std=c++17",
        *(f"-I{d}" for d in include_dirs),
        f"-I{header_dir()}",
        *(str(source) for source in sources),
        "-o",
        str(output),
        *flags,
        *core_link_flags(),
    ]


def core_link_flags() -> list[str]:
    """Link to the core module Python has already loaded (its C functions), by file name."""
    core = core_module()
    return [f"-L{core.parent}", f"-l:{core.name}", f"-Wl,-rpath,{core.parent}"]


def cache_key(prefix: str, parts: Iterable[str], sources: Iterable[Path]) -> str:
    """`prefix`-<hash of parts, the compiler, ml_comm's version, the core module's file,
    the sources and the public header>."""
    core = core_module()
    try:
        cxx = subprocess.run([compiler(), "--version"], capture_output=True, text=True).stdout
    except OSError:
        cxx = "no compiler"
    h = hashlib.sha256()
    for part in (
        *parts,
        cxx.splitlines()[0] if cxx else "",
        VERSION,
        str(core),
        str(core.stat().st_mtime_ns),
    ):
        h.update(part.encode())
        h.update(b"\0")
    for source in sorted(sources):
        h.update(source.read_bytes())
    h.update((header_dir() / "ml_comm.h").read_bytes())
    return f"{prefix}-{h.hexdigest()[:16]}"


def build_cached(
    target: Path,
    command: Callable[[Path], list[str]],
    what: str,
    retry: str,
    force: bool = False,
    verbose: bool = False,
) -> Path:
    """`target`, compiling it first with command(output) unless it exists (or force)."""
    if target.exists() and not force:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if target.exists() and not force:
            return target  # another rank built it while we waited
        fd, tmp = tempfile.mkstemp(dir=target.parent, suffix=".so.tmp")
        os.close(fd)
        cmd = command(Path(tmp))
        if verbose:
            print("+", " ".join(cmd), flush=True)
        try:
            run = subprocess.run(cmd, capture_output=True, text=True)
        except OSError as exc:
            os.unlink(tmp)
            raise MLCommError(
                f"cannot run the C++ compiler ({exc}); install g++ and run: {retry}"
            ) from exc
        if run.returncode != 0:
            os.unlink(tmp)
            raise MLCommError(
                f"building {what} failed:\n"
                f"{' '.join(cmd)}\n{run.stderr.strip()}\n"
                f"Fix the cause above, then retry with: {retry}"
            )
        os.replace(tmp, target)
    return target
