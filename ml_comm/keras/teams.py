"""Which team each model trains on: `set_team`'s choices, read by the fit wrappers and
the global metrics."""

from __future__ import annotations

import weakref

_teams: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # set_team's choices


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
