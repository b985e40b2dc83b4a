"""The model side of the Keras hook: `fit`, `evaluate`, `predict` and `train_on_batch` of
every Keras model, after `ml_comm.keras.init`.

`install()` wraps these public methods of `keras.Model` (Sequential, functional and
subclassed models inherit them; an override that calls `super()` still goes through the
wrapper); the hook's finalize restores them (core/patches.py). Arguments are rebound
with the methods' public signatures. The first time a model is used in a session (or
after `compile` gave it a new optimizer, or `set_team` a new team) the wrapper:

* registers the model's optimizer on the model's team (0 unless `set_team` said other),
* on TensorFlow turns off `jit_compile` (XLA cannot compile ml_comm's TensorFlow ops;
  on JAX and torch it stays as it is) and makes Keras trace the train step anew (a step
  traced before `init` would call the plain optimizer),
* broadcasts rank 0's weights (model and built optimizer) when the model is built.

Then: only rank 0 prints progress; `fit` and `evaluate` get a GlobalMetrics callback in
front of the user's (global metrics, metrics.py); `evaluate` first averages the model's
statistics over the ranks (statistics.py; `fit` does at each epoch's end, callbacks.py)
and returns the global metrics; `predict` returns this rank's predictions. Before `fit`
runs, the ranks agree on the number of training steps per epoch and on rank 0's
saves, and check that they passed the arguments that decide fit's collective calls
alike (steps.py).
Models opted out with `set_team(model, None)` are left alone.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import weakref

import keras
import numpy as np

from .. import api as mc
from ..core.errors import MismatchError, MLCommError, NonFiniteError
from ..core.patches import Patches
from ..faults import stop
from . import apply, metrics, steps
from .apply import broadcast_model_weights
from .backend import current
from .callbacks import ShareState, StopTogether, fit_callbacks
from .metrics import GlobalMetrics, sum_metric_states
from .model_check import check_same_model
from .statistics import share_statistics
from .teams import driving, forget_all, team_of

_seen: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> (optimizer, team)
# This rank's fit that raised an exception of its own in an epoch (a callback's, the
# data's) while its program went on: the other ranks are still in that epoch, and this
# rank's next collective call pairs with theirs. Said in its later errors; a fit that ends
# clears it.
_left_early: list[str] = []
_per_batch_default = False
_average_statistics = True


def install(patches: Patches, per_batch_metrics: bool, average_statistics: bool) -> None:
    """Wrap keras.Model's fit, evaluate, predict and train_on_batch (patches: the hook's,
    which keras/__init__ restores)."""
    global _per_batch_default, _average_statistics
    _per_batch_default = per_batch_metrics
    _average_statistics = average_statistics
    for name, make in (
        ("fit", _fit),
        ("evaluate", _evaluate),
        ("predict", _predict),
        ("train_on_batch", _train_on_batch),
    ):
        patches.replace(keras.Model, name, make(getattr(keras.Model, name)))


def forget() -> None:
    """finalize: the models seen are traced anew and forgotten."""
    for model in list(_seen.keys()):
        if getattr(model, "compiled", False):
            model.make_train_function(force=True)  # its traced steps hold ml_comm's ops
    _seen.clear()
    _left_early.clear()
    steps.forget()
    forget_all()


def prepare(model) -> int | None:
    """Register the model for this session (see the module's docstring); returns its
    team, or None when it is opted out."""
    team = team_of(model)
    if team is None:
        return None
    optimizer = getattr(model, "optimizer", None)
    key = (id(optimizer), team)
    if _seen.get(model) == key:
        return team
    _seen[model] = key
    if optimizer is not None:
        state = apply.state_of(optimizer)
        state.team = team
        state.model = weakref.ref(model)
        if model.jit_compile and not current().KEEPS_JIT:
            model.jit_compile = False  # ml_comm's TensorFlow ops have no XLA kernels
        if getattr(model, "compiled", False):
            model.make_train_function(force=True)
    if model.built:
        try:
            check_same_model(model, team)  # before the broadcast: the ranks hold one model
            broadcast_model_weights(model)
        except Exception:
            _seen[model] = None  # refused or failed: checked and broadcast at its next use
            raise
    return team


# ---------------------------------------------------------------- the wrappers


def _binder(original):
    signature = inspect.signature(original)

    def bind(model, args, kwargs):
        try:
            return signature.bind(model, *args, **kwargs)
        except TypeError:
            return None  # let Keras report the bad call

    return bind


def _quiet_unless_rank0(arguments) -> None:
    if mc.get_rank() != 0:
        arguments["verbose"] = 0


def _with_global_metrics(callbacks):
    """(our callback, the callbacks to pass): ours first, so that the callbacks after it
    (progress bar, History, checkpoints) see global values."""
    if isinstance(callbacks, keras.callbacks.CallbackList):  # fit's own, for validation
        ours = [c for c in callbacks.callbacks if isinstance(c, GlobalMetrics)]
        return (ours[0] if ours else None), callbacks
    if callbacks is not None and not isinstance(callbacks, (list, tuple)):
        callbacks = [callbacks]
    callbacks = list(callbacks or [])
    ours = [c for c in callbacks if isinstance(c, GlobalMetrics)]
    cb = ours[0] if ours else GlobalMetrics(per_batch=_per_batch_default)
    return cb, [cb, *[c for c in callbacks if c is not cb]]


def _begin(model, bind, args, kwargs):
    """What fit and evaluate do first: (team, bound arguments, our GlobalMetrics), with
    progress printed on rank 0 only and our metrics callback first; bound is None when
    ml_comm leaves this model alone."""
    team = prepare(model)
    bound = bind(model, args, kwargs) if team is not None else None
    if bound is None:
        return team, None, None
    _quiet_unless_rank0(bound.arguments)
    cb, bound.arguments["callbacks"] = _with_global_metrics(bound.arguments.get("callbacks"))
    return team, bound, cb


def _fit(original):
    bind = _binder(original)

    @functools.wraps(original)
    def fit(self, *args, **kwargs):
        team, bound, cb = _begin(self, bind, args, kwargs)
        if bound is None:
            return original(self, *args, **kwargs)
        # The stop signals are caught while fit runs (fit_callbacks): outside it nothing
        # reads the request, and a signal must do what it would without ml_comm. Those
        # the program caught itself (mc.catch_stop_signals) stay caught.
        held, heard = stop.caught_signals(), len(stop.received_signals())
        try:
            with driving(team):
                history, stopped = _fit_bound(original, self, bound, team, cb)
        finally:
            stop.release_stop_signals(keep=held)
        if not stopped:  # one after fit's last check (its last validation, its saves)
            stop.deliver_again(stop.received_signals()[heard:], keep=held)
        return history

    return fit


def _fit_bound(original, model, bound, team: int, cb: GlobalMetrics | None):
    """(fit's history, whether a stop request ended it)."""
    arguments = bound.arguments
    # Backups and checkpoints on rank 0, every rank stopping together on a signal.
    arguments["callbacks"] = fit_callbacks(arguments["callbacks"], team, _average_statistics)
    arguments["callbacks"].insert(0, _CountSteps(team))
    if not current().BROADCAST_IN_TRACE:
        arguments["callbacks"].insert(0, _WeightsAtStart())
    stopper = next(c for c in arguments["callbacks"] if isinstance(c, StopTogether))
    sharer = next(c for c in arguments["callbacks"] if isinstance(c, ShareState))
    with _noting("This rank was starting fit (its ranks agree on the steps of its epochs)"):
        lengths_known = steps.agree_on_steps(arguments, team, stopper, sharer, cb)
    try:
        result = original(*bound.args, **bound.kwargs), stopper.stopped
    except Exception as exc:
        # A failed step's error, as ml_comm's class of its kind: TensorFlow's ops raise
        # TensorFlow's error of their kind carrying ml_comm's status, a compiled JAX
        # step a runtime error with it in its text (backend/<name>/, failed_step_error).
        error = current().failed_step_error(exc) or exc
        _explain_finite_check_with_loss_scaling(model, error)
        if (
            cb is not None
            and (cb.in_epoch or cb.epochs_ended)
            and isinstance(error, MismatchError)
            and not getattr(error, "says_where", False)
        ):
            here = (
                f"has run {cb.step} steps of epoch {cb.epoch + 1} and goes on in the epoch, "
                "but another rank does not"
                if cb.in_epoch
                else f"is at the end of epoch {cb.epoch + 1}, but another rank is not"
            )
            unknown = (
                ""
                if lengths_known
                else ". The data's number of batches is known on some rank only once it is "
                "read (a generator, a filtered dataset): pass every rank's fit the same "
                "steps_per_epoch (with data that repeats), or data of a known length"
            )
            raise MismatchError(
                f"rank {mc.get_rank()} {here}: {metrics.APART} ({_first_line(exc)}){unknown}"
            ) from exc
        if cb is not None and not isinstance(error, MLCommError):
            _left_early[:] = [
                f"Rank {mc.get_rank()}'s fit raised {type(error).__name__} ({_first_line(error)}) "
                f"{_where(cb)}, and its program went on: where the other ranks' fit did not "
                "raise there too, they went on without it. Where fit raises on one rank, end "
                "the job (or catch it on every rank alike)."
            ]
        _raise_typed(error, exc)
    _left_early.clear()
    return result


EVALUATE_NOTE = (
    "This rank was in evaluate, which every rank must call (its metrics are over all "
    "ranks' rows): where some ranks alone evaluate (if rank == 0: model.evaluate(...)), "
    "their evaluate meets the others' next call"
)


@contextlib.contextmanager
def _noting(where: str = ""):
    """Errors as ml_comm's class of their kind. A MismatchError also says where this rank
    was (`where`), and, on a rank whose earlier fit raised and went on, so: its calls
    now meet the others' fit, which it left."""
    try:
        yield
    except Exception as exc:
        error = current().failed_step_error(exc) or exc
        if isinstance(error, MismatchError) and not getattr(error, "says_where", False):
            text = getattr(error, "message", None) or str(error)
            notes = [n for n in (where, *_left_early) if n and n not in text]
            if notes:
                raise _noted(error, ". ".join((text, *notes))) from exc
        _raise_typed(error, exc)


def _noted(error: BaseException, text: str) -> BaseException:
    """`error` with the text `text`: of its class (ml_comm's kind, and TensorFlow's where
    its op raised it), with its attributes (the mark that every rank raised it)."""
    noted = type(error).__new__(type(error), text)
    noted.__dict__.update(error.__dict__)
    if "_message" in noted.__dict__:  # TensorFlow's errors keep their text there
        noted._message = text
    return noted


def _where(cb: GlobalMetrics) -> str:
    """Where in fit this rank was, for its messages."""
    if cb.in_epoch:
        return f"after {cb.step} steps of epoch {cb.epoch + 1}"
    if cb.epochs_ended:
        return f"at the end of epoch {cb.epoch + 1}"
    return "before its first epoch"


def _first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return lines[0][:300] if lines else "no message"


def steps_note() -> str:
    """How far this rank's training got, for the messages of a rank that leaves or waits
    while another waits for it (the session's steps_note)."""
    return " ".join(part for part in (*_left_early, apply.steps_note()) if part)


def _raise_typed(error: BaseException, exc: BaseException):
    """Raise `error`, the typed form of `exc` (failed_step_error's, or exc itself)."""
    if error is exc:
        raise exc
    # TensorFlow's typed error is exc itself, made ml_comm's class too (the same
    # traceback): not chained to it; JAX's is new and keeps exc as its cause.
    raise error from (None if error.__traceback__ is not None else exc)


def _explain_finite_check_with_loss_scaling(model, error: Exception) -> None:
    """ML_COMM_CHECK_FINITE=1 fails the reduction of an overflowing loss-scaled step,
    which a LossScaleOptimizer would skip (lowering its scale): say so."""
    optimizer = getattr(model, "optimizer", None)
    if not isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
        return
    if not isinstance(error, NonFiniteError):
        return
    raise NonFiniteError(
        "ML_COMM_CHECK_FINITE=1 is on, and this model's LossScaleOptimizer expects an "
        "occasional Inf in its scaled gradients (it would skip the step and lower the "
        "scale); the check fails the step on every rank instead. Leave "
        f"ML_COMM_CHECK_FINITE off with loss scaling (mixed_float16). The step's error: {error}"
    ) from error


def _evaluate(original):
    bind = _binder(original)

    @functools.wraps(original)
    def evaluate(self, *args, **kwargs):
        in_fit = isinstance(kwargs.get("callbacks"), keras.callbacks.CallbackList)
        with _noting("" if in_fit else EVALUATE_NOTE):  # fit's validation: fit says where
            with driving(team_of(self)):
                return _evaluate_bound(original, bind, self, args, kwargs)

    return evaluate


def _evaluate_bound(original, bind, self, args, kwargs):
    team, bound, cb = _begin(self, bind, args, kwargs)
    if bound is None:
        return original(self, *args, **kwargs)
    validation = isinstance(bound.arguments["callbacks"], keras.callbacks.CallbackList)
    if _average_statistics and not validation:  # fit's ShareState shares for validation
        share_statistics(self, team)  # one model evaluated on every rank
    arguments = bound.arguments
    want_dict = bool(arguments.get("return_dict", False))
    arguments["return_dict"] = True
    no_rows = steps.sample_count(arguments.get("x")) == 0
    if not validation and no_rows:
        results = _evaluate_nothing(self, arguments, team)
    else:
        if cb is not None:  # fit's validation: its callbacks' collective calls run
            cb.no_test_rows = no_rows
        original(*bound.args, **bound.kwargs)
        results = cb.test_results if cb is not None else sum_metric_states(self, team)
    if want_dict:
        return dict(results)
    # Keras's own list order (its private Model._flatten_metrics_in_order, checked
    # against the installed Keras by tests/mpi/test_keras_scaling.py).
    return self._flatten_metrics_in_order(dict(results))


def _evaluate_nothing(model, arguments, team: int) -> dict:
    """This rank's shard is empty (arrays of no rows, as a small validation set split
    over many ranks leaves): Keras's evaluate would raise on it (StopIteration on JAX)
    while the others wait for its metrics. Its metrics hold nothing instead: built where
    they were not (Keras builds the compiled metrics and the per-output loss trackers at
    their first update) by the loss and metrics of one row of zeros of the shard's
    shapes (zero rows would make a mean of nothing, NaN, and some metrics raise on
    them), then reset; then the ranks' sum. A failure to build still joins the sum,
    where the ranks' states then fail alike instead of leaving them waiting."""

    def one_row(value):
        if value is None:
            return None
        value = np.asarray(keras.ops.convert_to_numpy(value))
        return np.zeros((1, *value.shape[1:]), value.dtype)

    x, y, weight = (
        keras.tree.map_structure(one_row, arguments.get(name))
        for name in ("x", "y", "sample_weight")
    )
    try:
        y_pred = model(x, training=False)
        model.compute_loss(x, y, y_pred, weight, training=False)
        model.compute_metrics(x, y, y_pred, sample_weight=weight)
    except Exception:  # noqa: BLE001  (its states' sizes then tell every rank)
        pass
    model.reset_metrics()
    return sum_metric_states(model, team)


def _predict(original):
    bind = _binder(original)

    @functools.wraps(original)
    def predict(self, *args, **kwargs):
        bound = bind(self, args, kwargs) if team_of(self) is not None else None
        if bound is None:
            return original(self, *args, **kwargs)
        prepare(self)  # rank 0's weights first, as before fit and evaluate
        _quiet_unless_rank0(bound.arguments)
        return original(*bound.args, **bound.kwargs)

    return predict


def _train_on_batch(original):
    bind = _binder(original)

    @functools.wraps(original)
    def train_on_batch(self, *args, **kwargs):
        if not current().BROADCAST_IN_TRACE and not _built_for_training(self):
            bound = bind(self, args, kwargs)
            if bound is not None and team_of(self) is not None:
                # Keras builds the model in its train_on_batch, then reads the weights
                # into the compiled step: build it first, so that rank 0's go in.
                a = bound.arguments
                self._symbolic_build(data_batch=(a["x"], a.get("y"), a.get("sample_weight")))
        with _noting(), driving(team_of(self)):
            team = prepare(self)
            if team is not None:
                current().count_step(team)
            return original(self, *args, **kwargs)

    return train_on_batch


def _built_for_training(model) -> bool:
    optimizer = getattr(model, "optimizer", None)
    return model.built and (optimizer is None or optimizer.built)


class _CountSteps(keras.callbacks.Callback):
    """Counts fit's training steps on the model's team before each runs (one per batch
    hook: a run of steps_per_execution steps counts once, its calls placed in it)."""

    def __init__(self, team: int):
        super().__init__()
        self.team = team

    def on_train_batch_begin(self, batch, logs=None):
        current().count_step(self.team)


class _WeightsAtStart(keras.callbacks.Callback):
    """Rank 0's weights once `fit` has built the model, before its first step reads them
    (backends that cannot broadcast inside a traced step: JAX, torch)."""

    def on_train_begin(self, logs=None):
        optimizer = getattr(self.model, "optimizer", None)
        state = apply.known(optimizer) if optimizer is not None else None
        if state is not None and state.team is not None and state.pending_broadcast:
            broadcast_model_weights(self.model)
