"""Build and cache the TensorFlow op library.

The ops (ops/*.cc) are compiled against the TensorFlow that is installed, with the
flags from tf.sysconfig, and linked to ml_comm's own core module; the cache and its
lock are core/native_build.py's (upgrading TensorFlow builds a new library instead of
ever loading a stale one: "undefined symbol").
"""

from __future__ import annotations

from pathlib import Path

from ..core import native_build
from ..core.native_build import cache_dir, compiler, header_dir

OPS_DIR = Path(__file__).resolve().parent / "ops"
RETRY = "python -m ml_comm build-tf"
__all__ = ["RETRY", "build", "build_command", "cache_dir", "compiler", "header_dir"]


def op_sources() -> list[Path]:
    return sorted(OPS_DIR.glob("*.cc"))


def build_command(output: Path) -> list[str]:
    import tensorflow as tf

    flags = [
        "-Wno-deprecated-declarations",
        *tf.sysconfig.get_compile_flags(),
        *tf.sysconfig.get_link_flags(),
    ]
    return native_build.shared_library_command(output, op_sources(), [], flags)


def cache_key() -> str:
    import tensorflow as tf

    parts = (
        tf.__version__,
        getattr(tf, "__git_version__", ""),
        " ".join(build_command(Path("out.so"))),
    )
    return native_build.cache_key(f"tf{tf.__version__}", parts, OPS_DIR.glob("*.[ch]*"))


def library_path() -> Path:
    return cache_dir() / f"ml_comm_tf_ops-{cache_key()}.so"


def build(force: bool = False, verbose: bool = False) -> Path:
    """Return the cached op library, compiling it first if needed."""
    return native_build.build_cached(
        library_path(), build_command, "ml_comm's TensorFlow ops", RETRY, force, verbose
    )
