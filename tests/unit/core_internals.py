"""The C core's internals (csrc/include/ml_comm_internal.h: schedules, plans, the algorithm
table) as a cffi module of their own, for the tests that call them as the pure functions they
are. The product's module (ml_comm._core) declares only the public header; this one declares
both and links to the core it built, as the TensorFlow ops do.

Built once per header and core into a cache folder: `from core_internals import ffi, lib`.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import sys
import tempfile
from pathlib import Path

from cffi import FFI

from ml_comm import _core

ROOT = Path(__file__).resolve().parents[2]
CSRC = ROOT / "csrc"
HEADERS = [CSRC / "include" / "ml_comm.h", CSRC / "include" / "ml_comm_internal.h"]
CORE = Path(_core.__file__).resolve()
NAME = "_mlc_internals"


def _digest() -> str:
    h = hashlib.sha256()
    for path in [*HEADERS, CORE]:
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def _build(out: Path) -> None:
    builder = FFI()
    builder.cdef("\n".join(p.read_text() for p in HEADERS))
    builder.set_source(
        NAME,
        '#include "base/base.h"\n#include "plan/plan.h"\n',
        include_dirs=[str(CSRC), str(CSRC / "include")],
        extra_compile_args=["-std=gnu11"],
        extra_link_args=[f"-L{CORE.parent}", f"-l:{CORE.name}", f"-Wl,-rpath,{CORE.parent}"],
    )
    builder.compile(tmpdir=str(out), verbose=False)


def _load():
    cache = Path(tempfile.gettempdir()) / f"ml_comm-internals-{_digest()}"
    cache.mkdir(exist_ok=True)
    with open(cache / ".lock", "w") as lock:  # pytest-xdist or two suites at once
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not list(cache.glob(f"{NAME}*.so")):
            _build(cache)
    path = next(cache.glob(f"{NAME}*.so"))
    spec = importlib.util.spec_from_file_location(NAME, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[NAME] = module
    spec.loader.exec_module(module)
    return module


_module = _load()
ffi, lib = _module.ffi, _module.lib
