"""The op library and the teams its ops may use: loading (building it on first use),
the live teams' ids and handles, and the chain that keeps a team's ops in one order
on every rank in a graph. Shared by the gradient and broadcast ops (__init__.py) and
the collectives (collectives.py)."""

from __future__ import annotations

import ctypes
import itertools
import weakref
from collections.abc import Sequence

import tensorflow as tf

from .._core import ffi
from ..core.errors import MLCommError
from . import build, unordered

_ops = None
_lib: ctypes.CDLL | None = None
_group_keys = itertools.count(1)
_team_ids = itertools.count(1)  # never reused, unlike the teams' addresses
# Per graph and team: the op that the next keyed group must wait for (see _chain).
_last_anchor: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
# The live teams, by team number: (the id their ops carry, the core's handle).
_live: list[tuple[int, object]] = []


def load_ops(say: build.Say | None = None):
    """Load (building if needed, with notice and progress to `say`) the op library;
    idempotent."""
    global _ops, _lib
    if _ops is None:
        path = build.build(say=say)
        unordered.install()  # submits run as their gradients appear (see unordered.py)
        _ops = tf.load_op_library(str(path))
        _lib = ctypes.CDLL(str(path))
        _lib.mlc_tf_set_live_teams.argtypes = [
            ctypes.POINTER(ctypes.c_int64),
            ctypes.POINTER(ctypes.c_size_t),
            ctypes.c_int,
        ]
        _lib.mlc_tf_reset_pipelines.argtypes = [ctypes.c_int64]
    return _ops


def reset_pipelines(team_id: int) -> None:
    """config_team: the team's pipelines count their calls afresh."""
    if _lib is not None:
        _lib.mlc_tf_reset_pipelines(team_id)


def set_live_teams(handles: Sequence[int]) -> list[int]:
    """Register the teams whose ops may run (init), or none (finalize).

    Returns the ids that the ops carry; a graph built for earlier teams then fails
    with a message, even when a new team happens to reuse an old one's address.
    """
    ids = [next(_team_ids) for _ in handles]
    _live[:] = [(i, ffi.cast("mlc_team *", h)) for i, h in zip(ids, handles)]
    if _lib is not None:
        n = max(len(handles), 1)
        _lib.mlc_tf_set_live_teams(
            (ctypes.c_int64 * n)(*ids), (ctypes.c_size_t * n)(*handles), len(handles)
        )
    return ids


def live_team(team: int):
    """(op id, core handle) of live team number `team`, or None."""
    return _live[team] if type(team) is int and 0 <= team < len(_live) else None


def team_number(team_id: int) -> int:
    """The team number whose ops carry team_id."""
    for number, (i, _handle) in enumerate(_live):
        if i == team_id:
            return number
    raise MLCommError("ml_comm: this op belongs to a team that no longer exists")


def _chain(team_handle: int):
    """Control dependencies that keep this team's groups in one order on every rank.

    Groups of one team must open in the same order on all ranks; TensorFlow may
    run independent ops in any order, so each new group waits for the first
    member of the previous one in the same graph (in a tf.compat.v1 graph, for all
    of it: a list of ops).
    """
    graph = tf.compat.v1.get_default_graph()
    anchors = _last_anchor.setdefault(graph, {})
    previous = anchors.get(team_handle)
    if previous is None:
        return []
    return list(previous) if isinstance(previous, list) else [previous]
