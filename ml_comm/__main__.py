"""Command line: `python -m ml_comm --check`, `python -m ml_comm build-tf` and `build-jax`."""

from __future__ import annotations

import argparse
import sys


def check() -> int:
    """Print what ml_comm sees (mpi/check_report.py), then TensorFlow and its op library."""
    import ml_comm as mc
    from ml_comm.core import settings
    from ml_comm.mpi import check_report

    rc = check_report.run(mc)
    if mc.get_rank() != 0:
        return rc
    print(f"thread level   {mc.version_info()['thread_level']}")
    if rc == 0 and not settings.get("ML_COMM_CHECK_SKIP_TF"):
        rc = tensorflow_check()
    return rc


def tensorflow_check() -> int:
    try:
        import tensorflow as tf
    except ImportError:
        print("tensorflow     not installed (pip install 'ml_comm[tf]' for the TensorFlow ops)")
        return 0
    from ml_comm.tensorflow import build

    path = build.library_path()
    state = "built" if path.exists() else "not built yet (python -m ml_comm build-tf)"
    print(f"tensorflow     {tf.__version__}")
    print(f"op library     {path} ({state})")
    return 0


def build_binding(framework: str, force: bool) -> int:
    """Compile the TensorFlow op library or the JAX FFI handler into the cache."""
    import importlib

    from ml_comm.core.errors import MLCommError
    from ml_comm.core.output import say

    build = importlib.import_module(f"ml_comm.{framework}.build")
    try:
        path = build.build(force=force, verbose=True, say=say)
    except MLCommError as exc:
        print(exc, file=sys.stderr)
        return 1
    print(f"{framework} library: {path}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ml_comm", description=__doc__)
    parser.add_argument("--check", action="store_true", help="print the set-up ml_comm sees")
    sub = parser.add_subparsers(dest="command")
    for name, what in (
        ("build-tf", "the TensorFlow op library"),
        ("build-jax", "the JAX FFI handler"),
    ):
        b = sub.add_parser(name, help=f"compile {what} into the cache")
        b.add_argument("--force", action="store_true", help="rebuild even if cached")
    args = parser.parse_args(argv)
    if args.command in ("build-tf", "build-jax"):
        return build_binding(
            {"build-tf": "tensorflow", "build-jax": "jax"}[args.command], args.force
        )
    if args.check or args.command is None:
        return check()
    return 0


if __name__ == "__main__":
    sys.exit(main())
