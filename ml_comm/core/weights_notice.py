"""The warning for a job that averages gradients without ever sharing its weights.

ml_comm sees gradients, not weights. A script that averages gradients but never
broadcasts rank 0's weights starts every rank from its own random weights; each rank
then applies the same averaged update to different weights and trains a model of its
own, with no error anywhere: the checkpoint rank 0 writes is not the job's model.

So a job on more than one rank whose gradients were averaged (`mc.gradients`) with no
`mc.broadcast` and no `mc.check_buffers_match` before finalize gets one warning from rank
0, and a job on NumPy arrays earlier, at gradients' second call. Not at the first:
Horovod-style scripts broadcast after the first step, once a lazily built model has its
weights. Not before finalize with a framework: a traced step (tf.function, jax.jit, a
TF1 graph) calls gradients when it is built, each team's block or tower once, in any
order with the graph's broadcast.
"""

from __future__ import annotations

from .output import say


class WeightsNotice:
    """One session's: whether its ranks were told to share weights (`settled`: shared,
    or warned already)."""

    def __init__(self, rank: int, size: int):
        self.rank = rank
        self.settled = size == 1  # one rank has nothing to differ from
        self.calls_unshared = 0

    def shared(self) -> None:
        """A broadcast or a check of the buffers ran."""
        self.settled = True

    def averaged(self, eager: bool) -> None:
        """gradients ran before any broadcast; `eager`: on NumPy arrays, so each call is
        a step's (the caller checks `settled` first: the hot path's cost is that one
        attribute)."""
        self.calls_unshared += 1
        if eager and self.calls_unshared >= 2:
            self._warn()

    def finalizing(self) -> None:
        if not self.settled and self.calls_unshared:
            self._warn()

    def _warn(self) -> None:
        self.settled = True
        if self.rank == 0:
            say(
                "ml_comm: warning: gradients were averaged, but no weights were broadcast "
                "(mc.broadcast) or checked (mc.check_buffers_match) in this job: unless "
                "every rank started from the same weights, each rank trains a model of its "
                "own. Broadcast rank 0's weights once, before the first step or right after "
                "it where the first step builds them: mc.broadcast(weights)"
            )
