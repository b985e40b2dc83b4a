"""TensorFlow ops: `ml_comm.broadcast` and `ml_comm.gradients` after
`ml_comm.init(..., framework="tensorflow")`, and the collectives below (allgather,
reducescatter, alltoall, allreduce with any op), which take and return tensors
([TensorFlow](tensorflow.md), [Collectives](collectives.md#tensorflow)).

Eager mode runs one fused op per dtype; in graphs (tf.function, tf.compat.v1) every
gradient gets its own op of a keyed group, so each is reduced as soon as backprop
produced it. The op library is compiled on first use and cached
([The op library](tensorflow.md#the-op-library)).
"""

from __future__ import annotations

import tensorflow as tf

from .._core import lib
from ..arrays.buffers import dims_digest
from ..core.errors import BadArgumentTypeError, MLCommError
from ..core.layout import fused_order
from ..core.session import is_pipelined
from .arguments import CODES, by_dtype, checking, tensor_of, tensors_of
from .arguments import REDUCED as REDUCED  # the dtypes the ops reduce, and move
from .arguments import SUPPORTED as SUPPORTED
from .errors import raising_typed
from .library import _chain, _group_keys, _last_anchor, load_ops, reset_pipelines, set_live


def as_attribute(digest: int) -> int:
    """A uint64 digest as the signed int64 that an op's attribute holds."""
    return digest - (1 << 64) if digest >= 1 << 63 else digest


def attr_digest(tensor) -> int:
    """The core's digest of a tensor's static shape (mlc_tensor.shape), as an attribute."""
    return as_attribute(dims_digest(tuple(tensor.shape.as_list())))


@raising_typed
def gradients(
    grads,
    team_id: int,
    nranks: int,
    average: bool = True,
    ksteps: int = 0,
    max_steps: int = 0,
    check_weights: bool = False,
    labels: list[int] | None = None,
    step_number=0,
) -> list:
    """The ops behind `ml_comm.gradients` with framework="tensorflow": each tensor of
    `grads` averaged (or summed) over `nranks` ranks on the team, same order; None stays
    None. Eagerly one fused op per dtype; in a graph one op per gradient (a keyed group).
    check_weights: the gradients of a training step, so in a graph each run is judged by
    the check that the job shares its weights (eagerly the caller judges the call).
    labels: each gradient's mlc_tensor.label (a uint64 digest of what the front end calls
    it, which the ranks compare; None: none), as grads. step_number: on a pipelined team, the
    number of the training step the call runs in (an int64 scalar tensor, or an int; 0:
    not counted), which its requests carry."""
    ops = load_ops()
    with checking(team_id, lib.MLC_KIND_ALLREDUCE):
        if not isinstance(grads, (list, tuple)):
            raise BadArgumentTypeError(
                f"gradients takes a list of tensors, got {type(grads).__name__}"
            )
        dense = tensors_of(grads, "gradients")
        groups = by_dtype(dense, reduces=True)
    result: list = [None] * len(grads)
    pipelined = is_pipelined(ksteps, max_steps)
    # Each dtype's op says which part of the call it is and all the call's dtypes: ranks
    # whose lists hold other dtypes fail at the first part instead of one op waiting.
    parts = {"nparts": len(groups), "call_dtypes": sum(1 << CODES[d] for d in groups)}
    step = {"check_weights": check_weights and not tf.executing_eagerly()}
    if not groups and nranks > 1:
        _empty_call(ops, team_id)
    # Eagerly on a pipelined team with counted steps every dtype's op runs, also after an
    # earlier one raised (the failure of the reduction it finished, having done its part),
    # so that each dtype's pipeline takes its turn as on the other ranks; the first error
    # is raised after the last op.
    failure = None
    for part, idx in enumerate(groups.values()):
        layout = fused_order([dense[i].shape.rank for i in idx], idx)
        tensors = [dense[i] for i in layout]
        counts = [t.shape.num_elements() for t in tensors]
        said = [as_attribute(labels[i]) for i in layout] if labels else []
        if nranks == 1 and not pipelined:
            # The average over one rank is the gradient itself: no op, no cost.
            outs = tensors
        elif pipelined or tf.executing_eagerly() or None in counts:
            with tf.control_dependencies(_chain(team_id)):
                if pipelined:
                    try:
                        outs = ops.ml_comm_pipelined_allreduce_n(
                            tensors,
                            tf.cast(step_number, tf.int64),
                            team_id=team_id,
                            ksteps=ksteps,
                            max_steps=max_steps,
                            average=average,
                            part=part,
                            **parts,
                            **step,
                        )
                    except tf.errors.OpError as exc:  # eager only; raised after the last
                        if isinstance(step_number, int) and step_number == 0:
                            raise  # steps not counted: the call ends, its pipelines restart
                        failure = failure or exc
                        continue
                else:
                    outs = ops.ml_comm_allreduce_n(
                        tensors,
                        _labels_input(said),
                        team_id=team_id,
                        average=average,
                        part=part,
                        **parts,
                        **step,
                    )
            if not tf.executing_eagerly():
                _last_anchor[tf.compat.v1.get_default_graph()][team_id] = outs[0].op
        else:
            key = next(_group_keys)
            group = {
                "group_key": key,
                "counts": counts,
                "shapes": [attr_digest(t) for t in tensors],
                "labels": said,
                "average": average,
                "nranks": nranks,
            }
            # The group opens at the step's start (the op needs no input), so that a step
            # failing before its first gradient exists still has a group to cancel. The
            # submits do not wait for it: an executor may run it after all of backprop
            # (one inter-op thread runs ops depth first), and the core pairs the opener
            # with its step's submits in either order.
            with tf.control_dependencies(_chain(team_id)):
                opener = ops.ml_comm_group_open(
                    T=tensors[0].dtype, team_id=team_id, part=part, **group, **parts, **step
                )
                submits = [
                    ops.ml_comm_group_submit(
                        t, team_id=team_id, index=pos, part=part, **group, **parts, **step
                    )
                    for pos, t in enumerate(tensors)
                ]
            # The waits are async (they block no thread) and keep program order;
            # the submits do not (unordered.py): each runs once its gradient exists.
            graph = tf.compat.v1.get_default_graph()
            # A tf.compat.v1 Session runs only what a fetch needs, and may fetch part of
            # the outputs: there each wait needs every submit of its group (else the
            # group waits forever for the submits of outputs not fetched), and the next
            # group waits for this one to end (else a fetch of the next one would open
            # this one again without its submits). Within tf.function every op runs.
            whole = not graph.building_function
            with tf.control_dependencies([token for _, token in submits] if whole else []):
                outs = [ops.ml_comm_group_wait(buffer, token) for buffer, token in submits]
            # What makes the request orders the next group: the opener, or for one small
            # tensor, which its submit reduces then and there (ReducedBySubmit), the submit.
            first = opener if len(tensors) > 1 else submits[0][0]
            anchor = [o.op for o in outs] if whole else first.op
            _last_anchor[graph][team_id] = anchor
        for i, out in zip(layout, outs):
            result[i] = out
    if failure is not None:
        raise failure
    return result


_no_labels: list = []  # the eager empty labels input, made once


def _labels_input(labels: list[int]):
    """The fused op's labels input. An eager call without labels reuses one empty tensor:
    making it takes about 20 us, on every eager call of gradients."""
    if labels or not tf.executing_eagerly():
        return tf.constant(labels, tf.int64, shape=[len(labels)])
    if not _no_labels:
        _no_labels.append(tf.constant([], tf.int64, shape=[0]))
    return _no_labels[0]


def _empty_call(ops, team_id: int) -> None:
    """A call of gradients with none to average (an empty list, or only None) is still a
    call every rank makes: one whose list held gradients elsewhere fails on every rank
    instead of pairing its gradients with this rank's next call. nparts=0 tells the op
    that its one placeholder input is no gradient."""
    with tf.control_dependencies(_chain(team_id)):
        no_tensor, no_labels = tf.zeros([0]), _labels_input([])
        outs = ops.ml_comm_allreduce_n([no_tensor], no_labels, team_id=team_id, nparts=0)
    if not tf.executing_eagerly():
        _last_anchor[tf.compat.v1.get_default_graph()][team_id] = outs[0].op


@raising_typed
def broadcast(values, team_id: int, root: int):
    """The ops behind `ml_comm.broadcast` with framework="tensorflow": new tensors holding
    root's values (a list for a list, a tensor for a tensor). Variables among `values`
    (tf.Variable, Keras variables) are also assigned root's values: a script that drops
    the result must not train from each rank's own initial weights. In a graph, running
    a returned tensor runs its variable's assignment."""
    ops = load_ops()
    single = not isinstance(values, (list, tuple))
    items = [values] if single else list(values)
    with checking(team_id, lib.MLC_KIND_BROADCAST):
        dense = {i: tensor_of(v, f"broadcast values[{i}]", i) for i, v in enumerate(items)}
        groups = by_dtype(dense, reduces=False)
    result: list = [None] * len(items)
    # In a v1 graph a broadcast runs on its own (once, before training: a SessionRunHook
    # runs it once the session exists, in the Cray listings), so it is not chained to the
    # gradient groups, or running them would run the broadcast too. Its
    # dtype groups are chained among themselves to keep one order on all ranks.
    previous: list = []
    for idx in groups.values():
        with tf.control_dependencies(previous):
            outs = ops.ml_comm_broadcast_n([dense[i] for i in idx], team_id=team_id, root=root)
        previous = [] if tf.executing_eagerly() else [outs[0].op]
        for i, out in zip(idx, outs):
            result[i] = out
    graph = tf.compat.v1.get_default_graph()
    if previous and graph.building_function:
        # Inside tf.function both run on every call, so the gradient groups that follow
        # may wait for the broadcast: their submits are not ordered by TensorFlow
        # (unordered.py), and a rank that opened a group before the broadcast would
        # meet the others' broadcast with it.
        _last_anchor.setdefault(graph, {})[team_id] = previous[0]
    for i, item in enumerate(items):
        if _is_variable(item):
            assigned = item.assign(result[i])
            if not tf.executing_eagerly():
                with tf.control_dependencies([assigned]):
                    result[i] = tf.identity(result[i])
    return result[0] if single else result


def _is_variable(value) -> bool:
    """A tf.Variable or a Keras variable: something `assign` writes, unlike a tensor."""
    return not isinstance(value, tf.Tensor) and callable(getattr(value, "assign", None))


def check_version() -> None:
    """Raise MLCommError if the installed TensorFlow is older than 2.16."""
    major, minor = (int(x) for x in tf.__version__.split(".")[:2])
    if (major, minor) < (2, 16):
        raise MLCommError(f"ml_comm needs TensorFlow >= 2.16, found {tf.__version__}")


from .collectives import allgather, allreduce, alltoall, reducescatter  # noqa: E402

__all__ = [
    "allgather",
    "allreduce",
    "alltoall",
    "broadcast",
    "check_version",
    "gradients",
    "load_ops",
    "reducescatter",
    "reset_pipelines",
    "set_live",
]
