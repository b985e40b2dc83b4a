"""Settings of the core's agreement checks and stall watchdog, and the text of a failed request.

The core (csrc/agree/exchange.c, csrc/agree/watchdog.c) reads no environment: `init` reads
these four variables (their rows in settings.py) here, once, and hands the values to every
team through setters.

Every rank must run with the same values (mpiexec and srun pass the environment on).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .._core import ffi, lib
from . import settings
from .status import check

CHECK_LAYOUT = "ML_COMM_CHECK_LAYOUT"
CHECK_FINITE = "ML_COMM_CHECK_FINITE"
STALL_WARN = "ML_COMM_STALL_WARN_SECONDS"
STALL_ABORT = "ML_COMM_STALL_ABORT_SECONDS"
# A lost rank must not hold the job until its time limit, and one rank's evaluation or
# checkpoint while the others wait must not end it (docs/fault-tolerance-defaults.md).
DEFAULT_STALL_ABORT_SECONDS = 1800.0


@dataclass(frozen=True)
class GuardSettings:
    layout: bool = True
    finite: bool = False
    stall_warn: float = 60.0
    stall_abort: float = DEFAULT_STALL_ABORT_SECONDS


def from_env(env: Mapping[str, str] | None = None) -> GuardSettings:
    """The settings that the environment asks for; SettingsError names a malformed variable."""
    return GuardSettings(
        layout=settings.get(CHECK_LAYOUT, env),
        finite=settings.get(CHECK_FINITE, env),
        stall_warn=settings.get(STALL_WARN, env),
        stall_abort=settings.get(STALL_ABORT, env),
    )


def apply(handle, team: int, guard: GuardSettings) -> None:
    """Hand the settings to one team of the core (team: its number in messages)."""
    for rc, what in (
        (lib.mlc_team_set_checks(handle, guard.layout, guard.finite), "checks"),
        (lib.mlc_team_set_stall_limits(handle, guard.stall_warn, guard.stall_abort), "stall"),
        (lib.mlc_team_set_id(handle, team), "team id"),
    ):
        check(rc, f"setting the team's {what}")


def request_error(req, status: int, order: Sequence[int] | None = None, name: str = "") -> str:
    """The message of a failed request; with `order` (the caller's list index of each
    tensor of the request) the tensors a NaN/Inf or float16-overflow report names become
    `name[index]`."""
    text = ffi.string(lib.mlc_request_message(req)).decode(errors="replace")
    return name_tensors(text, status, order, name)


def name_tensors(text: str, status: int, order: Sequence[int] | None, name: str) -> str:
    """A core message with its "tensor T" (the request's layout) as `name[index]`."""
    if not text or order is None or status not in (lib.MLC_ERR_NONFINITE, lib.MLC_ERR_OVERFLOW):
        return text or ffi.string(lib.mlc_status_name(status)).decode()

    def user_index(match: re.Match) -> str:
        position = int(match.group(2))
        index = order[position] if position < len(order) else position
        return f"{match.group(1)}{name}[{index}]"

    # NaN/Inf: "rank R tensor T", each rank's; float16 overflow: "the sum of tensor T".
    return re.sub(r"(rank \d+ |the sum of )tensor (\d+)", user_index, text)
