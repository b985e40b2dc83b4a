"""Keras' fault-tolerance callbacks under ml_comm, and stopping every rank together.

`fit` of a model that ml_comm aggregates passes its callbacks through `fit_callbacks`,
which changes what follows, so that a serial script's callbacks work unchanged at N ranks:

* `keras.callbacks.BackupAndRestore` writes on rank 0 only (every rank writing the same
  files fails: h5py's file lock, `FileExistsError` on the directory). At the start of
  `fit` every rank restores the backup as Keras does, and then takes rank 0's weights
  and optimizer variables (a broadcast), so that all ranks continue from the very same
  state; ranks that found another epoch (a backup directory that not every rank sees)
  fail on every rank with both epochs named.
* `keras.callbacks.ModelCheckpoint`, `CSVLogger` and `TensorBoard` run on rank 0 only
  (the weights are the same on every rank; `GlobalMetrics` gives them the averaged
  metrics).
* With gradient accumulation, each rank's accumulators hold its own partial sums
  between updates; BatchNormalization's moving statistics follow each rank's batches.
  `ShareState` goes first and makes them one state where rank 0 saves: at the end of
  every epoch and before every save of rank 0's ModelCheckpoint or BackupAndRestore at
  the batches of an integer `save_freq` (counted as Keras counts them) every rank
  replaces its accumulators by their average (apply.share_accumulators, a collective
  that leaves the next update as it was; none at a cycle's start, where they are
  zeros) and its statistics by theirs (statistics.py); the statistics also before
  validation and at the end of training, where a batch trained since they were last
  shared.
  Rank 0's savers are agreed before training (steps.py), every rank counting batches
  with a copy of each one's count, so that a checkpoint on rank 0 alone
  (mk.ModelCheckpoint) has every rank share with it, at the batches where it saves.
  `init(average_statistics=False)` leaves each rank its own statistics, as Horovod does.
* `StopTogether` goes last: after every batch it asks `ml_comm.should_stop` (a signal
  received by any rank, see ml_comm/faults/stop.py), and when every rank learns of it, at the
  same batch, it stops `fit` there. On a pipelined team, whose reduction in flight may
  have told one rank and not yet another, it asks after the epoch's metrics are averaged
  (a blocking call every rank makes), unless per-batch global metrics give it such a
  call after every batch. A backup is then taken only where it is exact: at
  the end of an epoch that was completed (Keras would record a cut epoch as done) and
  at the batch frequency that the user asked for; the backup is kept (Keras deletes it
  at a normal end), the other callbacks' `on_train_end` run, and every rank leaves
  through `finalize` and exits with `STOPPED_EXIT_CODE` (with ML_COMM_REQUEUE_ON_STOP=1,
  rank 0 first requeues the Slurm job: ml_comm/faults/requeue.py). Running the same command
  again resumes from the backup.

Keras 3's BackupAndRestore restores the epoch only, not the batch within it: with an
integer `save_freq` a restarted job repeats the cut epoch from its first batch, from
the weights of the backup (as a serial script would). Exact resumption needs
`save_freq="epoch"` (the default).

Signals are caught (`ml_comm.catch_stop_signals`) while `fit` runs (fit.py gives them
back when it returns, and raises again one that came after its last check), unless
ML_COMM_CHECK_LAYOUT=0 turned off the exchange that carries them (then they end the
process as before).
"""

from __future__ import annotations

import sys

import keras
import numpy as np

from .. import api as mc
from ..core.errors import MismatchError
from ..faults import requeue, stop
from .apply import broadcast_model_weights, share_accumulators
from .metrics import GlobalMetrics
from .statistics import share_statistics

# EX_TEMPFAIL of sysexits.h: "try again later". What every rank exits with after a
# stop on a signal, so that a batch script can tell it from a finished run (0).
STOPPED_EXIT_CODE = 75


class _FitStop:
    """What the callbacks of one `fit` share: whether, and where, it stopped."""

    def __init__(self):
        self.stopped = False
        self.epoch_complete = True


class StopTogether(keras.callbacks.Callback):
    """Stops `fit` on every rank at the same batch once any rank asked to stop (a
    signal); then, at the end of training, leaves through `finalize` and exits with
    `exit_code` (None: `fit` returns, and `stopped` says whether it was cut short)."""

    def __init__(self, team: int = 0, exit_code: int | None = STOPPED_EXIT_CODE):
        super().__init__()
        self.team = team
        self.exit_code = exit_code
        self.state = _FitStop()
        # fit_callbacks: per-batch GlobalMetrics on this team run before us, so the team's
        # stop mark can be read after every batch even when it is pipelined (faults/stop.py).
        self.after_blocking_call = False
        # fit_callbacks: a callback before us may set stop_training after a batch
        # (TerminateOnNaN, the user's own), so the ranks agree on it after every batch.
        self.agree_per_batch = False
        self.agree_per_epoch = False  # the same for the end of an epoch
        self._told = False

    @property
    def stopped(self) -> bool:
        return self.state.stopped

    def on_train_begin(self, logs=None):
        self._told = False
        self.state.stopped = False
        self.state.epoch_complete = True

    def on_train_batch_end(self, batch, logs=None):
        if self.agree_per_batch and not self.state.stopped:
            self._agree_on_stop_training()
        if self.state.stopped:
            return
        if self.after_blocking_call:
            asked = stop.agreed_after_blocking_call(mc.session(), self.team)
        elif self._pipelined():
            return  # asked at the epoch's end, after its metrics' allreduce
        else:
            asked = stop.should_stop(mc.session(), self.team)
        if asked:
            steps = (self.params or {}).get("steps")
            self._stop(
                steps is not None and batch + 1 >= steps,
                f"batch {batch + 1} of {steps or '?'} of this epoch",
            )

    def on_epoch_end(self, epoch, logs=None):
        if self.agree_per_epoch and not self.state.stopped:
            self._agree_on_stop_training()  # EarlyStopping and others decide here
        if self.state.stopped or self.after_blocking_call or not self._pipelined():
            return
        if stop.agreed_after_blocking_call(mc.session(), self.team):
            self._stop(True, f"epoch {epoch + 1}")

    def _agree_on_stop_training(self) -> None:
        """Any rank's callbacks stopped training -> every rank stops here (one small
        allreduce on the team), as one process would stop at this very step."""
        if mc.get_nranks() == 1:
            return
        votes = np.zeros(mc.get_nranks(), np.int64)
        votes[mc.get_rank()] = 1 if self.model.stop_training else 0
        mc.allreduce_sum(votes, self.team)
        if votes.any():
            self.model.stop_training = True
            if mc.get_rank() == 0 and not self._told:
                self._told = True
                ranks = ", ".join(str(r) for r in np.flatnonzero(votes))
                print(
                    f"ml_comm: a callback on rank(s) {ranks} stopped training; every rank "
                    "stops at this step",
                    file=sys.stderr,
                    flush=True,
                )

    def _pipelined(self) -> bool:
        """A pipelined team of several ranks: its stop mark may be on one rank and not
        yet another between batches (one rank has nothing to wait for)."""
        return mc.get_nranks() > 1 and stop.team_is_pipelined(mc.session(), self.team)

    def _stop(self, epoch_complete: bool, where: str) -> None:
        self.state.stopped = True
        self.state.epoch_complete = epoch_complete
        self.model.stop_training = True
        if mc.get_rank() == 0:
            print(
                f"ml_comm: a rank asked to stop (a signal); every rank stops after {where}",
                file=sys.stderr,
                flush=True,
            )

    def on_train_end(self, logs=None):
        if not self.state.stopped or self.exit_code is None:
            return
        rank = mc.get_rank()
        mc.finalize()  # collective: every rank stopped at the same batch and comes here
        if requeue.wanted():
            requeue.requeue_slurm_job(rank)
        print(
            f"ml_comm: rank {rank} stopped on request; exiting with status "
            f"{self.exit_code} (run the same command again to resume from the backup)",
            file=sys.stderr,
            flush=True,
        )
        sys.exit(self.exit_code)


class _Wrapper(keras.callbacks.Callback):
    """A callback around another one (`inner`), which sees the same params and model."""

    def __init__(self, inner: keras.callbacks.Callback):
        super().__init__()
        self.inner = inner

    def set_params(self, params):
        super().set_params(params)
        self.inner.set_params(params)

    def set_model(self, model):
        super().set_model(model)
        self.inner.set_model(model)


class ShareState(keras.callbacks.Callback):
    """What every rank makes one state, so that rank 0 saves what every rank holds (see
    the module's docstring): at the end of every epoch and before the batch-frequency
    saves of rank 0's ModelCheckpoint and BackupAndRestore, the gradient accumulators
    and the statistics; before validation and at the end of training, the statistics.
    The savers write on rank 0 alone, and a ModelCheckpoint may be there alone
    (mk.ModelCheckpoint, or a script that adds one there), so rank 0's are agreed
    before training (`agree`, from steps.py's one allreduce): every rank then counts
    batches with a copy of each of their counters, started from its state on rank 0,
    and makes the same collective calls."""

    def __init__(self, team: int, statistics: bool, callbacks: list):
        super().__init__()
        self.team = team
        self.statistics = statistics
        savers = [_unwrapped(c) for c in callbacks]
        savers = [c for c in savers if isinstance(c, _SAVERS)]
        self.backups = sum(isinstance(c, keras.callbacks.BackupAndRestore) for c in savers)
        self.counters = [_SaveBatches.of(c) for c in savers if c.save_freq != "epoch"]
        self._trained = True

    def rows(self) -> list[list[float]]:
        """This rank's counters, for steps.py's table (savers that count alike, once)."""
        return [list(r) for r in dict.fromkeys(tuple(c.row()) for c in self.counters)]

    def agree(self, rows) -> None:
        """Rank 0's savers (its rows()), from steps.py's allreduce before training."""
        self.counters = [_SaveBatches.from_row(r) for r in rows]

    def on_train_begin(self, logs=None):
        self._trained = True  # a step before fit (train_on_batch) may have moved them

    def on_train_batch_end(self, batch, logs=None):
        self._trained = True
        if any([c.due(batch) for c in self.counters]):  # every counter counts the batch
            _share_accumulators(self.model, self.team)
            self._share_statistics()

    def on_test_begin(self, logs=None):
        self._share_statistics()  # validation: one model evaluated on every rank

    def on_epoch_end(self, epoch, logs=None):
        for c in self.counters:
            c.epoch_ended()
        # Whatever saves after it (a backup, a checkpoint, the program after fit): the
        # partial sums of a cycle that goes on are one state on every rank.
        _share_accumulators(self.model, self.team)
        self._share_statistics()

    def on_train_end(self, logs=None):
        self._share_statistics()

    def _share_statistics(self) -> None:
        """Once per stretch of training: validation, the epoch's end and the end of fit
        that follow one another find them shared already (the same batches on every
        rank, so every rank skips alike)."""
        if self.statistics and self._trained:
            share_statistics(self.model, self.team)
            self._trained = False


def _unwrapped(callback):
    return callback.inner if isinstance(callback, _Wrapper) else callback


class RankZeroBackup(_Wrapper):
    """A BackupAndRestore that writes on rank 0 only and restores one state everywhere."""

    def __init__(self, inner: keras.callbacks.BackupAndRestore, state: _FitStop, team: int):
        super().__init__(inner)
        self.state = state
        self.team = team
        self.writes = mc.get_rank() == 0

    def on_train_begin(self, logs=None):
        self.inner.on_train_begin(logs)  # every rank reads the backup, as Keras does
        # Keras keeps the restored epoch in the model (the one private attribute read
        # here; without it the check is skipped, the broadcast below still holds).
        low, high = _epoch_range(getattr(self.model, "_initial_epoch", 0) or 0, self.team)
        if low != high:
            raise MismatchError(
                f"BackupAndRestore: the ranks restored different epochs ({low} and {high}) "
                f"from {self.inner.backup_dir!r}: the backup directory must be on a file "
                "system that every rank sees (rank 0 writes it)"
            )
        broadcast_model_weights(self.model)  # one state on every rank, bit for bit

    def on_epoch_begin(self, epoch, logs=None):
        self.inner.on_epoch_begin(epoch, logs)

    def on_train_batch_end(self, batch, logs=None):
        if self.writes:
            self.inner.on_train_batch_end(batch, logs)

    def on_epoch_end(self, epoch, logs=None):
        # A stop in the middle of an epoch: Keras would record the epoch as done.
        if self.writes and (not self.state.stopped or self.state.epoch_complete):
            self.inner.on_epoch_end(epoch, logs)

    def on_train_end(self, logs=None):
        # After a stop the backup is what the next run resumes from: keep it.
        if self.writes and not self.state.stopped:
            self.inner.on_train_end(logs)


class RankZeroOnly(_Wrapper):
    """Forwards every event to `inner` on rank 0; nothing elsewhere (ModelCheckpoint)."""

    def __init__(self, inner: keras.callbacks.Callback):
        super().__init__(inner)
        self.active = mc.get_rank() == 0
        for name in _EVENTS:
            if self.active:
                setattr(self, name, getattr(inner, name))


class _SaveBatches:
    """A copy of the batch count of a ModelCheckpoint or BackupAndRestore with an integer
    `save_freq` (Keras's `_should_save_on_batch`: batch numbers restart each epoch and may
    jump by steps_per_execution), started from that callback's state, so that it finds
    the same batches on every rank. BackupAndRestore starts its last batch at 0 and sets
    it back to 0 at each epoch's end; ModelCheckpoint starts it at None and keeps it."""

    NONE = -1.0  # `last` None, in the agreement's table

    def __init__(self, every: int, since: int, last: int | None, backup: bool):
        self.every, self.since, self.last, self.backup = every, since, last, backup

    @classmethod
    def of(cls, callback) -> _SaveBatches:
        """The counter as `callback` has it now (its private attributes, read the same way
        by Keras 3's two callbacks; absent, the state of a new callback)."""
        backup = isinstance(callback, keras.callbacks.BackupAndRestore)
        since = getattr(callback, "_batches_seen_since_last_saving", 0)
        last = getattr(callback, "_last_batch_seen", 0 if backup else None)
        return cls(int(callback.save_freq), int(since), last, backup)

    def row(self) -> list[float]:
        """(kind, save_freq, batches since the last save, last batch) for the table."""
        last = self.NONE if self.last is None else self.last
        return [2.0 if self.backup else 1.0, self.every, self.since, last]

    @classmethod
    def from_row(cls, row) -> _SaveBatches:
        kind, every, since, last = (int(v) for v in row)
        return cls(every, since, None if last == cls.NONE else last, kind == 2)

    def due(self, batch: int) -> bool:
        self.since += batch + 1 if self.last is None or batch <= self.last else batch - self.last
        self.last = batch
        if self.since < self.every:
            return False
        self.since = 0
        return True

    def epoch_ended(self) -> None:
        if self.backup:
            self.last = 0


def _share_accumulators(model, team: int) -> None:
    optimizer = getattr(model, "optimizer", None)
    if optimizer is not None:
        share_accumulators(optimizer, team)


_SAVERS = (keras.callbacks.ModelCheckpoint, keras.callbacks.BackupAndRestore)

_EVENTS = tuple(
    name
    for name in dir(keras.callbacks.Callback)
    if name.startswith("on_") and callable(getattr(keras.callbacks.Callback, name))
)


def _epoch_range(epoch: int, team: int) -> tuple[int, int]:
    """(lowest, highest) epoch over the ranks (each rank's in its own slot of a sum)."""
    values = np.zeros(mc.get_nranks(), np.int64)
    values[mc.get_rank()] = epoch
    mc.allreduce_sum(values, team)
    return int(values.min()), int(values.max())


def fit_callbacks(callbacks: list, team: int, statistics: bool) -> list:
    """The callbacks `fit` runs at N ranks (see the module docstring); idempotent.
    statistics: average the model's statistics over the ranks (ShareState)."""
    if any(isinstance(c, StopTogether) for c in callbacks):
        stopper = next(c for c in callbacks if isinstance(c, StopTogether))
        callbacks = [c for c in callbacks if c is not stopper]
    else:
        stopper = StopTogether(team)
    _catch_signals()
    stopper.after_blocking_call = any(
        isinstance(c, GlobalMetrics) and c.per_batch and c.team in (None, team) for c in callbacks
    )
    stopper.agree_per_batch = any(
        _may_stop_after(c, ("on_train_batch_end", "on_batch_end")) for c in callbacks
    )
    stopper.agree_per_epoch = any(_may_stop_after(c, ("on_epoch_end",)) for c in callbacks)
    callbacks = [c for c in callbacks if not isinstance(c, ShareState)]
    out = [ShareState(team, statistics, callbacks)]
    for c in callbacks:
        if isinstance(c, keras.callbacks.BackupAndRestore):
            c = RankZeroBackup(c, stopper.state, team)
        elif isinstance(c, _WRITE_FILES):
            c = RankZeroOnly(c)
        out.append(c)
    out.append(stopper)
    return out


# Keras's callbacks with hooks after batches or epochs that never set stop_training,
# and ml_comm's own.
_NEVER_STOP = (
    keras.callbacks.History,
    keras.callbacks.ProgbarLogger,
    keras.callbacks.ModelCheckpoint,
    keras.callbacks.BackupAndRestore,
    keras.callbacks.CSVLogger,
    keras.callbacks.TensorBoard,
    keras.callbacks.LearningRateScheduler,
    keras.callbacks.ReduceLROnPlateau,
    GlobalMetrics,
    StopTogether,
    ShareState,
)


def _may_stop_after(callback, hooks: tuple[str, ...]) -> bool:
    """Whether `callback` overrides one of `hooks` and may set stop_training there
    (TerminateOnNaN and EarlyStopping do, a user's callback may); then the ranks agree
    on it after each such event. Without one, no collective is added."""
    if isinstance(callback, _Wrapper):
        return _may_stop_after(callback.inner, hooks)
    if isinstance(callback, _NEVER_STOP):
        return False
    base = keras.callbacks.Callback
    return any(getattr(type(callback), h) is not getattr(base, h) for h in hooks)


# Callbacks that write files: the same on every rank (global metrics, one set of
# weights), so rank 0 alone writes them, as one process would.
_WRITE_FILES = (
    keras.callbacks.ModelCheckpoint,
    keras.callbacks.CSVLogger,
    keras.callbacks.TensorBoard,
)


def _catch_signals() -> None:
    session = mc.session()
    if session.size > 1 and not session.guard.layout:
        return  # nothing would carry the request: signals keep their usual effect
    mc.catch_stop_signals()
