"""The TensorFlow backend (framework="tensorflow"): gradients and broadcast are
TensorFlow ops that take and return tensors (see backend.py for the interface)."""

from __future__ import annotations

from .. import tensorflow as binding
from .._core import ffi
from ..core.output import say
from ..core.session import Session


class TensorFlowBackend:
    name = "tensorflow"
    # The ops never block: what they wait for is a reduction's time after its last input.
    nonblocking_ops = True

    def __init__(self, session: Session):
        binding.check_version()
        # Rank 0 says when the ops are compiled (minutes, once) and how far it got.
        binding.load_ops(say if session.rank == 0 else None)
        self.session = session
        # The ids the ops carry: a graph built for an earlier session fails with a message.
        self.team_ids = binding.set_live_teams(
            [int(ffi.cast("uintptr_t", t)) for t in session.teams]
        )

    def gradients(self, grads, team: int) -> list:
        self.session.team(team)
        config = self.session.configs[team]
        return binding.gradients(
            grads,
            self.team_ids[team],
            self.session.size,
            ksteps=config.ksteps,
            max_steps=config.max_steps,
        )

    def broadcast(self, values, root: int, team: int = 0):
        self.session.team(team)
        return binding.broadcast(values, self.team_ids[team], self.session.check_root(root))

    def restart(self, team: int) -> None:
        binding.reset_pipelines(self.team_ids[team])

    def close(self) -> None:
        binding.set_live_teams([])  # the teams' ops must fail cleanly from now on
