"""The check that a job shares its weights, and the warning where it cannot tell.

ml_comm sees gradients, not weights. A script that averages gradients but never
broadcasts rank 0's weights starts every rank from its own random weights; each rank
then applies the same averaged update to different weights and trains a model of its
own, with no error anywhere: the checkpoint rank 0 writes is not the job's model.

So on more than one rank a model's second step of gradients (`mc.gradients`, Horovod's
under ml_comm.horovod) fails on every rank, before it moves anything, until the job
broadcasts (`mc.broadcast`) or checks (`mc.check_buffers_match`, where it finds them
equal) its weights. The core decides (csrc/team/weights_check.c): each call of gradients
is named by its layout (here, for an eager call) or by its op (a traced step's), and a
call the team saw in an earlier step is its model's second. Not the first step:
Horovod-style scripts broadcast after it, once a lazily built model has its weights, and
a GAN's first step averages each model once before that. ML_COMM_WEIGHTS_CHECK=0 turns
the check off, for a job whose ranks start equal by construction and do not want to
check it.

A traced step that ran once (a job of one step) never reaches the check: finalize warns
of it from rank 0, naming the remedy of the front end that averaged (ml_comm's own
calls, or Horovod's under ml_comm.horovod).
"""

from __future__ import annotations

from .._core import ffi, lib
from .output import say
from .status import error, text

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

ERR_LEN = 1024


def layout(arrays) -> int:
    """A digest of a list's shapes and dtypes: which call of gradients it is, alike in every
    step (compared on this rank only, so Python's hash serves)."""
    key = tuple(
        (tuple(getattr(a, "shape", ())), str(getattr(a, "dtype", type(a).__name__)))
        for a in arrays
        if a is not None
    )
    return hash(key) & 0xFFFFFFFFFFFFFFFF


class WeightsNotice:
    """One session's: whether its ranks shared their weights (`settled`: shared, not
    checked, or warned already), and the core's teams, which judge the calls."""

    def __init__(self, rank: int, size: int, check: bool):
        self.rank = rank
        self.settled = size == 1 or not check  # one rank has nothing to differ from
        self.handles: list = []  # the core's teams, each judging its calls
        self.averaged_unshared = False  # gradients ran before any sharing
        self.front_end = "ml_comm"

    def attach(self, handle) -> None:
        """A team of the session was created: it judges calls unless settled."""
        self.handles.append(handle)
        lib.mlc_team_set_weights_check(handle, int(not self.settled))

    def shared(self) -> None:
        """A broadcast or a check of the buffers ran: no team judges from now on."""
        if not self.settled:
            self.settled = True
            for handle in self.handles:
                lib.mlc_team_set_weights_check(handle, 0)

    def averaged(
        self, eager: bool, team: int, grads, step: int = 0, front_end: str = "ml_comm"
    ) -> None:
        """gradients ran on `team` before any broadcast (NumPy's hot path checks
        `settled` first: its cost is that one attribute); `eager`: averaged now, so the
        core judges the call (StateError at its model's second step), not a traced step's
        building (its ops are judged at each run); `step`: the thread's marked step (0:
        none, each call a step of its own); `front_end`: whose remedy the warning names
        (a key of REMEDIES). A `grads` that is no list is left to the call to refuse."""
        if self.settled or not isinstance(grads, (list, tuple)):
            return
        self.averaged_unshared = True
        self.front_end = front_end
        if eager and any(g is not None for g in grads):  # an empty call is no step
            self.step(team, layout(grads), step)

    def step(self, team: int, call: int, step: int = 0) -> None:
        """A call of gradients on `team` (`call`: its layout, alike in every step),
        judged by the core; raises its StateError at the model's second step, on every
        rank alike."""
        if not self.settled and 0 <= team < len(self.handles):
            err = ffi.new(f"char[{ERR_LEN}]")  # the calling thread's: teams run on several
            rc = lib.mlc_team_weights_step(self.handles[team], step, call, err, ERR_LEN)
            if rc != lib.MLC_OK:
                raise error(rc, f"gradients failed: {text(err)}")

    def finalizing(self) -> None:
        """Warn of a job that averaged unshared before it ended, unless the check
        refused one of its steps already."""
        if self.settled or not self.averaged_unshared:
            return
        if not any(lib.mlc_team_weights_refused(h) for h in self.handles):
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
