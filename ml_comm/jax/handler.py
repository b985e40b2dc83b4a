"""The XLA FFI handler (ffi/average.cc), loaded once per process: built on first use
(build.py), registered with JAX as the CPU custom call "ml_comm_average". Where it
cannot be built or loaded (no compiler, a jaxlib without FFI headers), `load()` says
why, once, and ml_comm.jax averages through jax.experimental.io_callback instead."""

from __future__ import annotations

import ctypes
import itertools
import sys
from collections.abc import Sequence

from ..core.errors import MLCommError
from . import build

TARGET = "ml_comm_average"

_lib: ctypes.CDLL | None = None
_unavailable: str | None = None  # why the handler cannot be used (said once)
_team_ids = itertools.count(1)  # never reused, unlike the teams' addresses


def load() -> bool:
    """Whether the handler is registered (building it first if needed)."""
    global _lib, _unavailable
    if _lib is not None:
        return True
    if _unavailable is not None:
        return False
    try:
        import jax

        path = build.build()
        lib = ctypes.CDLL(str(path))
        lib.mlc_jax_set_live_teams.argtypes = [
            ctypes.POINTER(ctypes.c_int64),
            ctypes.POINTER(ctypes.c_size_t),
            ctypes.c_int,
        ]
        jax.ffi.register_ffi_target(TARGET, jax.ffi.pycapsule(lib.MlCommAverage), platform="cpu")
    except (MLCommError, OSError, AttributeError, ImportError) as exc:
        _unavailable = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
        print(
            f"ml_comm: the JAX FFI handler is not available ({_unavailable}); gradients "
            "go through jax.experimental.io_callback, which copies every gradient twice",
            file=sys.stderr,
            flush=True,
        )
        return False
    _lib = lib
    return True


def set_live_teams(handles: Sequence[int]) -> list[int]:
    """Register the teams whose calls may run (init), or none (finalize). Returns the
    ids that compiled steps carry: a step traced for earlier teams then fails with a
    message, even when a new team happens to reuse an old one's address."""
    ids = [next(_team_ids) for _ in handles]
    if _lib is not None:
        n = max(len(handles), 1)
        _lib.mlc_jax_set_live_teams(
            (ctypes.c_int64 * n)(*ids), (ctypes.c_size_t * n)(*handles), len(handles)
        )
    return ids
