"""The op library and the teams its ops may use: loading (building it on first use),
the session whose teams are live (its registry: core/session.py, Session.teams and
team_ids), and the chain that keeps a team's ops in one order on every rank in a graph.
Shared by the gradient and broadcast ops (__init__.py) and the collectives
(collectives.py)."""

from __future__ import annotations

import ctypes
import itertools
import weakref

import tensorflow as tf

from .._core import ffi
from ..core.errors import StateError
from . import build, unordered

_ops = None
_lib: ctypes.CDLL | None = None
_group_keys = itertools.count(1)
# Per graph and team: the op that the next keyed group must wait for (see _chain).
_last_anchor: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
# The session whose teams the ops may use (the backend's, from init to finalize), or None.
_live = None
# Per team id: the training steps begun on the team, for its pipelined op (step_counter).
_step_counters: dict[int, tf.Variable] = {}


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
        _lib.mlc_tf_status_payload.restype = ctypes.c_char_p
        _lib.mlc_tf_error_code.argtypes = [ctypes.c_int]
        _mirror_live()
    return _ops


def status_payload() -> str:
    """The key of the payload in which the ops' errors carry the core's status."""
    load_ops()
    return _lib.mlc_tf_status_payload().decode()


def error_code(status: int) -> int:
    """The TensorFlow error code (tf.errors.*) of the ops' errors of a core status."""
    load_ops()
    return _lib.mlc_tf_error_code(status)


def reset_pipelines(team_id: int) -> None:
    """config_team: the team's pipelines count their calls afresh."""
    if _lib is not None:
        _lib.mlc_tf_reset_pipelines(team_id)


def set_live(session) -> None:
    """Let the ops run on `session`'s teams (init), or on none (None: finalize), so that
    a graph built for earlier teams fails with a message, even when a new team reuses an
    old one's address (the ops carry the team's id, never reused)."""
    global _live
    _live = session
    if session is None:
        _step_counters.clear()
    _mirror_live()


def _mirror_live() -> None:
    """The op library's table of live teams (ops/ml_comm_ops.cc) as the session's."""
    if _lib is None:
        return
    ids = _live.team_ids if _live is not None else []
    handles = [int(ffi.cast("uintptr_t", t)) for t in _live.teams] if _live is not None else []
    n = max(len(ids), 1)
    _lib.mlc_tf_set_live_teams(
        (ctypes.c_int64 * n)(*ids), (ctypes.c_size_t * n)(*handles), len(ids)
    )


def live_team(team: int):
    """(the id its ops carry, the core's handle) of live team number `team`, or None."""
    if _live is None or type(team) is not int or not 0 <= team < len(_live.teams):
        return None
    return _live.team_ids[team], _live.teams[team]


def handle_of(team_id: int):
    """The core's handle of the live team whose ops carry team_id, or None."""
    if _live is not None and team_id in _live.team_ids:
        return _live.teams[_live.team_ids.index(team_id)]
    return None


def team_number(team_id: int) -> int:
    """The team number whose ops carry team_id."""
    if _live is not None and team_id in _live.team_ids:
        return _live.team_ids.index(team_id)
    raise StateError("ml_comm: this op belongs to a team that no longer exists")


def step_counter(team_id: int) -> tf.Variable:
    """The number of training steps begun on the team (count_step), which a traced
    pipelined op reads: its requests carry it, so that a rank whose step failed before the
    op ran is found behind at its next step instead of pairing that step's gradients with
    the others' current ones. Stays 0 (nothing carried) where no one counts the steps."""
    counter = _step_counters.get(team_id)
    if counter is None:
        # Eager (also from inside a tf.function being traced), on the host, as the op.
        with tf.init_scope(), tf.device("/CPU:0"):
            counter = tf.Variable(0, dtype=tf.int64, trainable=False, name="ml_comm_steps")
        _step_counters[team_id] = counter
    return counter


def counted_steps(team_id: int) -> int:
    """The team's count of training steps now (an eager call's), 0 where none counts."""
    counter = _step_counters.get(team_id)
    return 0 if counter is None else int(counter.numpy())


def count_step(team: int) -> None:
    """A training step on live team number `team` begins (ml_comm.keras, before each)."""
    live = live_team(team)
    if live is not None:
        step_counter(live[0]).assign_add(1, read_value=False)  # 18 us, against 27 us read


def _chain(team_id: int):
    """Control dependencies that keep this team's groups in one order on every rank.

    Groups of one team must open in the same order on all ranks; TensorFlow may
    run independent ops in any order, so each new group waits for the first
    member of the previous one in the same graph (in a tf.compat.v1 graph, for all
    of it: a list of ops).
    """
    graph = tf.compat.v1.get_default_graph()
    anchors = _last_anchor.setdefault(graph, {})
    previous = anchors.get(team_id)
    if previous is None:
        return []
    return list(previous) if isinstance(previous, list) else [previous]
