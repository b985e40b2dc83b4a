"""Which team each model trains on: `set_team`'s choices, read by the fit wrappers and
the global metrics; and which thread trains on each team now (driving)."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager

from .. import api
from ..api import session
from ..core.calls import waiting_on
from ..core.errors import StateError

_teams: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # set_team's choices
_drivers: dict[int, tuple[threading.Thread, int]] = {}  # team -> (thread, depth)
_drivers_lock = threading.Lock()


def team_of(model, default=0):
    """The model's team: set_team's choice (None: opted out), else `default`."""
    if model is None:
        return default
    return _teams.get(model, default)


def set_model_team(model, team: int | None) -> None:
    _teams[model] = team


def forget_all() -> None:
    """finalize: the choices go with the session."""
    _teams.clear()
    with _drivers_lock:
        _drivers.clear()


@contextmanager
def driving(team: int | None) -> Iterator[None]:
    """This thread's fit, evaluate or train_on_batch on `team` (None: opted out, no
    team). A traced step's ops carry no thread, so two threads' steps on one team would
    pair one thread's gradients with another's on another rank, in silence: a second
    thread raises at once instead, as two threads' calls of the API on one team do. While
    it runs, this rank counts as waiting inside ml_comm for the deadlock check."""
    if team is None:
        yield
        return
    me = threading.current_thread()
    with _drivers_lock:
        owner, depth = _drivers.get(team, (me, 0))
        if owner is not me:
            raise StateError(
                f"team {team} is in use by thread '{owner.name}' on this rank: one thread at "
                f"a time drives a team (thread '{me.name}' needs a team of its own: "
                "init(nteams=...) and ml_comm.keras.set_team(model, team))"
            )
        _drivers[team] = (me, depth + 1)
    try:
        if depth:
            yield
        else:
            s = session()
            with waiting_on(
                s.team(team), alive=lambda: api.is_initialized() and api.session() is s
            ):
                yield
    finally:
        with _drivers_lock:
            owner, depth = _drivers.pop(team, (me, 1))
            if depth > 1:
                _drivers[team] = (owner, depth - 1)
