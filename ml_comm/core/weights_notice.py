"""The warning for a job that averages gradients without ever sharing its weights.

ml_comm sees gradients, not weights. A script that averages gradients but never
broadcasts rank 0's weights starts every rank from its own random weights; each rank
then applies the same averaged update to different weights and trains a model of its
own, with no error anywhere: the checkpoint rank 0 writes is not the job's model.

So a job on more than one rank whose gradients were averaged (`mc.gradients`) with no
`mc.broadcast` and no `mc.check_buffers_match` before finalize gets one warning from rank
0, and a job that averages eagerly (NumPy arrays, TensorFlow's eager mode, JAX outside
jit) earlier: at a team's second call. Not at the first: Horovod-style scripts broadcast
after the first step, once a lazily built model has its weights, and a GAN's first step
averages each model's gradients once before that. Not before finalize for a traced step
(tf.function, jax.jit, a TF1 graph): it calls gradients when it is built, each team's
block or tower once, in any order with the graph's broadcast. The warning names the
remedy of the front end that averaged (ml_comm's own calls, or Horovod's under
ml_comm.horovod).
"""

from __future__ import annotations

from .output import say

# What the warning names, per front end that averages: what shares weights, and the call
REMEDIES = {
    "ml_comm": (
        "broadcast (mc.broadcast) or checked (mc.check_buffers_match)",
        "mc.broadcast(weights)",
    ),
    "horovod": (
        "broadcast (hvd.broadcast_variables, BroadcastGlobalVariablesCallback)",
        "hvd.broadcast_variables(model.variables, root_rank=0)",
    ),
}


class WeightsNotice:
    """One session's: whether its ranks were told to share weights (`settled`: shared,
    or warned already)."""

    def __init__(self, rank: int, size: int):
        self.rank = rank
        self.settled = size == 1  # one rank has nothing to differ from
        self.calls_unshared: dict[int, int] = {}  # team -> its calls before any sharing
        self.front_end = "ml_comm"

    def shared(self) -> None:
        """A broadcast or a check of the buffers ran."""
        self.settled = True

    def averaged(self, eager: bool, team: int = 0, front_end: str = "ml_comm") -> None:
        """gradients ran on `team` before any broadcast (NumPy's hot path checks
        `settled` first: its cost is that one attribute); `eager`: averaged now, so each
        call is a step's, not a traced step's building; `front_end`: whose remedy the
        warning names (a key of REMEDIES)."""
        if self.settled:
            return
        calls = self.calls_unshared[team] = self.calls_unshared.get(team, 0) + 1
        self.front_end = front_end
        if eager and calls >= 2:
            self._warn()

    def finalizing(self) -> None:
        if not self.settled and self.calls_unshared:
            self._warn()

    def _warn(self) -> None:
        self.settled = True
        if self.rank == 0:
            shared_by, call = REMEDIES[self.front_end]
            say(
                f"ml_comm: warning: gradients were averaged, but no weights were {shared_by} "
                f"in this job: unless every rank started from the same "
                f"weights, each rank trains a model of its own. Broadcast rank 0's weights "
                f"once, before the first step or right after it where the first step builds "
                f"them: {call}"
            )
