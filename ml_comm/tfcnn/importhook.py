"""The import hook: load tf_cnn_benchmarks's benchmark_cnn as usual, then patch it.

find_spec asks the other finders for the module's real spec and wraps its loader;
the wrapper runs the real loader, then patch.apply(). Names other than TARGETS are
answered with None at the cost of one set lookup.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys
import threading

TARGETS = frozenset({"benchmark_cnn"})
_busy = threading.local()

LEGACY_KERAS_HINT = (
    "ml_comm: tf_cnn_benchmarks needs legacy Keras with TensorFlow >= 2.16: "
    "pip install --no-deps tf_keras==<your TensorFlow's major.minor> and set "
    "TF_USE_LEGACY_KERAS=1"
)


class _PatchingLoader(importlib.abc.Loader):
    """Runs the real loader, then patches the module; anything else goes to the real one."""

    def __init__(self, loader):
        self._loader = loader

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        try:
            self._loader.exec_module(module)
        except Exception as exc:
            if os.environ.get("TF_USE_LEGACY_KERAS", "").lower() not in ("1", "true"):
                if hasattr(exc, "add_note"):
                    exc.add_note(LEGACY_KERAS_HINT)
            raise
        finally:
            # Later look-ups (inspect, reload) see the real loader.
            module.__loader__ = self._loader
            if module.__spec__ is not None:
                module.__spec__.loader = self._loader
        from . import patch

        patch.apply(module)

    def __getattr__(self, name):
        return getattr(self._loader, name)


def find_spec(fullname, path=None, target=None):
    if fullname not in TARGETS or getattr(_busy, "on", False):
        return None
    _busy.on = True  # the look-up below asks every finder again, this one included
    try:
        spec = importlib.util.find_spec(fullname)
    finally:
        _busy.on = False
    if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
        return None
    spec.loader = _PatchingLoader(spec.loader)
    return spec


class Finder:
    """The sys.meta_path entry of `python -m ml_comm.tfcnn` (__main__.py)."""

    find_spec = staticmethod(find_spec)


def install() -> None:
    """Put the hook first on sys.meta_path (idempotent)."""
    if Finder not in sys.meta_path:
        sys.meta_path.insert(0, Finder)
