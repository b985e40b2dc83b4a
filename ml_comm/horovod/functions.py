"""Horovod's helpers on variables and Python objects: broadcast_variables,
broadcast_object, allgather_object. Objects travel pickled over the session's
communicator with mpi4py.

An object is pickled before it travels, by the rank that owns it, and what failed travels
instead of it, as does a process set that a rank's call names and ml_comm.horovod does
not have: the other ranks would otherwise wait in the collective for good (the session's
watchdogs see team operations, not these). broadcast_object's one allgather also carries
each rank's root, so that a root that differs between ranks is found too."""

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


def _unsupported(process_set) -> str:
    """Why ml_comm.horovod cannot take process_set ("" where it can), to travel."""
    try:
        check_process_set(process_set)
    except NotImplementedError as exc:
        return str(exc)
    return ""


def _check_everyone(what: str, unsupported: list[str]) -> None:
    """Every rank raises where any rank's process set was unsupported, naming those ranks."""
    bad = [f"rank {r}: {why}" for r, why in enumerate(unsupported) if why]
    if bad:
        raise NotImplementedError(f"{what}: " + "; ".join(bad))


def broadcast_variables(variables, root_rank, process_set=global_process_set, inplace=False):
    """Assign root_rank's values to every variable (any dtype), in one call per dtype."""
    variables = list(variables)
    if not variables:
        check_process_set(process_set)
        return None
    values = _broadcast_list(variables, root_rank, process_set, "broadcast_variables' variables")
    assigns = [v.assign(value) for v, value in zip(variables, values)]
    if tf.executing_eagerly():
        return None
    return tf.group(*assigns)


def broadcast_object(obj, root_rank=0, session=None, name=None, process_set=global_process_set):
    """root_rank's picklable object on every rank (eagerly)."""
    s = basics.session()
    try:
        root, bad_root = s.check_root(root_rank), ""
    except BadArgumentError as exc:
        root, bad_root = -1, str(exc)
    payload, why = _pickled(obj) if s.rank == root else (None, "")
    # One collective: every rank's root (and what was wrong with it), the root's pickle.
    everyone = s.comm.allgather((root, bad_root, payload, why, _unsupported(process_set)))
    _check_everyone("broadcast_object", [e[4] for e in everyone])
    bad = [f"rank {r}: {e[1]}" for r, e in enumerate(everyone) if e[1]]
    if bad:
        raise BadArgumentError("broadcast_object: " + "; ".join(bad))
    if len({r for r, *_ in everyone}) > 1:
        named = ", ".join(f"rank {r}: {e[0]}" for r, e in enumerate(everyone))
        raise MismatchError(f"broadcast_object: the ranks name different roots ({named})")
    _, _, payload, why, _ = everyone[root]
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
    gathered = basics.session().comm.allgather((*_pickled(obj), _unsupported(process_set)))
    _check_everyone("allgather_object", [unsupported for _, _, unsupported in gathered])
    bad = [f"rank {r}: {why}" for r, (_, why, _) in enumerate(gathered) if why]
    if bad:
        raise BadArgumentError(
            "allgather_object: objects that cannot be pickled: " + "; ".join(bad)
        )
    return [pickle.loads(payload) for payload, _, _ in gathered]
