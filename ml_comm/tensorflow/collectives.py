"""TensorFlow collectives beyond the average, as ops (ops/collectives.cc), eager and inside
tf.function: allreduce with any op, allgather (a first dimension that may differ by rank),
reducescatter and alltoall, with their gradients. In a graph each op waits for the team's
previous one (control dependencies, as gradients() chains its groups), so graph scheduling
cannot reorder them across ranks."""

from __future__ import annotations

import tensorflow as tf

from .._core import lib
from ..arrays.collectives import op_code
from ..core.calls import refusing
from ..core.errors import StateError
from .arguments import checked_dtype, tensor_of
from .errors import raising_typed
from .library import _chain, _last_anchor, live_team, load_ops, team_number


def _team(team: int) -> tuple[int, object]:
    """The id the ops carry and the core's handle of team number `team`."""
    found = live_team(team)
    if found is None:
        raise StateError(
            "ml_comm.tensorflow collectives need ml_comm.init(..., framework='tensorflow') "
            f"and a team {team} (teams 0..nteams-1)"
        )
    return found


def _ordered(team_id: int, make):
    """make() under the team's chain; its op becomes the one the next must wait for."""
    with tf.control_dependencies(_chain(team_id)):
        out = make()
    if not tf.executing_eagerly():
        first = out[0] if isinstance(out, (list, tuple)) else out
        _last_anchor[tf.compat.v1.get_default_graph()][team_id] = first.op
    return out


@raising_typed
def allreduce(tensor, op: str = "sum", team: int = 0) -> tf.Tensor:
    """`tensor` reduced over all ranks: op "sum", "average", "min", "max" or "product"."""
    team_id, handle = _team(team)
    with refusing(handle, lib.MLC_KIND_ALLREDUCE):
        code, t = op_code(op, "allreduce"), tensor_of(tensor, "allreduce's tensor")
        checked_dtype(t, reduces=True)
    ops = load_ops()
    return _ordered(team_id, lambda: ops.ml_comm_allreduce_op([t], team_id=team_id, op=code))[0]


@raising_typed
def allgather(tensor, team: int = 0) -> tf.Tensor:
    """Every rank's rows, concatenated in rank order; the first dimension may differ by rank."""
    team_id, handle = _team(team)
    with refusing(handle, lib.MLC_KIND_ALLGATHER):
        t = tensor_of(tensor, "allgather's tensor")
        checked_dtype(t, reduces=False)
    ops = load_ops()
    return _ordered(team_id, lambda: ops.ml_comm_allgather(t, team_id=team_id))


@raising_typed
def reducescatter(tensor, op: str = "average", team: int = 0) -> tf.Tensor:
    """The rows reduced over all ranks with op; this rank's share: rows // size, one more on
    the first rows % size ranks, in rank order."""
    team_id, handle = _team(team)
    with refusing(handle, lib.MLC_KIND_REDUCESCATTER):
        code, t = op_code(op, "reducescatter"), tensor_of(tensor, "reducescatter's tensor")
        checked_dtype(t, reduces=True)
    ops = load_ops()
    return _ordered(team_id, lambda: ops.ml_comm_reducescatter(t, team_id=team_id, op=code))


@raising_typed
def alltoall(tensor, splits=None, team: int = 0) -> tuple[tf.Tensor, tf.Tensor]:
    """splits[d] rows go to rank d (None: evenly); returns (rows received, in rank order,
    and how many came from each rank, int64). Splits that are wrong on any rank (their
    number, a negative one, their sum, or rows that do not divide evenly) fail the op on
    every rank, naming each such rank."""
    team_id, handle = _team(team)
    evenly = splits is None
    with refusing(handle, lib.MLC_KIND_ALLTOALL):
        t = tensor_of(tensor, "alltoall's tensor")
        checked_dtype(t, reduces=False)
        splits = tensor_of(tf.zeros([0], tf.int64) if evenly else splits, "alltoall's splits")
    # Splits that are not integers go to the core as no list at all (a 2-D tensor), so
    # that every rank fails with this rank named, as for any other wrong splits.
    splits = tf.cast(splits, tf.int64) if splits.dtype.is_integer else tf.zeros([0, 0], tf.int64)
    ops = load_ops()
    out = _ordered(team_id, lambda: ops.ml_comm_alltoall(t, splits, team_id=team_id, evenly=evenly))
    return out[0], out[1]


def _team_of(op) -> int:
    """The team number of an op's team id (gradients run the ops on the same team)."""
    return team_number(op.get_attr("team_id"))


@tf.RegisterGradient("MlCommAllreduceOp")
def _allreduce_grad(op, *grads):
    code = op.get_attr("op")
    if code not in (lib.MLC_OP_SUM, lib.MLC_OP_AVERAGE):
        raise LookupError("ml_comm allreduce: min, max and product have no gradient")
    name = "sum" if code == lib.MLC_OP_SUM else "average"
    return [allreduce(g, name, _team_of(op)) for g in grads]


@tf.RegisterGradient("MlCommAllgather")
def _allgather_grad(op, grad):
    """The average over the ranks of the upstream gradient, this rank's rows of it (as
    Horovod defines it)."""
    team = _team_of(op)
    _, handle = _team(team)
    rows = tf.shape(op.inputs[0], out_type=tf.int64)[:1]
    all_rows = allgather(rows, team)
    summed = allreduce(grad, "average", team)
    first = tf.reduce_sum(all_rows[: lib.mlc_team_rank(handle)])
    return summed[first : first + rows[0]]


@tf.RegisterGradient("MlCommReducescatter")
def _reducescatter_grad(op, grad):
    """The upstream gradients of every rank, gathered; times the rank count for a sum (as
    Horovod defines it)."""
    team = _team_of(op)
    code = op.get_attr("op")
    if code not in (lib.MLC_OP_SUM, lib.MLC_OP_AVERAGE):
        raise LookupError("ml_comm reducescatter: min, max and product have no gradient")
    if code == lib.MLC_OP_SUM:
        grad = grad * tf.cast(lib.mlc_team_size(_team(team)[1]), grad.dtype)
    return allgather(grad, team)


@tf.RegisterGradient("MlCommAlltoall")
def _alltoall_grad(op, grad, _received_splits_grad):
    """The upstream gradient sent back where its rows came from."""
    back, _ = alltoall(grad, op.outputs[1], _team_of(op))
    return [back, None]


__all__ = ["allgather", "allreduce", "alltoall", "reducescatter"]
