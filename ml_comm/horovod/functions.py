"""Horovod's helpers on variables and Python objects: broadcast_variables,
broadcast_object, allgather_object. Objects travel pickled over the session's
communicator with mpi4py."""

from __future__ import annotations

import tensorflow as tf

from . import basics
from .ops import _broadcast_list, check_process_set, global_process_set


def broadcast_variables(variables, root_rank, process_set=global_process_set, inplace=False):
    """Assign root_rank's values to every variable (any dtype), in one call per dtype."""
    check_process_set(process_set)
    variables = list(variables)
    if not variables:
        return None
    values = _broadcast_list([tf.convert_to_tensor(v) for v in variables], root_rank)
    assigns = [v.assign(value) for v, value in zip(variables, values)]
    if tf.executing_eagerly():
        return None
    return tf.group(*assigns)


def broadcast_object(obj, root_rank=0, session=None, name=None, process_set=global_process_set):
    """root_rank's picklable object on every rank (eagerly)."""
    check_process_set(process_set)
    s = basics.session()
    root = s.check_root(root_rank)
    s.weights.shared()  # scripts also share weights this way: get_weights, set_weights
    return s.comm.bcast(obj, root=root)


def broadcast_object_fn(root_rank=0, session=None, name=None, process_set=global_process_set):
    """A function that broadcasts its argument from root_rank (Horovod's graph-mode helper)."""
    check_process_set(process_set)

    def _broadcast(obj):
        return broadcast_object(obj, root_rank)

    return _broadcast


def allgather_object(obj, session=None, name=None, process_set=global_process_set):
    """Every rank's picklable object, as a list in rank order."""
    check_process_set(process_set)
    return basics.session().comm.allgather(obj)
