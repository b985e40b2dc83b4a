"""The Keras hook on Keras' TensorFlow backend: gradients through ml_comm's TensorFlow
ops (init's framework="tensorflow"), eagerly or inside the traced train step, sparse
gradients (tf.IndexedSlices) gathered still sparse, tf.data datasets cut to the fewest
batches. XLA cannot compile ml_comm's ops: a model's jit_compile is turned off."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from .... import api as mc
from ....core.session import is_pipelined
from ....tensorflow import library
from ....tensorflow.errors import typed
from .. import accumulation
from . import sparse

FRAMEWORK = "tensorflow"
KEEPS_JIT = False
BROADCAST_IN_TRACE = True


def install(patches, overlap_backprop: bool) -> None:
    """Nothing of Keras's trainer to replace: the hooked apply averages."""


def forget() -> None:
    """Nothing installed."""


def count_step(team: int) -> None:
    """A training step on `team` begins. A pipelined team's op carries the count, so that
    a rank whose step failed before the op ran is found behind at its next step, and the
    ranks realign (pipelined.md), instead of that rank's next step pairing with the
    others' current one. A synchronous team needs none (its failed steps are cancelled)."""
    config = mc.session().configs[team]
    if is_pipelined(config.ksteps, config.max_steps):
        library.count_step(team)


def average(grads: list, team: int) -> list:
    if not any(sparse.is_sparse(g) for g in grads):
        return mc.gradients(grads, team)
    nranks = mc.get_nranks()
    if nranks == 1:
        return grads  # sparse ones as they are; dense ones are their own average
    # The dense gradients in one reduction, then each sparse one gathered (sparse.py).
    dense = [i for i, g in enumerate(grads) if g is not None and not sparse.is_sparse(g)]
    out = list(grads)
    if dense:
        for i, g in zip(dense, mc.gradients([grads[i] for i in dense], team)):
            out[i] = g
    return [sparse.gathered(g, team, nranks) if sparse.is_sparse(g) else g for g in out]


def accumulate_then_average(optimizer, team, steps: int, grads: list, variables) -> list:
    """Keras's accumulation (apply.py says how) with TensorFlow's control dependencies:
    the accumulators are zeroed after the reduction read them."""
    present, local, accumulators = accumulation.inputs(optimizer, grads, variables)

    def update():
        totals = [g + tf.convert_to_tensor(a) for g, a in zip(local, accumulators)]
        averaged = mc.gradients(totals, team)
        with tf.control_dependencies(averaged):
            resets = [a.assign(tf.zeros(a.shape, a.dtype)) for a in accumulators]
        with tf.control_dependencies(resets):
            return [tf.identity(a) for a in averaged]

    def accumulate():
        return [tf.identity(g) for g in local]

    iterations = tf.convert_to_tensor(optimizer._iterations)
    is_update = tf.equal((iterations + 1) % steps, 0)
    out = tf.cond(is_update, update, accumulate)
    if not isinstance(out, (list, tuple)):
        out = [out]
    result = list(grads)
    for i, g in zip(present, out):
        result[i] = g
    return result


def is_eager(grads) -> bool:
    return tf.executing_eagerly()


def to_numpy(value) -> np.ndarray:
    return np.asarray(tf.convert_to_tensor(value).numpy())


def broadcast_values(values: list, root: int, team: int) -> list:
    return mc.broadcast([tf.convert_to_tensor(v) for v in values], root, team)


def sync_before_first_update(optimizer, state, grads, variables, broadcast_eagerly):
    """Tracing a step: broadcast now when the variables hold values, else inside the
    graph on the step's first run, with the averaging waiting for it. Whether this
    session broadcast these variables decides, not the optimizer's iterations: an
    optimizer may have trained before init, or each rank may have restored a different
    checkpoint."""
    with tf.init_scope():
        if state.broadcast_in_graph is not None and bool(to_numpy(state.broadcast_in_graph)):
            state.pending_broadcast = False  # an earlier traced step synchronised them
            return grads
        # If the weights already hold values (the model was built eagerly), broadcast
        # them now, before the step ever runs; every rank traces alike.
        if _have_values(variables):
            broadcast_eagerly(variables, 0, state.team)
            state.pending_broadcast = False
            return grads
        if state.broadcast_in_graph is None:
            state.broadcast_in_graph = tf.Variable(False, trainable=False)
    # The variables were created in this trace: broadcast inside the graph, on the
    # step's first run only, and let the averaging wait for it.
    flag = state.broadcast_in_graph

    def broadcast_once():
        with tf.control_dependencies([_broadcast_in_graph(variables, state.team)]):
            return flag.assign(True, read_value=True)

    done = tf.cond(flag.read_value(), lambda: tf.constant(False), broadcast_once)
    with tf.control_dependencies([done]):
        return [None if g is None else tf.identity(tf.convert_to_tensor(g)) for g in grads]


def _have_values(variables) -> bool:
    try:
        return all(to_numpy(v).shape == tuple(v.shape) for v in variables)
    except Exception:  # noqa: BLE001 - not readable yet: created in the current trace
        return False


def _broadcast_in_graph(variables, team: int):
    if variables:
        values = mc.broadcast([tf.convert_to_tensor(v) for v in variables], 0, team)
        for v, value in zip(variables, values):
            v.assign(value)  # stateful: runs in the branch, in program order
    return tf.constant(True)


def batches_of(x) -> int | None:
    if isinstance(x, tf.data.Dataset):
        cardinality = int(x.cardinality())
        return cardinality if cardinality >= 0 else -1
    return None


def first_batches(x, count: int):
    return x.take(count)


def failed_step_error(exc: BaseException) -> BaseException | None:
    """The ops' error of a failed step as ml_comm's class of its status too (still
    TensorFlow's class), else None."""
    converted = typed(exc)
    return None if converted is exc else converted
