"""Answer `import horovod...` with ml_comm.horovod's modules, so a Horovod script runs
unchanged: `horovod.X` is `ml_comm.horovod.X`, imported when the script asks for it."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys

PREFIX = "horovod"
TARGET = "ml_comm.horovod"


class _Loader(importlib.abc.Loader):
    def __init__(self, target: str):
        self.target = target

    def create_module(self, spec):
        return importlib.import_module(self.target)

    def exec_module(self, module):
        pass  # already executed under its own name


class HorovodAliases(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name != PREFIX and not name.startswith(PREFIX + "."):
            return None
        real = TARGET + name[len(PREFIX) :]
        if importlib.util.find_spec(real) is None:
            return None
        return importlib.util.spec_from_loader(name, _Loader(real))


def install() -> None:
    """Put the aliases first on sys.meta_path (an installed Horovod is not used)."""
    if not any(isinstance(f, HorovodAliases) for f in sys.meta_path):
        sys.meta_path.insert(0, HorovodAliases())
