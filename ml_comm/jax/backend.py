"""The JAX backend (framework="jax"): gradients take and return JAX arrays, eagerly or
inside jax.jit (see __init__.py); broadcast is eager (see core/backend.py for the
interface). Host-side work (broadcast, the io_callback fallback) goes through the NumPy
backend of the same session."""

from __future__ import annotations

import threading
from contextlib import contextmanager, suppress

import numpy as np

from .._core import ffi, lib
from ..arrays.numpy_backend import NumpyBackend
from ..core.calls import refusing
from ..core.errors import BadArgumentError, BadArgumentTypeError, refused
from ..core.session import Session, is_pipelined
from ..core.weights_notice import layout
from . import average, handler, is_traced


def _dispatched_have_run() -> None:
    """Wait for the computations this process dispatched (JAX runs them asynchronously):
    their custom calls' requests must come before a request that Python makes now."""
    import jax

    # A step that failed raises here again: that is its caller's error, raised already.
    with suppress(Exception):
        jax.effects_barrier()  # the io_callback fallback's calls
    for array in jax.live_arrays():  # the outputs of every step still running
        with suppress(Exception):
            array.block_until_ready()


# Set on a thread while it runs the io_callback fallback's average, inside a step.
_in_step = threading.local()


def _after_dispatched(team: int) -> None:
    """Before a call of the API: the steps dispatched before it have run (a step's custom
    call that ran before the call on one rank and after it on another would meet the
    other rank's call). Not for a call made inside a running step, which would wait for
    itself: the fallback's own, and any callback's on a thread that XLA started."""
    inside = getattr(_in_step, "active", False)
    if not inside and not isinstance(threading.current_thread(), threading._DummyThread):
        _dispatched_have_run()


@contextmanager
def _told(telling):
    """What a call's checks raise is told by telling(), a context manager that tells what
    leaves it after the calls dispatched before it, as this call's request would have."""
    try:
        yield
    except Exception:
        with telling():
            raise


class JaxBackend:
    name = "jax"
    nonblocking_ops = False  # the custom call blocks XLA's thread until the team is done

    def __init__(self, session: Session):
        self.session = session
        self.host = NumpyBackend(session)
        session.calls.before_call = _after_dispatched
        self.team_ids: list[int] | None = None
        if handler.load():
            # The session's team ids (never reused): the ids compiled steps carry.
            self.team_ids = list(session.team_ids)
            handler.set_live_teams(
                self.team_ids, [int(ffi.cast("uintptr_t", t)) for t in session.teams]
            )

    def gradients(self, grads, team: int) -> list:
        self.session.team(team)  # a bad team id fails here, not inside a compiled step
        config = self.session.configs[team]
        if is_pipelined(config.ksteps, config.max_steps):
            raise BadArgumentError(
                f"team {team} is pipelined (config_team ksteps < max_steps), which the JAX "
                "backend does not do: JAX's compiled step needs this step's average; use a "
                "synchronous team (ksteps >= max_steps)"
            )
        team_id = None if self.team_ids is None else self.team_ids[team]
        # A compiled step's calls are judged by the weights check as they run (an eager
        # call was judged by the caller).
        compiled = not self.runs_eagerly(grads)

        def host_average(arrays: list) -> list:
            _in_step.active = True
            try:
                if compiled and arrays:  # an empty call is no step
                    self.session.weights.step(team, layout(arrays))
                return self.host.gradients(arrays, team)
            finally:
                _in_step.active = False

        def telling():
            handle = self.session.team(team)
            if team_id is None:  # as the NumPy path's call that io_callback would make,
                # after the steps dispatched before (its call's before_call)
                return self.session.calls.failing(team, handle, lib.MLC_KIND_ALLREDUCE)
            _dispatched_have_run()
            return refusing(handle, lib.MLC_KIND_ALLREDUCE)  # as the custom call: no identity

        return average(grads, team_id, host_average, compiled, lambda: _told(telling))

    def runs_eagerly(self, grads) -> bool:
        return isinstance(grads, (list, tuple)) and not is_traced(grads)

    def broadcast(self, values, root: int, team: int = 0):
        # One call as the NumPy API's (the host copies are broadcast through it), after the
        # steps dispatched before (before_call): an argument that only this rank finds
        # wrong is told to the others' broadcast.
        calls = self.session.calls
        with calls.calling(team, self.session.team(team), lib.MLC_KIND_BROADCAST):
            return self._broadcast(values, root, team)

    def _broadcast(self, values, root: int, team: int):
        import jax.numpy as jnp

        single = not isinstance(values, (list, tuple))  # one array in, one array out
        if single and not hasattr(values, "shape"):
            raise BadArgumentTypeError(
                f"broadcast takes a JAX array or a list of them, got {type(values).__name__}"
            )
        values = [values] if single else list(values)
        if is_traced(values):
            raise BadArgumentTypeError(
                "broadcast takes concrete JAX arrays (eagerly), not values being traced by "
                "jax.jit: broadcast the weights before the first compiled step"
            )
        for i, v in enumerate(values):
            if v is None:
                error = BadArgumentTypeError(f"broadcast values[{i}] is None, not an array")
                raise refused(error, "MLC_REFUSED_NONE", i)
        arrays = [np.array(v) for v in values]  # host copies, written in place
        self.host.broadcast(arrays, root, team)
        out = [jnp.asarray(a) for a in arrays]
        return out[0] if single else out

    def restart(self, team: int) -> None:
        self.host.restart(team)

    def close(self) -> None:
        if self.team_ids is not None:
            handler.set_live_teams([], [])  # compiled steps of these teams fail cleanly from now on
        self.host.close()
