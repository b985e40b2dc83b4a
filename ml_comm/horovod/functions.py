"""Horovod's helpers on variables and Python objects: broadcast_variables,
broadcast_object, allgather_object. Objects travel pickled over the session's
communicator with mpi4py.

An object is pickled before it travels, by the rank that owns it, and what failed travels
instead of it: the other ranks would otherwise wait in the collective for good (the
session's watchdogs see team operations, not these). A root that differs between ranks is
found the same way, by one small allgather first."""

from __future__ import annotations

import pickle

import tensorflow as tf

from ..core.errors import BadArgumentError, MismatchError
from . import basics
from .ops import _broadcast_list, check_process_set, global_process_set


def _pickled(obj) -> tuple[bytes | None, str]:
    """obj's pickle, or why there is none."""
    try:
        return pickle.dumps(obj, pickle.HIGHEST_PROTOCOL), ""
    except Exception as exc:  # noqa: BLE001 - every rank must hear of it
        return None, f"{type(exc).__name__}: {exc}"


def _agreed_root(s, root_rank, what: str) -> int:
    """root_rank, checked on this rank and compared across the ranks (collective)."""
    try:
        root, why = s.check_root(root_rank), ""
    except BadArgumentError as exc:
        root, why = -1, str(exc)
    roots = s.comm.allgather((root, why))
    bad = [f"rank {r}: {w}" for r, (_, w) in enumerate(roots) if w]
    if bad:
        raise BadArgumentError(f"{what}: " + "; ".join(bad))
    if len({r for r, _ in roots}) > 1:
        named = ", ".join(f"rank {r}: {root}" for r, (root, _) in enumerate(roots))
        raise MismatchError(f"{what}: the ranks name different roots ({named})")
    return root


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
    root = _agreed_root(s, root_rank, "broadcast_object")
    payload, why = _pickled(obj) if s.rank == root else (None, "")
    payload, why = s.comm.bcast((payload, why), root=root)
    if why:
        raise BadArgumentError(f"broadcast_object: rank {root}'s object cannot be pickled: {why}")
    s.weights.shared()  # scripts also share weights this way: get_weights, set_weights
    return pickle.loads(payload)


def broadcast_object_fn(root_rank=0, session=None, name=None, process_set=global_process_set):
    """A function that broadcasts its argument from root_rank (Horovod's graph-mode helper)."""
    check_process_set(process_set)

    def _broadcast(obj):
        return broadcast_object(obj, root_rank)

    return _broadcast


def allgather_object(obj, session=None, name=None, process_set=global_process_set):
    """Every rank's picklable object, as a list in rank order."""
    check_process_set(process_set)
    gathered = basics.session().comm.allgather(_pickled(obj))
    bad = [f"rank {r}: {why}" for r, (_, why) in enumerate(gathered) if why]
    if bad:
        raise BadArgumentError(
            "allgather_object: objects that cannot be pickled: " + "; ".join(bad)
        )
    return [pickle.loads(payload) for payload, _ in gathered]
