"""Global metrics for the Keras hook: what `fit`, `evaluate` and `validation_data` report is
what one process over all ranks' data would report.

Keras metrics keep running states (a Mean keeps `total` and `count`, a confusion-matrix
metric its counts) whose variables declare how replicas combine them (`aggregation`,
"sum" for every built-in metric, as `tf.distribute` uses them). Summing each state over
the ranks and asking the model for `get_metrics_result()` again therefore gives the
metric of the union of the ranks' data, weighted by the samples each rank saw (the loss
tracker is weighted by batch size), whatever the shards' sizes. That costs one allreduce
of a few numbers per evaluation and per training epoch, none per step.

When it happens (GlobalMetrics, put first in the callbacks of `fit` and `evaluate`):
at the end of `evaluate` (before the progress bar prints), and for `fit` at the end of
each epoch, or, when the epoch has validation, just before `evaluate` resets the
training states. During an epoch the progress bar shows rank 0's running values unless
`per_batch=True` (one more small allreduce per step: the logs averaged over the ranks).
"""

from __future__ import annotations

import numbers

import keras
import numpy as np

from .. import api as mc
from ..core.errors import MismatchError
from .teams import team_of

# Why ranks meet in different places of an epoch.
APART = (
    "the ranks ran different numbers of steps, or one left the epoch early (an exception "
    "there that its program caught: its own messages say which)"
)


def sum_metric_states(model, team: int) -> dict:
    """Replace the model's metric states by their sum (or mean) over all ranks, in one
    reduction; returns the model's metrics computed from them (collective)."""
    variables = [v for m in model.metrics for v in m.variables]
    summed = [v for v in variables if v.aggregation != "mean"]
    meaned = [v for v in variables if v.aggregation == "mean"]
    ordered = summed + meaned
    if ordered:
        flat = np.concatenate([np.asarray(v.numpy(), np.float64).reshape(-1) for v in ordered])
        mc.allreduce_sum(flat, team)
        offset = 0
        nranks = mc.get_nranks()
        for i, v in enumerate(ordered):
            size = int(np.prod(v.shape))
            part = flat[offset : offset + size]
            offset += size
            if i >= len(summed):
                part = part / nranks
            v.assign(part.reshape(tuple(v.shape)).astype(v.dtype))
    return _python(model.get_metrics_result())


def _python(logs: dict) -> dict:
    out = {}
    for key, value in logs.items():
        value = np.asarray(value)
        out[key] = float(value) if value.ndim == 0 else value
    return out


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


class GlobalMetrics(keras.callbacks.Callback):
    """Makes the logs of `fit` and `evaluate` global (see the module's docstring).

    The Keras hook puts one in front of the callbacks of every `fit` and `evaluate`; pass
    your own instance to change `per_batch` (True: every batch's logs averaged over the
    ranks, one small allreduce per step). `team`: the team that reduces the metrics
    (default: the model's)."""

    def __init__(self, per_batch: bool = False, team: int | None = None):
        super().__init__()
        self.per_batch = per_batch
        self.team = team
        self.epoch = 0
        self.step = 0  # training steps finished in the current epoch
        self.in_epoch = False
        self.epochs_ended = 0
        self._train_results: dict | None = None
        self.test_results: dict | None = None
        # This rank's evaluate has no rows (its shard of a small validation set): Keras
        # counts a phantom batch there (no loss, a batch size of samples), left out.
        self.no_test_rows = False

    def _team(self) -> int:
        if self.team is not None:
            return self.team
        return team_of(self.model, default=0)  # the model's team (set_team), else 0

    def on_train_begin(self, logs=None):
        # An instance passed to several fit calls says where this one is.
        self.step, self.in_epoch, self.epochs_ended = 0, False, 0

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch, self.step, self.in_epoch = epoch, 0, True
        self._train_results = None

    def on_train_batch_end(self, batch, logs=None):
        self.step += 1
        if self.per_batch:
            average_logs(logs, self._team())

    def on_test_begin(self, logs=None):
        # Validation inside fit: evaluate resets the metrics next; keep the epoch's.
        if self.in_epoch and self._train_results is None:
            self._train_results = self._sync_train()

    def on_test_end(self, logs=None):
        if self.no_test_rows:
            self.model.reset_metrics()
        self.test_results = sum_metric_states(self.model, self._team())
        if logs is not None:
            logs.update(self.test_results)

    def on_epoch_end(self, epoch, logs=None):
        if self._train_results is None:
            self._train_results = self._sync_train()
        self.in_epoch = False
        self.epochs_ended += 1
        if logs is not None:
            for key, value in self._train_results.items():
                if key in logs:
                    logs[key] = value

    def _sync_train(self) -> dict:
        try:
            return sum_metric_states(self.model, self._team())
        except MismatchError as exc:
            error = MismatchError(
                f"rank {mc.get_rank()} ran {self.step} steps of epoch {self.epoch + 1} and "
                f"ended the epoch, but another rank was still in a training step: {APART} "
                f"({exc})"
            )
            error.says_where = True  # fit's wrapper adds nothing
            raise error from exc


class MetricAverage(GlobalMetrics):
    """The former name of GlobalMetrics (per_batch was its default then)."""

    def __init__(self, per_batch: bool = True, team: int | None = None):
        super().__init__(per_batch=per_batch, team=team)
