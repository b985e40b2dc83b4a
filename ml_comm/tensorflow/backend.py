"""The TensorFlow backend (framework="tensorflow"): gradients and broadcast are
TensorFlow ops that take and return tensors (see backend.py for the interface)."""

from __future__ import annotations

from .. import tensorflow as binding
from ..core.calls import waiting_on
from ..core.output import say
from ..core.session import Session, is_pipelined
from . import library, overlap_note


class TensorFlowBackend:
    name = "tensorflow"
    # The ops never block: what they wait for is a reduction's time after its last input.
    nonblocking_ops = True

    def __init__(self, session: Session):
        binding.check_version()
        # Rank 0 says when the ops are compiled (minutes, once) and how far it got.
        binding.load_ops(say if session.rank == 0 else None)
        if session.rank == 0 and session.size > 1 and (text := overlap_note.note()):
            say(text)
        self.session = session
        binding.set_live(session)  # its teams' ops may run

    def gradients(self, grads, team: int) -> list:
        s = self.session
        handle = s.team(team)
        config = s.configs[team]

        pipelined = is_pipelined(config.ksteps, config.max_steps)
        eager = self.runs_eagerly(grads)

        def ops() -> list:
            return binding.gradients(
                grads,
                s.team_ids[team],
                s.size,
                ksteps=config.ksteps,
                max_steps=config.max_steps,
                check_weights=True,
                step_number=self._step(team, eager) if pipelined else 0,
            )

        if not eager or pipelined:
            # Traced: its ops run on TensorFlow's threads, in graph order. Pipelined: a
            # step's request may be submitted after the call that made it returned.
            return ops()
        # Eagerly the ops submit on this thread before the call returns: a call of the API,
        # as NumPy's, so that a second thread on the team raises at once and calls made in
        # another order on another rank fail instead of pairing (Calls.calling).
        with s.calls.calling(team, handle), waiting_on(handle):
            return ops()

    def _step(self, team: int, eager: bool):
        """A pipelined call's step number, which its requests carry: the step the thread
        marked (ml_comm.step), else the team's count of Keras's steps (read eagerly, or
        by the traced step), 0 where no one counts them; none in a tf.compat.v1 graph (its
        session holds no variable made outside it)."""
        import tensorflow as tf

        team_id = self.session.team_ids[team]
        if eager:
            return self.session.calls.marked_step() or library.counted_steps(team_id)
        if not tf.compat.v1.executing_eagerly_outside_functions():
            return 0
        return library.step_counter(team_id).read_value()

    def runs_eagerly(self, grads) -> bool:
        import tensorflow as tf

        return tf.executing_eagerly()

    def broadcast(self, values, root: int, team: int = 0):
        self.session.team(team)
        return binding.broadcast(values, self.session.team_ids[team], self.session.root_index(root))

    def restart(self, team: int) -> None:
        binding.reset_pipelines(self.session.team_ids[team])

    def close(self) -> None:
        binding.set_live(None)  # the teams' ops must fail cleanly from now on
