"""Build and cache the JAX FFI handlers (ffi/*.cc) against the installed jaxlib's
XLA FFI headers (`jax.ffi.include_dir()`), linked to ml_comm's core module; the cache and
its lock are core/native_build.py's, in the TensorFlow ops' cache folder."""

from __future__ import annotations

from pathlib import Path

from ..core import native_build
from ..core.op_cache import cache_dir

FFI_DIR = Path(__file__).resolve().parent / "ffi"
RETRY = "python -m ml_comm build-jax"


def sources() -> list[Path]:
    return sorted(FFI_DIR.glob("*.cc"))


def build_command(output: Path) -> list[str]:
    import jax

    return native_build.shared_library_command(output, sources(), [jax.ffi.include_dir()])


def library_path() -> Path:
    import jax
    import jaxlib

    parts = (jax.__version__, jaxlib.__version__, " ".join(build_command(Path("out.so"))))
    key = native_build.cache_key(f"jax{jaxlib.__version__}", parts, FFI_DIR.glob("*"))
    return cache_dir() / f"ml_comm_jax_ffi-{key}.so"


def build(force: bool = False, verbose: bool = False, say=None) -> Path:
    """Return the cached handler library, compiling it first if needed (`say`: unused,
    the compile takes seconds)."""
    return native_build.build_cached(
        library_path(), build_command, "ml_comm's JAX FFI handler", RETRY, force, verbose
    )
