"""Keras 3 hook: `init()` ... `finalize()` alone make a Keras script data-parallel.

```
import ml_comm.keras as mk

mk.init()                                   # before training (threads, teams, msglen)
model.compile(optimizer="sgd", loss=...)    # before or after init
model.fit(x_shard, y_shard, ...)            # unchanged: gradients averaged on team 0
model.evaluate(x_test_shard, y_test_shard)  # metrics of all ranks' shards together
mk.finalize()
```

Between `init` and `finalize` every Keras optimizer update on this rank averages its
gradients over all ranks first (team 0 unless `set_team(model, team)` chose another, or
`set_team(model, None)` opted the model out), whether it comes from `fit`,
`train_on_batch`, a custom `train_step` or a custom loop that calls `optimizer.apply` /
`apply_gradients`. Rank 0's weights are broadcast before a model's first update.

How it hooks in
---------------
Keras 3 has no public gradient-transform hook and no global callback registry, but every
weight update ends in the public `Optimizer.apply`, and every training or evaluation run
of a model in its public `fit` / `evaluate` / `predict` / `train_on_batch`. `init` wraps
those methods on the public base classes (`keras.optimizers.Optimizer`,
`keras.optimizers.LossScaleOptimizer`, `keras.Model`) and `finalize` restores them
([Keras](keras.md#how-it-hooks-in)). Instances,
their classes, saved models and checkpoints are untouched: a saved model reloads without
ml_comm. Custom `tf.function` loops must be traced after `init` (a graph traced before
holds the plain optimizer's update).

Backends: Keras' TensorFlow, JAX and torch backends (KERAS_BACKEND, as Keras reads it);
what differs between them is in backend/<name>/, and TensorFlow is imported only on its
own backend.

msglen: omitted, each team's fusion buffer holds `DEFAULT_MSGLEN` (4 Mi) float32 elements
(16 MiB per team). Larger gradient sets stream through it in windows.

Rules, as for every ml_comm collective: every rank trains the same models with the same
batch shapes; `fit` makes the ranks agree on the number of steps per epoch, custom loops
use `ml_comm.data.equal_steps`.
"""

from __future__ import annotations

import atexit
import threading
import weakref

from . import compile_notice  # noqa: F401  # isort: skip  (before Keras: it says at once)

import keras
import numpy as np

from .. import api as mc
from ..core.errors import MLCommError, StateError
from ..core.output import say
from ..core.patches import Patches
from ..mpi import launch
from . import apply, backend, fit, statistics, teams
from .metrics import GlobalMetrics, MetricAverage, average_logs

DEFAULT_MSGLEN = 1 << 22

# The Keras attributes the hook replaces (apply.py, fit.py): restored by finalize.
_patches = Patches()
_started = threading.Event()  # init was called in this process (finalize without it warns)


# ---------------------------------------------------------------- life cycle


def _agreed(per_batch_metrics: bool, overlap_backprop: bool, average_statistics: bool) -> dict:
    """What init compares across ranks beside ml_comm's own settings: each of these
    decides collective calls (a metrics allreduce per batch, a submit per gradient during
    backprop, a statistics share per epoch), so ranks that differ would pair calls off."""
    agreed = {
        "Keras backend (KERAS_BACKEND)": backend.name(),
        "ml_comm.keras.init's per_batch_metrics": str(bool(per_batch_metrics)),
        "ml_comm.keras.init's average_statistics": str(bool(average_statistics)),
    }
    if backend.name() != "tensorflow":  # TensorFlow's ops overlap on their own: unused there
        agreed["ml_comm.keras.init's overlap_backprop"] = str(bool(overlap_backprop))
    return agreed


def init(
    nthread_per_team: int = 2,
    nteams: int = 1,
    msglen: int | None = None,
    *,
    chunk_bytes: int | None = None,
    per_batch_metrics: bool = False,
    overlap_backprop: bool = True,
    average_statistics: bool = True,
) -> None:
    """Start ml_comm for Keras: `nteams` teams of `nthread_per_team` threads (collective),
    and make every model and optimizer that trains from now on data-parallel.

    msglen: element count that sizes each team's fusion buffer; None takes DEFAULT_MSGLEN.
    per_batch_metrics: True averages fit's logs over the ranks after every batch too (one
    small allreduce per step); False (default) makes them global at each epoch's end.
    overlap_backprop: on Keras's JAX and torch backends, hand each gradient of Keras's own
    train step to the reduction as backprop produces it, so that communication overlaps
    backprop (False: average them all in the optimizer's apply, after backprop).
    TensorFlow's ops overlap backprop on their own.
    average_statistics: True (default) replaces the statistics that layers keep while
    training (BatchNormalization's moving mean and variance) by their average over the
    ranks at the end of every epoch of `fit`, before every save of its checkpoint
    callbacks and at the start of every `evaluate`, so that every rank evaluates and
    saves one model; False leaves each rank its own, as Horovod does.
    """
    _started.set()  # also where it fails: finalize then says nothing of a missing init
    if int(keras.__version__.split(".")[0]) < 3:
        raise MLCommError(f"ml_comm.keras needs Keras 3, found {keras.__version__}")
    mc.init(
        nthread_per_team,
        nteams,
        DEFAULT_MSGLEN if msglen is None else msglen,
        backend.current().FRAMEWORK,  # the backend KERAS_BACKEND names (TensorFlow, JAX, torch)
        chunk_bytes=chunk_bytes,
        agreed=_agreed(per_batch_metrics, overlap_backprop, average_statistics),
    )
    apply.install(_patches)
    backend.current().install(_patches, overlap_backprop)
    fit.install(_patches, per_batch_metrics, average_statistics)
    mc.session().steps_note = fit.steps_note
    atexit.register(finalize)  # before ml_comm's own (atexit runs the last first)


def finalize() -> None:
    """Restore Keras (models train serially again; their train steps are traced anew)
    and stop ml_comm's teams. Safe to call twice."""
    if not _patches:  # init did not run, or finalize did already
        if not _started.is_set() and not mc.is_initialized():
            _started.set()  # said once
            _say_never_started()
        return
    note = fit.steps_note() if mc.get_nranks() > 1 else ""
    if mc.is_initialized():  # for finalize's check that nobody waits for us
        mc.session().steps_note = lambda: note
    fit.forget()
    apply.forget()
    backend.current().forget()
    _patches.restore()
    mc.finalize()


def _say_never_started() -> None:
    """finalize without init in a job of several tasks: each trained alone, which nothing
    else tells (rank 0, as the launcher numbers it, says it once)."""
    tasks = max((count for _, count, _ in launch.launcher_tasks()), default=1)
    if tasks > 1 and launch.launcher_rank() == 0:
        say(
            f"ml_comm: warning: ml_comm.keras.finalize() without init(), in a job of {tasks} "
            "tasks: this task averaged nothing with the others and trained alone on its "
            "data (so did every task that ran this script). Call ml_comm.keras.init() "
            "before the model trains"
        )


def set_team(model: keras.Model, team: int | None = 0) -> keras.Model:
    """Put `model` on ml_comm team `team` (GANs: one team per model), or opt it out with
    team=None (it then trains on this rank alone). Not needed for team 0. Call it after
    `compile`, on every rank (a collective when the model is built: it broadcasts the
    weights). Returns the model."""
    if not isinstance(model, keras.Model):
        raise TypeError(f"set_team takes a keras.Model, got {type(model).__name__}")
    if getattr(model, "optimizer", None) is None:
        raise StateError(
            "set_team: the model has no optimizer; call model.compile(optimizer=...) "
            "first, then ml_comm.keras.set_team(model, team)"
        )
    if team is not None:
        _check_team(team)
        team = int(team)
    else:
        _check_team(0)
    teams.set_model_team(model, team)
    if team is None:
        apply.state_of(model.optimizer).team = None
        if getattr(model, "compiled", False):
            model.make_train_function(force=True)
        return model
    fit.prepare(model)
    return model


def distributed_optimizer(optimizer, team: int | None = 0, model: keras.Model | None = None):
    """Choose the team on which `optimizer` (a keras.optimizers.Optimizer) averages its
    gradients (None: opt it out). Every optimizer is averaged on team 0 after init
    without this. With `model`, its weights are broadcast at the first update unless
    broadcast_weights(model) ran before; without, the variables of the first update are.
    Returns the optimizer."""
    if not isinstance(optimizer, keras.optimizers.Optimizer):
        raise TypeError(
            f"distributed_optimizer takes a keras.optimizers.Optimizer, "
            f"got {type(optimizer).__name__}"
        )
    _check_team(0 if team is None else team)
    state = apply.state_of(optimizer)
    state.team = None if team is None else int(team)
    if model is not None:
        state.model = weakref.ref(model)
    return optimizer


def broadcast_weights(model, root: int = 0, *, optimizer=None) -> None:
    """Overwrite the model's weights (and its optimizer's variables, if built) with
    root's. Collective; eager. Also takes a list of variables. `optimizer`: a standalone
    optimizer (a custom loop's, not compiled into the model) whose variables are
    broadcast too, on the model's team; one not built yet is built first for the
    model's trainable weights (or the list), so that every rank broadcasts alike."""
    if isinstance(model, keras.Model):
        apply.broadcast_model_weights(model, root)
        weights, team = model.trainable_weights, teams.team_of(model, default=0) or 0
    else:
        weights, team = list(model), 0
        apply.broadcast_eagerly(weights, root)
    if optimizer is not None:
        if not optimizer.built:  # built on some ranks only (restored there): now on all
            optimizer.build([w for w in weights if w.trainable])
        apply.broadcast_eagerly(apply.shared_optimizer_variables(optimizer), root, team)


def share_statistics(model: keras.Model) -> int:
    """Replace the statistics the model's layers keep while training (BatchNormalization's
    moving mean and variance: the non-trainable floating-point weights that differ between
    ranks) by their average over the ranks, on the model's team (team 0 for a model
    opted out with `set_team(model, None)`). Mid-way through a gradient-accumulation
    cycle (`gradient_accumulation_steps`) of the optimizer the model was compiled with,
    where ml_comm averages its gradients, the optimizer's partial sums too, so that what
    rank 0 saves is every rank's state. Collective; eager.
    `fit` and `evaluate` do it themselves (init's `average_statistics`); a custom loop
    calls it before rank 0 saves the model. Returns how many layer weights were
    averaged."""
    team = teams.team_of(model, default=0)
    averaged = statistics.share_statistics(model, team or 0)
    optimizer = getattr(model, "optimizer", None)
    if optimizer is not None and team is not None:  # opted out: each rank's own updates
        apply.share_accumulators(optimizer, team)
    return averaged


def gather(values, root: int = 0):
    """Concatenate every rank's `values` (a NumPy array such as `predict`'s output, rows
    first, any number of rows per rank) in rank order on `root`; None on the others.
    Collective over init's ranks (its `comm`); for results, not for the training step
    (it pickles through mpi4py)."""
    comm = mc.session().comm
    parts = comm.gather(np.asarray(values), root=root)
    return np.concatenate(parts) if parts is not None else None


def _check_team(team) -> None:
    """Raises before init(), with another framework than the Keras backend's, or for a
    bad team id."""
    framework = backend.current().FRAMEWORK
    if mc.session().backend.name != framework:
        raise StateError(
            f"ml_comm was initialised without framework={framework!r}, which Keras' "
            f"{backend.name()} backend needs; start it with ml_comm.keras.init(...) "
            f"(or ml_comm.init(..., framework={framework!r}))"
        )
    mc.team_settings(team)


# ---------------------------------------------------------------- callbacks and helpers


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
    `learning_rate` (a WarmupSchedule). learning_rate: a float or a LearningRateSchedule.
    A schedule cannot be lowered by keras.callbacks.ReduceLROnPlateau (Keras raises a
    TypeError); with that callback use warmup_steps=0 (a float)."""
    if warmup_steps < 0:
        raise ValueError(f"warmup_steps must be >= 0, got {warmup_steps}")
    nranks = mc.get_nranks()
    is_schedule = isinstance(learning_rate, keras.optimizers.schedules.LearningRateSchedule)
    if warmup_steps == 0 and not is_schedule:
        return float(learning_rate) * nranks
    return WarmupSchedule(learning_rate, nranks, warmup_steps)


def get_team(model: keras.Model) -> int | None:
    """The model's team: set_team's choice, 0 without one, None when opted out."""
    return teams.team_of(model)


__all__ = [
    "init",
    "finalize",
    "set_team",
    "get_team",
    "distributed_optimizer",
    "broadcast_weights",
    "share_statistics",
    "scale_learning_rate",
    "WarmupSchedule",
    "GlobalMetrics",
    "MetricAverage",
    "average_logs",
    "gather",
    "ModelCheckpoint",
    "DEFAULT_MSGLEN",
]
