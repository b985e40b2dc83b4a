"""horovod.tensorflow.elastic with fixed membership: `run` calls the function once
after synchronising its state from rank 0; ranks never join or leave a running
job. Preemption is handled by ml_comm's stop-and-requeue (docs/faults.md)."""

from __future__ import annotations

import copy
import functools

import tensorflow as tf

from ..basics import init, rank, shutdown  # noqa: F401  (Horovod's names here)
from ..functions import broadcast_object, broadcast_object_fn, broadcast_variables  # noqa: F401


class HorovodInternalError(RuntimeError):
    """Horovod raises it when a collective fails in an elastic job; ml_comm aborts the job
    instead (every rank gets the error), so it is never raised here."""


class HostsUpdatedInterrupt(RuntimeError):
    """Horovod raises it when hosts join or leave; membership is fixed here."""


def run(func):
    """Decorator: call func(state, ...) once, after state.sync()."""

    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        state.sync()
        return func(state, *args, **kwargs)

    return wrapper


run_fn = run


class ObjectState:
    """Named Python attributes kept in step across ranks: sync broadcasts rank 0's,
    commit saves them, restore goes back to the last commit."""

    def __init__(self, bcast_object=None, get_rank=None, **kwargs):
        self._saved = dict(kwargs)
        self._reset_callbacks = []
        for name, value in kwargs.items():
            setattr(self, name, value)

    def register_reset_callbacks(self, callbacks):
        self._reset_callbacks.extend(callbacks)

    def on_reset(self):
        for callback in self._reset_callbacks:
            callback()

    def save(self):
        self._saved = {name: copy.deepcopy(getattr(self, name)) for name in self._saved}

    def restore(self):
        for name, value in self._saved.items():
            setattr(self, name, copy.deepcopy(value))

    def sync(self):
        if self._saved:
            values = broadcast_object({name: getattr(self, name) for name in self._saved}, 0)
            for name, value in values.items():
                setattr(self, name, value)
            self.save()

    def commit(self):
        self.save()
        self.check_host_updates()

    def check_host_updates(self):
        """Membership is fixed: there is never a host update to act on."""


class TensorFlowKerasState(ObjectState):
    """A Keras model (and optimizer) plus attributes; sync broadcasts rank 0's weights,
    optimizer variables and attributes."""

    def __init__(self, model, optimizer=None, backend=None, **kwargs):
        self.model = model
        self.optimizer = optimizer if optimizer is not None else getattr(model, "optimizer", None)
        super().__init__(**kwargs)
        self._weights = None

    def _variables(self):
        variables = list(self.model.variables)
        if self.optimizer is not None:
            variables += list(self.optimizer.variables)
        return variables

    def save(self):
        self._weights = [v.numpy() for v in self._variables()]
        super().save()

    def restore(self):
        if self._weights is not None:
            for v, value in zip(self._variables(), self._weights):
                v.assign(value)
        super().restore()

    def sync(self):
        broadcast_variables(self._variables(), root_rank=0)
        super().sync()


class TensorFlowState(ObjectState):
    """A list of tf.Variables plus attributes."""

    def __init__(self, variables=None, session=None, **kwargs):
        self.variables = (
            list(variables) if variables is not None else list(tf.compat.v1.global_variables())
        )
        super().__init__(**kwargs)
        self._values = None

    def save(self):
        self._values = [v.numpy() for v in self.variables]
        super().save()

    def restore(self):
        if self._values is not None:
            for v, value in zip(self.variables, self._values):
                v.assign(value)
        super().restore()

    def sync(self):
        broadcast_variables(self.variables, root_rank=0)
        super().sync()
