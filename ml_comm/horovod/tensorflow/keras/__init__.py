"""`horovod.tensorflow.keras` on ml_comm, for Keras 3 ([Coming from Horovod](horovod.md))."""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from ... import basics, keras3, ops
from ...basics import *  # noqa: F403  (the process queries and build flags)
from ...compression import Compression
from ...ops import (
    Average,
    ProcessSet,
    Sum,
    add_process_set,
    global_process_set,
    remove_process_set,
)
from ...surface import broadcast_global_variables
from ...training import DistributedOptimizer as _distributed_optimizer
from . import callbacks, elastic

K = keras.backend
keras3.install()


def DistributedOptimizer(
    optimizer,
    name=None,
    device_dense="",
    device_sparse="",  # noqa: N802
    compression=Compression.none,
    sparse_as_dense=False,
    gradient_predivide_factor=1.0,
    op=Average,
    backward_passes_per_step=1,
    average_aggregated_gradients=False,
    num_groups=0,
    groups=None,
    process_set=global_process_set,
    scale_local_gradients=True,
):
    """The same Keras optimizer, reducing its gradients over all ranks (see
    ml_comm.horovod.tensorflow.DistributedOptimizer)."""
    # Horovod's Keras order of ml_comm.horovod.tensorflow's parameters, passed on by name.
    return _distributed_optimizer(**locals())


def allreduce(
    value,
    name=None,
    average=None,
    prescale_factor=1.0,
    postscale_factor=1.0,
    op=None,
    compression=Compression.none,
):
    """A NumPy value reduced over all ranks (op: Average unless average/op say otherwise)."""
    return ops.allreduce(
        tf.constant(value),
        name=name,
        average=average,
        op=op,
        compression=compression,
        prescale_factor=prescale_factor,
        postscale_factor=postscale_factor,
    ).numpy()


def allgather(value, name=None):
    """Every rank's NumPy value concatenated along the first dimension."""
    return ops.allgather(tf.constant(value)).numpy()


def broadcast(value, root_rank, name=None):
    """root_rank's NumPy value on every rank."""
    return ops.broadcast(tf.constant(value), root_rank).numpy()


def reducescatter(value, name=None, op=Average):
    """This rank's part of the reduction of a NumPy value."""
    return ops.reducescatter(tf.constant(value), op=op).numpy()


def load_model(
    filepath,
    custom_optimizers=None,
    custom_objects=None,
    compression=Compression.none,
    legacy_opts=False,
):
    """keras.models.load_model, with the model's optimizer made distributed."""
    objects = dict(custom_objects or {})
    for cls in custom_optimizers or []:
        objects[cls.__name__] = cls
    model = keras.models.load_model(filepath, custom_objects=objects or None)
    if getattr(model, "optimizer", None) is not None:
        DistributedOptimizer(model.optimizer, compression=compression)
    return model


# Every public name, listed (the API reference reads this statically).
__all__ = [
    *basics.__all__,
    "Average",
    "Compression",
    "DistributedOptimizer",
    "ProcessSet",
    "Sum",
    "add_process_set",
    "allgather",
    "allreduce",
    "broadcast",
    "broadcast_global_variables",
    "global_process_set",
    "load_model",
    "reducescatter",
    "remove_process_set",
]
del np
