"""Horovod's Keras callbacks for Keras 3: broadcast, metric averaging and learning-rate
warmup/schedules."""

from __future__ import annotations

import warnings

import keras
import numpy as np
import tensorflow as tf

from . import basics
from .functions import broadcast_variables
from .ops import Average, grouped_allreduce


class BroadcastGlobalVariablesCallback(keras.callbacks.Callback):
    """Broadcast root_rank's model (and optimizer) variables before training and again
    after the first batch, when the optimizer's variables exist; local_variables (a
    variable or a list of them) keep each rank's own values."""

    def __init__(self, root_rank, device="", local_variables=None):
        super().__init__()
        self.root_rank = root_rank
        self.broadcast_done = False
        if local_variables is None:
            local_variables = []
        elif isinstance(local_variables, (tf.Variable, keras.Variable)):
            local_variables = [local_variables]
        local_variables = list(local_variables)
        for v in local_variables:
            if not isinstance(v, (tf.Variable, keras.Variable)):
                raise ValueError(f"local_variables must be variables, got a {type(v).__name__}")
        self.local_variables = local_variables

    def _broadcast(self):
        variables = list(self.model.variables)
        optimizer = getattr(self.model, "optimizer", None)
        if optimizer is not None and optimizer.built:
            variables += list(optimizer.variables)
        shared = [v for v in variables if not any(v is local for local in self.local_variables)]
        broadcast_variables(shared, self.root_rank)

    def on_train_begin(self, logs=None):
        self._broadcast()

    def on_train_batch_end(self, batch, logs=None):
        if not self.broadcast_done:
            self._broadcast()
            self.broadcast_done = True


class MetricAverageCallback(keras.callbacks.Callback):
    """At each epoch's end, replace the numeric logs by their averages over all ranks
    (the same keys, in sorted order, on every rank)."""

    def __init__(self, device=""):
        super().__init__()

    def on_epoch_end(self, epoch, logs=None):
        if not logs:
            return
        names = sorted(k for k, v in logs.items() if np.ndim(v) == 0)
        values = [tf.constant(float(logs[k]), tf.float64) for k in names]
        for k, v in zip(names, grouped_allreduce(values, op=Average)):
            logs[k] = float(v.numpy())


class LearningRateScheduleCallback(keras.callbacks.Callback):
    """lr = initial_lr * multiplier(epoch) for start_epoch <= epoch < end_epoch; with
    staircase=False the epoch is fractional and the rate changes every batch.

    momentum_correction: Horovod rescales an SGD optimizer's momentum with the rate; Keras
    3 optimizers fix momentum when a step is traced, so it is left as it is. None (the
    default, Horovod's True) says nothing; True with an optimizer that has momentum warns
    once, on rank 0, since the training then differs from Horovod's."""

    def __init__(
        self,
        initial_lr,
        multiplier,
        start_epoch=0,
        end_epoch=None,
        staircase=True,
        momentum_correction=None,
        steps_per_epoch=None,
    ):
        super().__init__()
        self.initial_lr = initial_lr
        self.multiplier = multiplier if callable(multiplier) else (lambda epoch: multiplier)
        self.start_epoch = start_epoch
        self.end_epoch = end_epoch
        self.staircase = staircase
        self.steps_per_epoch = steps_per_epoch
        self.current_epoch = None
        self.momentum_correction = momentum_correction

    def _in_range(self, epoch) -> bool:
        return epoch >= self.start_epoch and (self.end_epoch is None or epoch < self.end_epoch)

    def _set(self, epoch):
        self.model.optimizer.learning_rate = self.initial_lr * self.multiplier(epoch)

    def on_train_begin(self, logs=None):
        momentum = float(getattr(self.model.optimizer, "momentum", 0.0) or 0.0)
        if self.momentum_correction and momentum and basics.rank() == 0:
            warnings.warn(
                f"momentum_correction=True: the optimizer's momentum ({momentum:g}) is not "
                "rescaled with the learning rate (Keras 3 optimizers fix it when a step is "
                "traced), unlike under Horovod",
                stacklevel=2,
            )
            self.momentum_correction = None  # once
        if self.initial_lr is None:
            self.initial_lr = float(keras.ops.convert_to_numpy(self.model.optimizer.learning_rate))
        if self.steps_per_epoch is None:
            self.steps_per_epoch = self.params.get("steps")

    def on_epoch_begin(self, epoch, logs=None):
        self.current_epoch = epoch
        if self.staircase and self._in_range(epoch):
            self._set(epoch)

    def on_train_batch_begin(self, batch, logs=None):
        if self.staircase or not self._in_range(self.current_epoch):
            return
        if not self.steps_per_epoch:
            raise ValueError(
                "LearningRateScheduleCallback(staircase=False) needs steps_per_epoch when "
                "fit cannot tell the number of steps"
            )
        self._set(self.current_epoch + batch / self.steps_per_epoch)

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:
            logs["lr"] = float(keras.ops.convert_to_numpy(self.model.optimizer.learning_rate))


class LearningRateWarmupCallback(LearningRateScheduleCallback):
    """Ramp the rate from initial_lr / size to initial_lr over warmup_epochs, batch by
    batch (the large-batch warmup of Goyal et al.)."""

    def __init__(
        self, initial_lr, warmup_epochs=5, momentum_correction=None, steps_per_epoch=None, verbose=0
    ):
        self.warmup_epochs = warmup_epochs
        self.verbose = verbose

        def multiplier(epoch):
            n = basics.size()
            return (epoch * (n - 1) / warmup_epochs + 1) / n

        super().__init__(
            initial_lr,
            multiplier,
            start_epoch=0,
            end_epoch=warmup_epochs,
            staircase=False,
            momentum_correction=momentum_correction,
            steps_per_epoch=steps_per_epoch,
        )

    def on_epoch_end(self, epoch, logs=None):
        super().on_epoch_end(epoch, logs)
        if epoch == self.warmup_epochs - 1:
            self.model.optimizer.learning_rate = self.initial_lr
            if self.verbose and basics.rank() == 0:
                print(
                    f"\nEpoch {epoch + 1}: finished gradual learning rate warmup to "
                    f"{self.initial_lr:g}."
                )


class BestModelCheckpoint(keras.callbacks.ModelCheckpoint):
    """ModelCheckpoint that keeps the best model only (by monitor)."""

    def __init__(
        self, monitor="val_loss", verbose=0, mode="auto", save_freq="epoch", filepath="model.keras"
    ):
        super().__init__(
            filepath=filepath,
            monitor=monitor,
            verbose=verbose,
            save_best_only=True,
            save_weights_only=False,
            mode=mode,
            save_freq=save_freq,
        )
