"""Keras 3 hook: data-parallel `fit`, `train_on_batch` and custom loops through ml_comm.

    import ml_comm.keras as mk

    mk.init()                                   # before training (threads, teams, msglen)
    model.compile(optimizer="sgd", loss=...)
    mk.set_team(model)                          # right after compile (team 0 by default)
    model.fit(x_shard, y_shard, ...)            # unchanged
    mk.finalize()

Between `set_team` and `finalize` every update that the model's optimizer makes first
averages its gradients over all ranks with `ml_comm.gradients` on the model's team; the
weights are broadcast from rank 0 before the first update; `fit` shows metrics averaged
over the ranks, and only rank 0 prints progress. A GAN puts each model on its own team
(`init(nteams=2)`, `set_team(generator_model, 0)`, `set_team(discriminator, 1)`).

How it hooks in, and why it survives Keras upgrades
---------------------------------------------------
Keras 3 has no public "gradient transform" hook (tf.keras 2's `gradient_transformers` are
gone) and no global callback registry. Every path that updates weights, though, ends in the
optimizer's public methods: the TensorFlow trainer's `train_step` (used by `fit` and
`train_on_batch`) calls `optimizer.apply_gradients(zip(grads, vars))`, which calls
`optimizer.apply(grads, vars)`, and custom loops call one of the two. Overriding public
methods in a subclass is how Keras documents custom optimizers, so `set_team` turns the
compiled optimizer into an instance of a subclass of its own class (made once per class)
that overrides only `apply` and `apply_gradients`: they average the gradients with
`ml_comm.gradients` and hand them to the original `apply`. Nothing private is called or
replaced; the subclass keeps the name and module of the class it extends, so saved models
and `get_config` record the plain optimizer and reload without ml_comm. The instance's
state (variables, learning rate, `iterations`) and every reference the user holds stay
valid. Alternatives that were rejected: a wrapping optimizer (like `LossScaleOptimizer`)
has to forward the whole optimizer interface and changes the checkpoint layout; a
`tf.distribute` strategy or patching `train_step`/`_backend_apply_gradients` relies on
private APIs; patching `keras.Model.compile` globally would register models the user
never meant to train on every rank.

`set_team` also sets instance attributes on the model that wrap its own bound `fit`,
`evaluate`, `predict` and `train_on_batch`, using only their public signatures: on ranks
other than 0 they pass `verbose=0`; `fit` gets a `MetricAverage` callback in front of the
user's, so the progress bar, `History` and callbacks such as `ModelCheckpoint` or
`EarlyStopping` see the averages over all ranks (`evaluate` and `predict` return this
rank's results: average them with `ml_comm.average` when the ranks hold different data);
after a new `compile` they make the new optimizer distributed too. `set_team` also sets
`model.jit_compile = False` (public setter; XLA cannot compile ml_comm's ops) and makes
Keras trace the train step anew (`make_train_function(force=True)`). `finalize` undoes
all of it.

Weights are broadcast from rank 0 (model weights and, when built, the optimizer's
variables) by `set_team` when the model is built (it has an `Input`, or has been called or
built), so even the first step's gradients are computed from identical weights. A model
that Keras builds lazily (a `Sequential` without `Input`) is synchronised at its first
update: eagerly before `fit` or in the first traced step when its weights already exist,
otherwise inside the first step's graph just before the averaged gradients are applied
(the weights are identical from then on, but the first step's gradients came from each
rank's own initial weights; build the model before `set_team` for an exact first step).

msglen: omitted, each team's fusion buffer holds `DEFAULT_MSGLEN` (4 Mi) float32 elements
(16 MiB per team). Larger gradient sets stream through it in windows; pass the largest
model's `count_params()` to fuse a big model's gradients in one window.

Rules, as for every ml_comm collective: every rank runs the same models for the same
number of steps (equal shards, or `steps_per_epoch`), with the same batch shapes (a partial
last batch retraces `train_step` on every rank alike); metrics are averaged as equal-weight
means over ranks, exact for equal per-rank batch sizes. Custom `tf.function` loops must be
traced after `set_team`.
"""

from __future__ import annotations

import functools
import inspect
import numbers
import weakref
from dataclasses import dataclass

import keras
import numpy as np
import tensorflow as tf

from . import api as mc
from . import keras_fault
from .errors import MLCommError

DEFAULT_MSGLEN = 1 << 22

_SUPPORTED_DTYPES = frozenset({tf.float32, tf.float64, tf.float16, tf.bfloat16, tf.int32, tf.int64})
_VERBOSE_METHODS = ("fit", "evaluate", "predict")
_WRAPPED_METHODS = (*_VERBOSE_METHODS, "train_on_batch")


@dataclass
class _OptimizerState:
    original_class: type
    team: int
    model: weakref.ref | None  # the model whose weights the first update synchronises
    pending_broadcast: bool


@dataclass
class _ModelState:
    team: int


# Registrations, keyed by the objects themselves (weakly: a model that is dropped is
# forgotten). Python-side state only: the C core and the ops hold none of it.
_optimizers: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_models: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_distributed_classes: dict[type, type] = {}
_owns_session = False


# ---------------------------------------------------------------- life cycle


def init(
    nthread_per_team: int = 2,
    nteams: int = 1,
    msglen: int | None = None,
    *,
    chunk_bytes: int | None = None,
) -> None:
    """Start ml_comm for Keras: `nteams` teams of `nthread_per_team` threads (collective).

    msglen: element count that sizes each team's fusion buffer; None takes DEFAULT_MSGLEN.
    Call it before building the models' training functions, on every rank.
    """
    global _owns_session
    if keras.backend.backend() != "tensorflow":
        raise MLCommError(
            f"ml_comm.keras needs Keras' TensorFlow backend, but KERAS_BACKEND is "
            f"{keras.backend.backend()!r}; set KERAS_BACKEND=tensorflow"
        )
    if int(keras.__version__.split(".")[0]) < 3:
        raise MLCommError(f"ml_comm.keras needs Keras 3, found {keras.__version__}")
    mc.init(
        nthread_per_team,
        nteams,
        DEFAULT_MSGLEN if msglen is None else msglen,
        "tensorflow",
        chunk_bytes=chunk_bytes,
    )
    _owns_session = True


def finalize() -> None:
    """Undo every set_team (models train serially again, their training functions are
    traced anew) and stop ml_comm's teams. Safe to call twice."""
    global _owns_session
    for model in list(_models.keys()):
        _unhook_model(model)
    for optimizer in list(_optimizers.keys()):
        optimizer.__class__ = _optimizers.pop(optimizer).original_class
    _models.clear()
    if _owns_session:
        _owns_session = False
        mc.finalize()


def set_team(model: keras.Model, team: int = 0) -> keras.Model:
    """Train `model` data-parallel on ml_comm team `team`; call it right after `compile`,
    on every rank (a collective when the model is built: it broadcasts the weights).

    Calling it again moves the model to another team. Returns the model.
    """
    if not isinstance(model, keras.Model):
        raise TypeError(f"set_team takes a keras.Model, got {type(model).__name__}")
    if getattr(model, "optimizer", None) is None:
        raise MLCommError(
            "set_team: the model has no optimizer; call model.compile(optimizer=...) "
            "first, then ml_comm.keras.set_team(model, team)"
        )
    _check_team(team)
    team = int(team)
    _models[model] = _ModelState(team)
    _attach(model, team)
    for name in _WRAPPED_METHODS:
        if name not in vars(model):  # not wrapped yet (set_team again only changes team)
            setattr(model, name, _wrap_method(model, name, getattr(model, name)))
    if model.built:
        _sync_now(_optimizers[model.optimizer])
    return model


def distributed_optimizer(optimizer, team: int = 0, model: keras.Model | None = None):
    """Make `optimizer` (a keras.optimizers.Optimizer) average its gradients over all
    ranks on `team` in `apply` / `apply_gradients`; returns the same object.

    For custom loops whose optimizer is not a compiled model's (set_team does this for
    `model.optimizer`). With `model`, its weights are broadcast at the first update unless
    broadcast_weights(model) ran before; without, the variables of the first update are.
    """
    if not isinstance(optimizer, keras.optimizers.Optimizer):
        raise TypeError(
            f"distributed_optimizer takes a keras.optimizers.Optimizer, "
            f"got {type(optimizer).__name__}"
        )
    _check_team(team)
    state = _optimizers.get(optimizer)
    if state is None:
        cls = type(optimizer)
        state = _OptimizerState(cls, int(team), None, True)
        optimizer.__class__ = _distributed_class(cls)
        _optimizers[optimizer] = state
    state.team = int(team)
    if model is not None:
        state.model = weakref.ref(model)
    return optimizer


def broadcast_weights(model, root: int = 0) -> None:
    """Overwrite the model's weights (and its optimizer's variables, if built) with
    root's. Collective; eager. Also takes a list of variables."""
    if isinstance(model, keras.Model):
        variables = list(model.weights)
        optimizer = getattr(model, "optimizer", None)
        if optimizer is not None and optimizer.built:
            variables += list(optimizer.variables)
        state = _optimizers.get(optimizer) if optimizer is not None else None
        if state is not None:
            state.pending_broadcast = False
    else:
        variables = list(model)
    _broadcast_eagerly(variables, root)


def _check_team(team) -> None:
    """Raises before init(), without framework="tensorflow", or for a bad team id."""
    if mc._active().tf is None:
        raise MLCommError(
            "ml_comm was initialised without framework='tensorflow'; start it with "
            "ml_comm.keras.init(...) (or ml_comm.init(..., framework='tensorflow'))"
        )
    mc.team_settings(team)


# ---------------------------------------------------------------- the optimizer


class _DistributedOptimizer:
    """Mixed in before an optimizer class: average the gradients, then apply them."""

    def apply(self, grads, trainable_variables=None):
        state = _optimizers.get(self)
        if state is None:  # unregistered (finalize restores the class; belt and braces)
            return super().apply(grads, trainable_variables)
        grads = list(grads)
        if trainable_variables is not None:
            trainable_variables = list(trainable_variables)
        if state.pending_broadcast:
            grads = _sync_before_first_update(self, state, grads, trainable_variables)
        if any(g is not None for g in grads):
            grads = mc.gradients(grads, state.team)
        return super().apply(grads, trainable_variables)

    def apply_gradients(self, grads_and_vars):
        grads, variables = zip(*grads_and_vars)
        self.apply(list(grads), list(variables))
        return self.iterations


def _distributed_class(cls: type) -> type:
    sub = _distributed_classes.get(cls)
    if sub is None:
        # Same name and module as `cls`: serialisation records the plain optimizer.
        namespace = {"__module__": cls.__module__, "__qualname__": cls.__qualname__}
        sub = type(cls.__name__, (_DistributedOptimizer, cls), namespace)
        sub.__doc__ = cls.__doc__
        _distributed_classes[cls] = sub
    return sub


def _attach(model: keras.Model, team: int) -> None:
    """Make the model's current optimizer distributed on `team`; retrace its steps."""
    optimizer = model.optimizer
    known = _optimizers.get(optimizer)
    if known is not None and known.team == team and _owner(known) is model:
        return
    distributed_optimizer(optimizer, team, model)
    # Keras compiles the train step once; a step traced before (or for another team)
    # would go on calling the plain optimizer's methods or the old team's ops.
    model.jit_compile = False  # ml_comm's ops have no XLA kernels
    model.make_train_function(force=True)


def _owner(state: _OptimizerState):
    return state.model() if state.model is not None else None


def _sync_variables(optimizer, state: _OptimizerState, trainable_variables):
    model = _owner(state)
    if model is not None:
        variables = list(model.weights)
        if optimizer.built:
            variables += list(optimizer.variables)
        return variables
    return list(trainable_variables or [])


def _sync_now(state: _OptimizerState) -> None:
    model = _owner(state)
    if model is not None:
        broadcast_weights(model)


def _sync_before_first_update(optimizer, state, grads, trainable_variables):
    """Broadcast the weights before the optimizer's first update (lazily built models,
    standalone optimizers). Returns the gradients, made to wait for an in-graph broadcast."""
    variables = _sync_variables(optimizer, state, trainable_variables)
    if tf.executing_eagerly():
        _broadcast_eagerly(variables, 0)
        state.pending_broadcast = False
        return grads
    # Tracing a step. If the weights already hold values (the model was built eagerly),
    # broadcast them now, before the step ever runs; every rank traces alike.
    with tf.init_scope():
        if int(_numpy(optimizer.iterations)) > 0:
            state.pending_broadcast = False  # an earlier traced step synchronised them
            return grads
        if _have_values(variables):
            _broadcast_eagerly(variables, 0)
            state.pending_broadcast = False
            return grads
    # The variables were created in this trace: broadcast inside the graph, on the first
    # update only, and let the averaging wait for it.
    first = tf.equal(tf.convert_to_tensor(optimizer.iterations), 0)
    done = tf.cond(first, lambda: _broadcast_in_graph(variables), lambda: tf.constant(False))
    with tf.control_dependencies([done]):
        return [None if g is None else tf.identity(tf.convert_to_tensor(g)) for g in grads]


def _supported(variables):
    return [v for v in variables if tf.as_dtype(v.dtype) in _SUPPORTED_DTYPES]


def _numpy(value) -> np.ndarray:
    return np.asarray(tf.convert_to_tensor(value).numpy())


def _have_values(variables) -> bool:
    try:
        return all(_numpy(v).shape == tuple(v.shape) for v in variables)
    except Exception:  # noqa: BLE001 - not readable yet: created in the current trace
        return False


def _broadcast_eagerly(variables, root: int) -> None:
    variables = _supported(variables)
    if not variables:
        return
    values = mc.broadcast([tf.convert_to_tensor(v) for v in variables], root)
    for v, value in zip(variables, values):
        v.assign(value)


def _broadcast_in_graph(variables):
    variables = _supported(variables)
    if variables:
        values = mc.broadcast([tf.convert_to_tensor(v) for v in variables], 0)
        for v, value in zip(variables, values):
            v.assign(value)  # stateful: runs in the branch, in program order
    return tf.constant(True)


# ---------------------------------------------------------------- fit, evaluate, predict


def _wrap_method(model: keras.Model, name: str, method):
    try:
        signature = inspect.signature(method)
    except (TypeError, ValueError):
        signature = None
    model_ref = weakref.ref(model)

    @functools.wraps(method)
    def wrapper(*args, **kwargs):
        m = model_ref()
        if m is not None and m in _models and getattr(m, "optimizer", None) is not None:
            # compile() again gives the model a new optimizer: make it distributed too.
            if m.optimizer not in _optimizers or _owner(_optimizers[m.optimizer]) is not m:
                _attach(m, _models[m].team)
                _sync_now(_optimizers[m.optimizer])
        if signature is None or name == "train_on_batch":
            return method(*args, **kwargs)
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError:
            return method(*args, **kwargs)  # let Keras report the bad call
        if mc.get_rank() != 0 and "verbose" in signature.parameters:
            bound.arguments["verbose"] = 0
        if name == "fit" and m is not None:
            state = _optimizers.get(m.optimizer)
            if state is not None and state.pending_broadcast and m.built:
                broadcast_weights(m)
            callbacks = bound.arguments.get("callbacks")
            if callbacks is None or isinstance(callbacks, (list, tuple)):
                callbacks = list(callbacks or [])
                if not any(isinstance(c, MetricAverage) for c in callbacks):
                    callbacks.insert(0, MetricAverage())
                bound.arguments["callbacks"] = keras_fault.fit_callbacks(callbacks, _models[m].team)
        return method(*bound.args, **bound.kwargs)

    return wrapper


def _unhook_model(model: keras.Model) -> None:
    for name in _WRAPPED_METHODS:
        if name in vars(model):
            delattr(model, name)
    if getattr(model, "optimizer", None) is not None:
        model.make_train_function(force=True)  # its traced steps hold ml_comm's ops


# ---------------------------------------------------------------- callbacks and helpers


class MetricAverage(keras.callbacks.Callback):
    """Averages the logs of `fit` over all ranks, in place, so that the callbacks after
    it (progress bar, History, checkpoints) see the global values.

    per_batch=True averages at every batch end too (one small allreduce per step; the
    progress bar shows global values), False only at epoch end. `set_team` puts one in
    front of `fit`'s callbacks; pass your own instance to change per_batch.
    """

    def __init__(self, per_batch: bool = True, team: int | None = None):
        super().__init__()
        self.per_batch = per_batch
        self.team = team

    def _team(self) -> int:
        if self.team is not None:
            return self.team
        state = _models.get(self.model) if self.model is not None else None
        return state.team if state is not None else 0

    def on_train_batch_end(self, batch, logs=None):
        if self.per_batch:
            average_logs(logs, self._team())

    def on_epoch_end(self, epoch, logs=None):
        average_logs(logs, self._team())


def average_logs(logs: dict | None, team: int = 0) -> dict | None:
    """Average the numeric values of a Keras logs dict over all ranks, in place (float64;
    keys in sorted order, which must be the same on every rank). Returns `logs`."""
    if not logs:
        return logs
    keys = []
    parts = []
    for key in sorted(logs):
        value = logs[key]
        if isinstance(value, numbers.Number) and not isinstance(value, bool):
            keys.append((key, None))
            parts.append(np.array([value], np.float64))
        elif isinstance(value, np.ndarray) and value.dtype.kind in "fiu":
            keys.append((key, value.shape))
            parts.append(value.astype(np.float64).reshape(-1))
    if not parts:
        return logs
    flat = mc.average(np.concatenate(parts), team)
    offset = 0
    for (key, shape), part in zip(keys, parts):
        chunk = flat[offset : offset + part.size]
        offset += part.size
        logs[key] = float(chunk[0]) if shape is None else chunk.reshape(shape)
    return logs


def ModelCheckpoint(filepath, **kwargs) -> keras.callbacks.Callback:  # noqa: N802
    """keras.callbacks.ModelCheckpoint on rank 0, a callback that does nothing elsewhere:
    only rank 0 writes (the weights are identical everywhere). Put it in `fit`'s callbacks;
    with `monitor`/`save_best_only` it sees the metrics averaged over the ranks."""
    if mc.get_rank() == 0:
        return keras.callbacks.ModelCheckpoint(filepath, **kwargs)
    return keras.callbacks.Callback()


@keras.saving.register_keras_serializable(package="ml_comm")
class WarmupSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """base(step) * m(step): m rises linearly from 1 at step 0 to `scale` at
    `warmup_steps` and stays there (Goyal et al., "Accurate, Large Minibatch SGD").

    base: a float or a LearningRateSchedule. Serialisable (saved models reload it)."""

    def __init__(self, base, scale: float, warmup_steps: int = 0):
        self.base = base
        self.scale = float(scale)
        self.warmup_steps = int(warmup_steps)

    def __call__(self, step):
        if isinstance(self.base, keras.optimizers.schedules.LearningRateSchedule):
            base = self.base(step)
        else:
            base = self.base
        base = keras.ops.cast(base, "float32")
        if self.warmup_steps <= 0:
            return base * self.scale
        done = keras.ops.minimum(keras.ops.cast(step, "float32") / self.warmup_steps, 1.0)
        return base * (1.0 + (self.scale - 1.0) * done)

    def get_config(self):
        base = self.base
        if isinstance(base, keras.optimizers.schedules.LearningRateSchedule):
            base = keras.saving.serialize_keras_object(base)
        return {"base": base, "scale": self.scale, "warmup_steps": self.warmup_steps}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        if isinstance(config["base"], dict):
            config["base"] = keras.saving.deserialize_keras_object(config["base"])
        return cls(**config)


def scale_learning_rate(learning_rate, warmup_steps: int = 0):
    """The learning rate for `get_nranks()` times the batch: `learning_rate * nranks`
    (linear scaling), reached after `warmup_steps` optimizer steps that ramp up from
    `learning_rate` (a WarmupSchedule). learning_rate: a float or a LearningRateSchedule."""
    if warmup_steps < 0:
        raise ValueError(f"warmup_steps must be >= 0, got {warmup_steps}")
    nranks = mc.get_nranks()
    is_schedule = isinstance(learning_rate, keras.optimizers.schedules.LearningRateSchedule)
    if warmup_steps == 0 and not is_schedule:
        return float(learning_rate) * nranks
    return WarmupSchedule(learning_rate, nranks, warmup_steps)


def get_team(model: keras.Model) -> int | None:
    """The team set_team gave `model`, or None."""
    state = _models.get(model)
    return state.team if state is not None else None


__all__ = [
    "DEFAULT_MSGLEN",
    "MetricAverage",
    "ModelCheckpoint",
    "WarmupSchedule",
    "average_logs",
    "broadcast_weights",
    "distributed_optimizer",
    "finalize",
    "get_team",
    "init",
    "scale_learning_rate",
    "set_team",
]
