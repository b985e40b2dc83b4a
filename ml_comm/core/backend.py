"""What a framework plugs into a session: how gradients and broadcast take its tensors.

The session (session.py) owns MPI, the teams and their settings and knows no
framework. `init(..., framework=...)` picks a backend by name from BACKENDS; the
module is imported only then, so the NumPy API never imports TensorFlow.

A backend is made once per session, after the teams exist, and is closed before
they are destroyed:

    backend = factory(session)        # may raise MLCommError (e.g. TensorFlow missing)
    backend.gradients(grads, team)    # the list averaged over the session's ranks
    backend.broadcast(values, root, team)  # root's values (in place or new, per framework)
    backend.runs_eagerly(grads)       # whether gradients averages them now (not tracing)
    backend.restart(team)             # config_team: the team's pipelines count afresh
    backend.close()                   # finalize: before the teams go
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Protocol

from .errors import BadArgumentError, MLCommError


@dataclass(frozen=True)
class _Entry:
    module: str
    factory: str
    needs: str = ""  # what the module imports that may be missing, and the extra to install
    extra: str = ""


# framework name -> where its backend lives; None and "numpy" are the NumPy backend.
BACKENDS = {
    "numpy": _Entry("ml_comm.arrays.numpy_backend", "NumpyBackend"),
    "tensorflow": _Entry("ml_comm.tensorflow.backend", "TensorFlowBackend", "TensorFlow", "tf"),
    "jax": _Entry("ml_comm.jax.backend", "JaxBackend", "JAX", "jax"),
}
FRAMEWORKS = (None, *BACKENDS)


class Backend(Protocol):
    name: str
    # True when the framework's ops never block the caller (they are waited for by the
    # framework): the periodic report then shows exposed rather than waited time.
    nonblocking_ops: bool

    def gradients(self, grads: Any, team: int) -> list: ...

    def broadcast(self, values: Any, root: int, team: int = 0) -> Any: ...

    def runs_eagerly(self, grads: Any) -> bool: ...

    def restart(self, team: int) -> None: ...

    def close(self) -> None: ...


def check_name(framework: str | None) -> str:
    """The backend's name for init's `framework` argument; ValueError for an unknown one."""
    if framework not in FRAMEWORKS:
        raise BadArgumentError(f"framework must be one of {FRAMEWORKS}, got {framework!r}")
    return framework or "numpy"


def create(name: str, session: Any) -> Backend:
    """The backend `name` made for `session` (a session.Session; typed loosely here, as
    session.py imports this module)."""
    entry = BACKENDS[name]
    try:
        module = importlib.import_module(entry.module)
    except ImportError as exc:
        if not entry.needs:
            raise
        raise MLCommError(
            f"framework={name!r} needs {entry.needs} ({exc}); pip install 'ml_comm[{entry.extra}]'"
        ) from exc
    return getattr(module, entry.factory)(session)
