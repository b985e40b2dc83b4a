"""The XLA FFI handlers (ffi/*.cc), loaded once per process: built on first use
(build.py), registered with JAX as the CPU custom calls "ml_comm_average" (ffi/average.cc)
and "ml_comm_step_open", "ml_comm_step_submit", "ml_comm_step_wait" (ffi/overlap.cc, the
Keras train step overlapped with backprop). Where they
cannot be built or loaded (no compiler, a jaxlib without FFI headers), `load()` says
why, once, and ml_comm.jax averages through jax.experimental.io_callback instead."""

from __future__ import annotations

import ctypes
import sys
from collections.abc import Sequence

from ..core.errors import MLCommError
from . import build

TARGET = "ml_comm_average"
STEP_OPEN, STEP_SUBMIT, STEP_WAIT = "ml_comm_step_open", "ml_comm_step_submit", "ml_comm_step_wait"
_SYMBOLS = {
    TARGET: "MlCommAverage",
    STEP_OPEN: "MlCommStepOpen",
    STEP_SUBMIT: "MlCommStepSubmit",
    STEP_WAIT: "MlCommStepWait",
}

_lib: ctypes.CDLL | None = None
_unavailable: str | None = None  # why the handler cannot be used (said once)


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
        lib.mlc_jax_overlapped_steps.restype = ctypes.c_int64
        for target, symbol in _SYMBOLS.items():
            jax.ffi.register_ffi_target(
                target, jax.ffi.pycapsule(getattr(lib, symbol)), platform="cpu"
            )
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


def set_live_teams(ids: Sequence[int], handles: Sequence[int]) -> None:
    """Register the teams whose calls may run (init: the session's team ids, which
    compiled steps carry, and handles), or none (finalize): a step traced for earlier
    teams then fails with a message, even when a new team reuses an old one's address."""
    if _lib is not None:
        n = max(len(handles), 1)
        _lib.mlc_jax_set_live_teams(
            (ctypes.c_int64 * n)(*ids), (ctypes.c_size_t * n)(*handles), len(handles)
        )


def abandon_steps() -> None:
    """Cancel the groups of overlapped steps that failed inside XLA (ffi/overlap.cc)."""
    if _lib is not None:
        _lib.mlc_jax_abandon_steps()


def overlapped_steps() -> int:
    """Overlapped steps (ffi/overlap.cc) that returned averages in this process."""
    return int(_lib.mlc_jax_overlapped_steps()) if _lib is not None else 0
