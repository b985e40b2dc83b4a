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
alike (_agree_on_steps).
Models opted out with `set_team(model, None)` are left alone.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import math
import numbers
import weakref
import zlib

import keras
import numpy as np

from .. import api as mc
from ..core.errors import MismatchError, NonFiniteError
from ..core.output import say
from ..core.patches import Patches
from ..core.settings_check import disagreements
from ..faults import stop
from . import apply
from .apply import broadcast_model_weights
from .backend import current
from .callbacks import ShareState, StopTogether, fit_callbacks
from .metrics import GlobalMetrics, sum_metric_states
from .model_check import check_same_model
from .statistics import share_statistics
from .teams import forget_all, team_of

_seen: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> (optimizer, team)
_per_batch_default = False
_average_statistics = True
_said: set[str] = set()  # the warnings given in this session
# The savers with an integer save_freq that fit agrees on.
_MOST_COUNTERS = 4


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
    _said.clear()
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
    if not current().BROADCAST_IN_TRACE:
        arguments["callbacks"].insert(0, _WeightsAtStart())
    stopper = next(c for c in arguments["callbacks"] if isinstance(c, StopTogether))
    sharer = next(c for c in arguments["callbacks"] if isinstance(c, ShareState))
    _agree_on_steps(arguments, team, stopper, sharer, cb)
    try:
        return original(*bound.args, **bound.kwargs), stopper.stopped
    except Exception as exc:
        # A failed step's error, as ml_comm's class of its kind: TensorFlow's ops raise
        # TensorFlow's error of their kind carrying ml_comm's status, a compiled JAX
        # step a runtime error with it in its text (backend/<name>/, failed_step_error).
        error = current().failed_step_error(exc) or exc
        _explain_finite_check_with_loss_scaling(model, error)
        if cb is not None and cb.in_epoch and isinstance(error, MismatchError):
            raise MismatchError(
                f"rank {mc.get_rank()} is at step {cb.step + 1} of epoch {cb.epoch + 1} while "
                "another rank has ended the epoch: the ranks ran different numbers of "
                f"steps ({str(exc).strip().splitlines()[0]})"
            ) from exc
        _raise_typed(error, exc)


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
        team, bound, cb = _begin(self, bind, args, kwargs)
        if bound is None:
            return original(self, *args, **kwargs)
        validation = isinstance(bound.arguments["callbacks"], keras.callbacks.CallbackList)
        if _average_statistics and not validation:  # fit's ShareState shares for validation
            share_statistics(self, team)  # one model evaluated on every rank
        arguments = bound.arguments
        want_dict = bool(arguments.get("return_dict", False))
        arguments["return_dict"] = True
        if not validation and _sample_count(arguments.get("x")) == 0:
            results = _evaluate_nothing(self, arguments, team)
        else:
            original(*bound.args, **bound.kwargs)
            results = cb.test_results if cb is not None else sum_metric_states(self, team)
        if want_dict:
            return dict(results)
        # Keras's own list order (its private Model._flatten_metrics_in_order, checked
        # against the installed Keras by tests/mpi/test_keras_scaling.py).
        return self._flatten_metrics_in_order(dict(results))

    return evaluate


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
        prepare(self)
        try:
            return original(self, *args, **kwargs)
        except Exception as exc:
            _raise_typed(current().failed_step_error(exc) or exc, exc)

    return train_on_batch


def _built_for_training(model) -> bool:
    optimizer = getattr(model, "optimizer", None)
    return model.built and (optimizer is None or optimizer.built)


class _WeightsAtStart(keras.callbacks.Callback):
    """Rank 0's weights once `fit` has built the model, before its first step reads them
    (backends that cannot broadcast inside a traced step: JAX, torch)."""

    def on_train_begin(self, logs=None):
        optimizer = getattr(self.model, "optimizer", None)
        state = apply.known(optimizer) if optimizer is not None else None
        if state is not None and state.team is not None and state.pending_broadcast:
            broadcast_model_weights(self.model)


# ---------------------------------------------------------------- equal steps per epoch


def _local_steps(arguments) -> tuple[int, int]:
    """(training steps per epoch, training samples) of this rank's `fit` call; -1 where
    it cannot be known before the data is read (generators, unknown cardinality)."""
    x = arguments.get("x")
    steps_per_epoch = arguments.get("steps_per_epoch")
    if steps_per_epoch is not None:
        return int(steps_per_epoch), -1
    batches = current().batches_of(x)  # tf.data, a torch DataLoader
    if batches is not None:
        return batches, -1
    if isinstance(x, keras.utils.PyDataset):
        try:
            return int(len(x)), -1
        except (TypeError, NotImplementedError):
            return -1, -1
    samples = _sample_count(x)
    if samples < 0:
        return -1, -1
    split = _validation_split(arguments)
    train = int(math.floor(samples * (1.0 - split))) if split else samples
    batch = _batch_size(arguments)
    return math.ceil(train / batch), train


def _sample_count(x) -> int:
    if x is None:
        return -1
    leaves = keras.tree.flatten(x)
    if not leaves or not all(_is_array(a) for a in leaves):
        return -1
    return int(leaves[0].shape[0])


def _is_array(value) -> bool:
    """A NumPy array or a tensor of the backend (Keras slices either into batches)."""
    return isinstance(value, np.ndarray) or keras.ops.is_tensor(value)


# fit's arguments that decide its collective calls, each rank's as a number in the table of
# _agree_on_steps: how many epochs run (and from which), whether and when validation runs
# (each is an evaluate, whose metrics are reduced), and whether the logs are reduced after
# every batch. Ranks that differ would pair one call with another. Last, the batch size
# of arrays: ranks whose batches differ in size would run other numbers of steps, or
# average a large batch's gradient with a small one's as equals.
_CALL_SHAPE = (
    "epochs",
    "initial_epoch",
    "validation",
    "validation_freq",
    "per-batch metrics",
    "batch_size",
)


def _call_shape(arguments, metrics: GlobalMetrics | None) -> list[float]:
    """This rank's _CALL_SHAPE, as numbers: validation_freq only where the rank
    validates (Keras reads it only then), a list of epochs as a digest of its numbers,
    anything else as -1 (Keras judges it)."""
    validates = arguments.get("validation_data") is not None or _validation_split(arguments) > 0
    freq = arguments.get("validation_freq", 1) if validates else 0
    if isinstance(freq, numbers.Integral):
        code = float(freq)
    elif isinstance(freq, (list, tuple, set, range)) and all(
        isinstance(e, numbers.Integral) for e in freq
    ):
        code = -2.0 - zlib.crc32(repr(sorted(int(e) for e in freq)).encode())
    else:
        code = -1.0
    return [
        _number(arguments.get("epochs", 1)),
        _number(arguments.get("initial_epoch", 0)),
        float(validates),
        code,
        float(metrics is not None and metrics.per_batch),
        float(_batch_size(arguments)) if _sample_count(arguments.get("x")) >= 0 else 0.0,
    ]


def _number(value) -> float:
    return float(value) if isinstance(value, numbers.Real) else -1.0


def _shape_text(column: int, value: float) -> str:
    """What a column's value says; values that differ read differently."""
    if column == 2:
        return "given" if value else "none"
    if column == 3 and value <= -2:
        return f"a list of epochs (digest {int(-2 - value):08x})"
    if column == 4:
        return "on" if value else "off"
    if column == 5 and value == 0:
        return "not used (the data are not arrays)"
    if value == -1:
        return "not a number"
    return str(int(value)) if value.is_integer() else str(value)


def _check_call_shapes(shapes: np.ndarray) -> None:
    """MismatchError on every rank (all read the same table) naming each of fit's
    arguments that differs between the ranks, with who passed what."""
    per_rank = [
        {name: _shape_text(c, row[c]) for c, name in enumerate(_CALL_SHAPE)} for row in shapes
    ]
    lines = disagreements(per_rank)
    if lines:
        raise MismatchError(
            "ml_comm.keras: the ranks called fit with different arguments, which decide its "
            "collective calls (epochs, validation, GlobalMetrics(per_batch=...), the batch "
            "size): " + " | ".join(lines) + ". Pass every rank's fit the same ones"
        )


def _agree_on_steps(
    arguments,
    team: int,
    stopper: StopTogether,
    sharer: ShareState,
    metrics: GlobalMetrics | None = None,
) -> None:
    """Make every rank run the same number of training steps per epoch, the smallest
    rank's (one small allreduce per fit call); warn once, on rank 0, when that drops data.
    The same allreduce tells every rank whether any rank's callbacks may stop training
    after a batch or an epoch, and when rank 0's callbacks save (the ranks' callbacks
    may differ: a checkpoint on rank 0 alone): then all agree, or share, there.

    Arrays of different lengths are all cut to the shortest, so that every step's
    batches are the same size on every rank too (the average of the ranks' gradients is
    then the gradient of the global batch, as one process would compute it, also for the
    last, partial batch). Datasets are cut to the fewest batches."""
    steps, samples = _local_steps(arguments)
    rank, nranks = mc.get_rank(), mc.get_nranks()
    if nranks == 1:
        return
    # Per rank: steps, samples, the data's fingerprint and its BackupAndRestore count;
    # then the batch counters of rank 0's savers with an integer save_freq (they write on
    # rank 0 alone: wrapped on the other ranks, they neither save nor count there), the
    # two stop flags; last, each rank's call shape.
    shaped = len(_CALL_SHAPE) * nranks
    table = np.zeros(4 * nranks + 4 * _MOST_COUNTERS + 2 + shaped, np.float64)
    shape_row = len(table) - shaped + rank * len(_CALL_SHAPE)
    table[shape_row : shape_row + len(_CALL_SHAPE)] = _call_shape(arguments, metrics)
    table[rank], table[nranks + rank] = steps, samples
    first_rows = min(samples, _batch_size(arguments))  # the batch the digest reads
    table[2 * nranks + rank] = _fingerprint(arguments, samples, first_rows)
    table[3 * nranks + rank] = sharer.backups
    counters = table[4 * nranks : 4 * nranks + 4 * _MOST_COUNTERS].reshape(_MOST_COUNTERS, 4)
    if rank == 0:
        mine = sharer.rows()
        if len(mine) > _MOST_COUNTERS:
            counters[0, 0] = -1  # too many: every rank raises below
        elif mine:
            counters[: len(mine)] = mine
    flags = 4 * nranks + 4 * _MOST_COUNTERS
    table[flags : flags + 2] = stopper.agree_per_batch, stopper.agree_per_epoch
    mc.allreduce_sum(table, team)
    _check_call_shapes(table[len(table) - shaped :].reshape(nranks, len(_CALL_SHAPE)))
    stopper.agree_per_batch = bool(table[flags] > 0)
    stopper.agree_per_epoch = bool(table[flags + 1] > 0)
    backups = table[3 * nranks : 4 * nranks]
    if len(set(backups)) > 1:
        without = [r for r in range(nranks) if backups[r] < backups.max()]
        raise ValueError(
            f"ml_comm.keras: rank(s) {_listing(without)} pass fewer BackupAndRestore "
            "callbacks to fit than the others: pass it on every rank (every rank restores "
            "from the backup, rank 0 writes it)"
        )
    if counters[0, 0] < 0:
        raise ValueError(
            f"ml_comm.keras: more than {_MOST_COUNTERS} ModelCheckpoint or BackupAndRestore "
            "callbacks with an integer save_freq passed to fit"
        )
    sharer.agree([row for row in counters if row[0] > 0])
    _warn_if_one_data(table[2 * nranks : 3 * nranks], first_rows)
    table = table[: 2 * nranks]
    all_steps = [int(s) for s in table[:nranks]]
    all_samples = [int(s) for s in table[nranks:]]
    if min(all_steps) < 0:
        return  # unknown somewhere: a mismatch is reported at the epoch's end
    fewest = min(all_steps)
    if arguments.get("steps_per_epoch") is None and min(all_samples) >= 0:
        if len(set(all_samples)) == 1:
            return
        batch = _batch_size(arguments)
        keep = min(all_samples)
        _truncate_arrays(arguments, keep)
        fewest = -(-keep // batch)
        dropped = _listing(s - keep for s in all_samples)
        what = (
            f"{_listing(all_samples)} training samples ({_listing(all_steps)} steps of "
            f"{batch}); every rank trains on {keep} per epoch (dropping {dropped})"
        )
    elif len(set(all_steps)) == 1:
        return
    elif arguments.get("steps_per_epoch") is not None:
        arguments["steps_per_epoch"] = fewest
        what = f"steps_per_epoch {_listing(all_steps)}"
    elif isinstance(arguments["x"], keras.utils.PyDataset):
        arguments["x"] = _FirstBatches(arguments["x"], fewest)
        dropped = _listing(s - fewest for s in all_steps)
        what = f"{_listing(all_steps)} batches per epoch (dropping {dropped} batches)"
    else:
        arguments["x"] = current().first_batches(arguments["x"], fewest)  # tf.data, DataLoader
        dropped = _listing(s - fewest for s in all_steps)
        what = f"{_listing(all_steps)} batches per epoch (dropping {dropped} batches)"
    if rank == 0:
        say(
            f"ml_comm: warning: uneven data: ranks 0..{nranks - 1} have {what}, so that "
            f"every rank runs {fewest} steps per epoch"
        )


def _batch_size(arguments) -> int:
    return int(arguments.get("batch_size") or 32)  # Keras's default


def _fingerprint(arguments, samples: int, rows: int) -> int:
    """Arrays' training data: a 48-bit digest (exact in a float64) of its count and its
    first batch of x, the same on ranks that were given the same data; 0 where unknown."""
    if samples <= 0:
        return 0
    first = keras.tree.flatten(arguments["x"])[0]
    digest = hashlib.blake2b(str(samples).encode(), digest_size=6)
    digest.update(np.ascontiguousarray(keras.ops.convert_to_numpy(first[:rows])).tobytes())
    return int.from_bytes(digest.digest(), "little") or 1


def _warn_if_one_data(fingerprints, rows: int) -> None:
    """Rank 0 warns, once a session, when every rank was given the same training arrays:
    the ranks then train on copies of one data set, and with the same shuffling (or none)
    average copies of one gradient, no faster than one rank."""
    if fingerprints[0] == 0 or len(set(fingerprints.tolist())) != 1 or "one data" in _said:
        return
    _said.add("one data")
    if mc.get_rank() == 0:
        say(
            f"ml_comm: warning: every rank was given the same training data (as many "
            f"samples, the same first {rows}): each rank trains on all of it, and ranks that "
            "shuffle alike (or not at all) average copies of one gradient, no faster than "
            "one rank. Give each rank its share: x = ml_comm.data.shard(x) (rows "
            "rank::nranks), the same for y"
        )


class _FirstBatches(keras.utils.PyDataset):
    """The first `count` batches of a PyDataset, every epoch (steps_per_epoch would go on
    where the previous epoch stopped)."""

    def __init__(self, inner: keras.utils.PyDataset, count: int):
        super().__init__(
            workers=inner.workers,
            use_multiprocessing=inner.use_multiprocessing,
            max_queue_size=inner.max_queue_size,
        )
        self.inner, self.count = inner, count

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index):
        return self.inner[index]

    def on_epoch_begin(self):
        self.inner.on_epoch_begin()

    def on_epoch_end(self):
        self.inner.on_epoch_end()


def _validation_split(arguments) -> float:
    """The split Keras takes: none when validation_data is given (it wins, as in Keras)."""
    if arguments.get("validation_data") is not None:
        return 0.0
    return float(arguments.get("validation_split") or 0.0)


def _listing(values) -> str:
    return ", ".join(str(v) for v in values)


def _truncate_arrays(arguments, keep: int) -> None:
    """Keep the first `keep` training samples of x, y and sample_weight; a validation
    split is taken first, from all samples, as Keras would."""
    names = [n for n in ("x", "y", "sample_weight") if arguments.get(n) is not None]
    split = _validation_split(arguments)
    if split:
        samples = _sample_count(arguments["x"])
        at = int(math.floor(samples * (1.0 - split)))
        validation = tuple(keras.tree.map_structure(lambda a: a[at:], arguments[n]) for n in names)
        arguments["validation_data"] = validation
        arguments["validation_split"] = 0.0
        for n in names:
            arguments[n] = keras.tree.map_structure(lambda a: a[:at], arguments[n])  # noqa: B023
    for n in names:
        arguments[n] = keras.tree.map_structure(lambda a: a[:keep], arguments[n])
