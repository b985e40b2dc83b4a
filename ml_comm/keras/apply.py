"""The optimizer side of the Keras hook: after `ml_comm.keras.init` every Keras optimizer
update averages its gradients over the ranks first.

Every path that changes weights in Keras 3 ends in `Optimizer.apply(grads, variables)`:
the trainer's `train_step` (fit, train_on_batch) calls `apply_gradients`, which calls
`apply`, and custom loops call one of the two. `install()` wraps the public `apply` of
`keras.optimizers.Optimizer` (which every built-in optimizer inherits) and of
`keras.optimizers.LossScaleOptimizer` (which overrides it), so models compiled before or
after init, custom training steps and standalone optimizers are all caught; the hook's
finalize puts the originals back (core/patches.py). Only the outermost `apply` of a call
reduces: a
LossScaleOptimizer averages the still-scaled gradients, so an overflow on one rank
becomes inf on every rank and all of them skip the step and lower the scale together;
the inner optimizer's `apply` then passes the averaged gradients through untouched.

Gradient accumulation (`gradient_accumulation_steps=k`): the micro-steps' gradients are
summed in Keras's own accumulators, on each rank, and averaged over the ranks once, on
the micro-step where Keras applies them (`_accumulate_then_average`). The phase and the
partial sums are Keras's optimizer variables, so they are checkpointed with it and a
resumed run continues the cycle exactly. One reduction per applied update instead of one
per micro-step.

What differs per Keras backend (the reduction, tracing, the first update's broadcast
inside a traced step) is in backend/<name>/; this file imports no framework.
"""

from __future__ import annotations

import functools
import threading
import weakref
from dataclasses import dataclass

import keras

from .. import api as mc
from ..core import dtypes as _dtypes
from ..core.patches import Patches
from ..core.session import is_pipelined
from .backend import current

SUPPORTED_DTYPES = frozenset(_dtypes.NAMES.values())  # the core's dtypes, by name


@dataclass
class OptimizerState:
    team: int | None = 0  # None: the user opted this optimizer out (trains alone)
    model: weakref.ref | None = None  # the model whose weights the first update syncs
    pending_broadcast: bool = True
    broadcast_in_graph: object = None  # TensorFlow: set by a traced step's first run


_states: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_nesting = threading.local()  # > 0 inside a hooked apply of this thread
# The variables this session gave one root's values (keyed by id: a Keras variable's
# `==` is elementwise); an entry goes with its variable.
_broadcast: weakref.WeakValueDictionary = weakref.WeakValueDictionary()


def state_of(optimizer) -> OptimizerState:
    """The optimizer's registration; a new one (team 0) for an optimizer seen first."""
    state = _states.get(optimizer)
    if state is None:
        state = _states[optimizer] = OptimizerState()
    return state


def known(optimizer) -> OptimizerState | None:
    return _states.get(optimizer)


def install(patches: Patches) -> None:
    """Wrap the optimizers' apply (patches: the hook's, which keras/__init__ restores)."""
    for cls in (keras.optimizers.Optimizer, keras.optimizers.LossScaleOptimizer):
        # the inherited one for Optimizer (defined on its base)
        patches.replace(cls, "apply", _hooked(cls.apply))
    # Keras's compiled JAX step calls stateless_apply, which a LossScaleOptimizer
    # overrides: it checks this rank's gradients and only then calls its inner
    # optimizer. Averaged before that check, as in its apply.
    lso = keras.optimizers.LossScaleOptimizer
    patches.replace(lso, "stateless_apply", _hooked_stateless(lso.stateless_apply))


def forget() -> None:
    """finalize: the optimizers' registrations go (with the session)."""
    _states.clear()
    _broadcast.clear()


def _hooked(original):
    @functools.wraps(original)
    def apply(self, grads, trainable_variables=None):
        return _averaged_first(self, grads, trainable_variables, functools.partial(original, self))

    return apply


def _hooked_stateless(original):
    @functools.wraps(original)
    def stateless_apply(self, optimizer_variables, grads, trainable_variables):
        then = functools.partial(original, self, optimizer_variables)
        return _averaged_first(self, grads, trainable_variables, then)

    return stateless_apply


def _averaged_first(optimizer, grads, trainable_variables, then):
    """then(grads, trainable_variables) with the gradients averaged over the ranks first,
    where this is the outermost hooked call of the thread."""
    if getattr(_nesting, "depth", 0) > 0:
        return then(grads, trainable_variables)
    state = state_of(optimizer)
    _nesting.depth = 1  # a LossScaleOptimizer's inner apply is part of this call
    try:
        if state.team is None:  # opted out: neither this apply nor the inner one
            return then(grads, trainable_variables)
        grads = list(grads)
        if trainable_variables is not None:
            trainable_variables = list(trainable_variables)
        if state.pending_broadcast:
            grads = _sync_before_first_update(optimizer, state, grads, trainable_variables)
        grads = _average(optimizer, state, grads, trainable_variables)
        return then(grads, trainable_variables)
    finally:
        _nesting.depth = 0


# ---------------------------------------------------------------- averaging


def _average(optimizer, state: OptimizerState, grads: list, variables: list | None) -> list:
    steps = getattr(optimizer, "gradient_accumulation_steps", None) or 0
    # Keras's accumulators are dense: so are the gradients it sums. A list of only None is
    # still a call (of no tensors) that every rank makes.
    if steps >= 2 and any(g is not None for g in grads):
        return _accumulate_then_average(optimizer, state.team, int(steps), grads, variables)
    return current().average(grads, state.team)


def _accumulate_then_average(optimizer, team, steps: int, grads: list, variables) -> list:
    """Accumulation in Keras's own, checkpointed state, so that a restored optimizer (a
    BackupAndRestore resume) continues the cycle exactly where it stopped.

    Keras (`BaseOptimizer._backend_apply_gradients`) adds each micro-step's gradient to
    `_accumulated_gradients` and, on the micro-step where `(_iterations + 1) % steps == 0`,
    applies `(grad + accumulated) / steps` and zeroes the accumulators. Both are
    optimizer variables, saved and restored with it. On the accumulating micro-steps this
    rank's own gradients go to Keras as they are; on the update micro-step the rank's
    total (gradient + Keras's accumulator) is averaged over the ranks (one reduction per
    applied update), Keras's accumulators are zeroed first, and the average is handed on:
    Keras then applies `average / steps`, what one process over the global batch applies.
    Each backend's `accumulate_then_average` does this in its own terms.
    Private names read (checked against the installed Keras by tests/unit/test_keras_private.py):
    `_iterations`, `_accumulated_gradients`, `_get_variable_index`.
    """
    return current().accumulate_then_average(optimizer, team, steps, grads, variables)


def overlap_team(model) -> int | None:
    """The team whose average a training step of `model` may hand over during backprop
    (backend/<name>/overlap.py): its hooked optimizer's, where `apply` would average the
    same list once: a synchronous team, the first update's broadcast done, no gradient
    accumulation, more than one rank. None: `apply` averages after backprop."""
    optimizer = getattr(model, "optimizer", None)
    state = known(optimizer) if optimizer is not None else None
    if state is None or state.team is None or state.pending_broadcast or mc.get_nranks() == 1:
        return None
    if (getattr(optimizer, "gradient_accumulation_steps", None) or 0) >= 2:
        return None
    config = mc.session().configs[state.team]
    return None if is_pipelined(config.ksteps, config.max_steps) else state.team


# ---------------------------------------------------------------- first-update broadcast


def _owner(state: OptimizerState):
    return state.model() if state.model is not None else None


def model_variables(model, optimizer=None) -> list:
    variables = list(model.weights)
    optimizer = optimizer if optimizer is not None else getattr(model, "optimizer", None)
    if optimizer is not None and optimizer.built:
        variables += shared_optimizer_variables(optimizer)
    return variables


def shared_optimizer_variables(optimizer) -> list:
    """The optimizer's variables that are one state on every rank: all but the gradient
    accumulators, which hold each rank's own partial sum until the update step."""
    own = {id(a) for a in getattr(optimizer, "_accumulated_gradients", None) or []}
    return [v for v in optimizer.variables if id(v) not in own]


def _sync_before_first_update(optimizer, state, grads, trainable_variables):
    """Broadcast the weights before the optimizer's first update (lazily built models,
    standalone optimizers). Returns the gradients (on TensorFlow, made to wait for an
    in-graph broadcast)."""
    model = _owner(state)
    if model is not None:
        variables = model_variables(model, optimizer)
    else:
        variables = list(trainable_variables or [])
        if optimizer.built:
            variables += shared_optimizer_variables(optimizer)
    backend = current()
    if backend.is_eager(grads):
        broadcast_eagerly(variables, 0, state.team)
        state.pending_broadcast = False
        return grads
    if _weights_broadcast(optimizer, model):
        state.pending_broadcast = False  # a compiled step of the user's, after broadcast_weights
        return grads
    return backend.sync_before_first_update(
        optimizer, state, grads, _supported(variables), broadcast_eagerly
    )


def _weights_broadcast(optimizer, model) -> bool:
    """Whether every weight the optimizer updates, and its own state where it is built,
    got one root's values in this session (`broadcast_weights` before a compiled step of
    the user's). The weights: the model's trainable ones, else those a standalone
    optimizer was built for (Keras's private `_trainable_variables`, which
    tests/unit/test_keras_private.py checks)."""
    if model is not None:
        weights = list(model.trainable_weights)
    else:
        weights = list(getattr(optimizer, "_trainable_variables", None) or [])
    if not weights:
        return False
    if optimizer.built:  # trained before init, or restored on rank 0 alone: its own state
        weights += _supported(shared_optimizer_variables(optimizer))
    return all(_broadcast.get(id(w)) is w for w in weights)


def _supported(variables):
    return [v for v in variables if keras.backend.standardize_dtype(v.dtype) in SUPPORTED_DTYPES]


def broadcast_eagerly(variables, root: int, team: int = 0) -> None:
    """On the model's team: a broadcast on another team could meet that team's calls
    in a different order on each rank (two models trained by two threads)."""
    variables = _supported(variables)
    if not variables:
        return
    for v, value in zip(variables, current().broadcast_values(variables, root, team)):
        v.assign(value)
        _broadcast[id(v)] = v


def steps_note() -> str:
    """How many updates this rank's registered optimizers made, for error messages."""
    parts = []
    for optimizer, state in list(_states.items()):
        if state.team is None or not getattr(optimizer, "built", False):
            continue
        try:
            steps = int(current().to_numpy(optimizer.iterations))
        except Exception:  # noqa: BLE001  (its last step failed: JAX keeps the error in it)
            continue
        parts.append(f"{steps} training steps ({optimizer.name} updates) on team {state.team}")
    if not parts:
        return ""
    return (
        f"Rank {mc.get_rank()} ran {', '.join(parts)}; a rank still waiting for it made a "
        "call this rank did not: a later training step (the ranks ran different numbers of "
        "steps: ml_comm.data.equal_steps gives every rank the same number of batches), or "
        "an evaluate, predict or other collective call on some ranks only (every rank "
        "makes it)."
    )


def share_accumulators(optimizer, team: int) -> None:
    """Replace every rank's gradient accumulators by their average over the ranks
    (collective; eager). The next update averages `gradient + accumulator` over the
    ranks, which the average of the accumulators leaves as it was; afterwards they are
    one state on every rank, so that a checkpoint written by rank 0 holds what each
    rank needs to resume the cycle."""
    accumulators = [
        a for a in getattr(optimizer, "_accumulated_gradients", None) or [] if a is not None
    ]
    if not accumulators or mc.get_nranks() == 1:
        return
    steps = getattr(optimizer, "gradient_accumulation_steps", None) or 0
    if steps >= 2 and int(keras.ops.convert_to_numpy(optimizer._iterations)) % steps == 0:
        return  # a cycle's start: zeros on every rank (every rank counts the same steps)
    averaged = current().average([keras.ops.convert_to_tensor(a) for a in accumulators], team)
    for a, value in zip(accumulators, averaged):
        a.assign(value)


def broadcast_model_weights(model, root: int = 0) -> None:
    """Root's weights and built optimizer variables on every rank (collective; eager)."""
    optimizer = getattr(model, "optimizer", None)
    team = 0
    if optimizer is not None:
        state = known(optimizer)
        if state is not None:
            state.pending_broadcast = False
            team = 0 if state.team is None else state.team  # the model's team (set_team)
    broadcast_eagerly(model_variables(model), root, team)
