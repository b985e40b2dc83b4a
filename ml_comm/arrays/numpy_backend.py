"""The NumPy backend (framework None or "numpy"): gradients and broadcast take and
return NumPy arrays; pipelined teams keep their state here (see core/backend.py)."""

from __future__ import annotations

from .._core import ffi, lib
from ..core import dtypes as _dtypes
from ..core.session import Session, is_pipelined
from ..core.status import check
from . import _numpy_glue, broadcasts, pipeline, reductions
from .pool import MIN_BYTES, OutputPool
from .requests import wait_one


class NumpyBackend:
    name = "numpy"
    nonblocking_ops = False  # callers block in mlc_request_wait

    def __init__(self, session: Session):
        self.session = session
        self.thread_state = session.calls.thread_state
        session.calls.publish_with(_numpy_glue.publish)  # the glue's copy of each identity
        # Pipelined teams: team -> {gradient layout: pipeline.Stage}
        self.pipelines: dict[int, dict] = {}
        # Results' memory, per team (teams run concurrently): team -> OutputPool
        self.pools: dict[int, OutputPool] = {}
        # Each team's _numpy_glue binding (one-array calls in one C call each): team -> it;
        # config_team's restart drops it.
        self.bindings: dict[int, object] = {}
        # Teams whose one-array gradients may take _numpy_glue.gradients: synchronous, no
        # finite check (until a restart): team -> its binding.
        self.plain: dict[int, object] = {}

    def runs_eagerly(self, grads) -> bool:
        return True

    def gradients(self, grads, team: int, out=None) -> list:
        if out is None:
            # One plain array on a plain team, in one C call with the signature of the
            # general path's one-dtype request: ranks may take either path. At 8 bytes the
            # whole reduction takes about a microsecond; None: the general path takes it.
            result = _numpy_glue.gradients(self.plain, grads, team, self.thread_state)
            if type(result) is list:
                return result
            if result is not None:  # the core's status and text
                check(result[0], "gradients", result[1])
        s = self.session
        handle = s.calling_team(team, lib.MLC_KIND_ALLREDUCE)  # before the pipelines
        with s.calls.calling(team, handle, lib.MLC_KIND_ALLREDUCE):
            return self._gradients(handle, grads, team, out)

    def _gradients(self, handle, grads, team: int, out) -> list:
        s = self.session
        stages = self.pipelines.setdefault(team, {})
        pool = self.pools.setdefault(team, OutputPool())
        config = s.configs[team]
        pipelined = is_pipelined(config.ksteps, config.max_steps)
        if team not in self.plain and not s.guard.finite and not pipelined:  # until a restart
            self.plain[team] = self.binding(team, handle)
        return reductions.gradients(s, stages, pool, grads, team, out)

    def reduce_in_place(self, array, team: int, op: int, what: str):
        """mc.average / mc.allreduce_sum: a plain writeable array in one C call (as
        gradients'), anything else through reductions.reduce_in_place's checks."""
        result = _numpy_glue.reduce_in_place(self.bindings, array, team, op, self.thread_state)
        if type(result) is tuple:  # the core's status and text
            check(result[0], what, result[1])
        if result is not None:
            return result
        s = self.session
        handle = s.calling_team(team, lib.MLC_KIND_ALLREDUCE)  # a bad team id fails here
        with s.calls.calling(team, handle, lib.MLC_KIND_ALLREDUCE):
            result = reductions.reduce_in_place(s, array, team, op, what)
        self.binding(team, handle)
        return result

    def binding(self, team: int, handle):
        binding = self.bindings.get(team)
        if binding is None:
            pool = self.pools.setdefault(team, OutputPool())
            binding = self.bindings[team] = bind_team(handle, pool)
        return binding

    def broadcast(self, values, root: int, team: int = 0):
        return broadcasts.broadcast(self.session, values, root, team)

    def restart(self, team: int) -> None:
        self.plain.pop(team, None)
        self.bindings.pop(team, None)
        # A reduction in flight finishes (under the old settings) and its result is dropped.
        pipeline.drain_all(self.pipelines.pop(team, {}), wait_one)

    def close(self) -> None:
        self.plain = {}
        self.bindings = {}
        for stages in self.pipelines.values():
            pipeline.drain_all(stages, wait_one)
        self.pipelines = {}


def bind_team(handle, pool: OutputPool):
    """_numpy_glue's binding of one team: results from the team's pool from MIN_BYTES
    (fresh arrays below), for every dtype the core reduces."""
    return _numpy_glue.bind(
        int(ffi.cast("uintptr_t", ffi.addressof(lib, "mlc_team_allreduce_into"))),
        int(ffi.cast("uintptr_t", ffi.addressof(lib, "mlc_team_begin_call"))),
        int(ffi.cast("uintptr_t", ffi.addressof(lib, "mlc_team_end_call"))),
        int(ffi.cast("uintptr_t", ffi.addressof(lib, "mlc_shape_digest"))),
        int(ffi.cast("uintptr_t", handle)),
        pool.handle,
        MIN_BYTES,
        [(dtype.num, code) for dtype, code in _dtypes.REDUCED_CODES.items()],
    )
