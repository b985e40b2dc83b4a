"""Settings of the core's agreement checks and stall watchdog, and the text of a failed request.

The core (csrc/agree/exchange.c, csrc/agree/watchdog.c) reads no environment: `init` reads it
here, once, and hands the values to every team through setters.

    ML_COMM_CHECK_LAYOUT=0         no signature exchange before each request (default 1)
    ML_COMM_CHECK_FINITE=1         fail reductions whose input holds NaN/Inf (default 0)
    ML_COMM_STALL_WARN_SECONDS=60  warn about a wait this long, again every as long (0: never)
    ML_COMM_STALL_ABORT_SECONDS=1800  abort the job (MPI_Abort) after a wait this long (0: never;
                                   docs/fault-tolerance-defaults.md says why 30 minutes)

Every rank must run with the same values (mpiexec and srun pass the environment on).
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .._core import ffi, lib
from .errors import MLCommError

CHECK_LAYOUT = "ML_COMM_CHECK_LAYOUT"
CHECK_FINITE = "ML_COMM_CHECK_FINITE"
STALL_WARN = "ML_COMM_STALL_WARN_SECONDS"
STALL_ABORT = "ML_COMM_STALL_ABORT_SECONDS"
# A lost rank must not hold the job until its time limit, and one rank's evaluation or
# checkpoint while the others wait must not end it (docs/fault-tolerance-defaults.md).
DEFAULT_STALL_ABORT_SECONDS = 1800.0

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off", "")


@dataclass(frozen=True)
class GuardSettings:
    layout: bool = True
    finite: bool = False
    stall_warn: float = 60.0
    stall_abort: float = DEFAULT_STALL_ABORT_SECONDS


def _flag(env: Mapping[str, str], name: str, default: bool) -> bool:
    raw = env.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ValueError(f"environment variable {name} must be 0 or 1, got {raw!r}")


def _seconds(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name)
    if raw is None or not raw.strip():
        return default
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(
            f"environment variable {name} must be a number of seconds >= 0 (0: off), got {raw!r}"
        )
    return value


def from_env(env: Mapping[str, str] | None = None) -> GuardSettings:
    """The settings that the environment asks for; ValueError names a malformed variable."""
    env = os.environ if env is None else env
    return GuardSettings(
        layout=_flag(env, CHECK_LAYOUT, True),
        finite=_flag(env, CHECK_FINITE, False),
        stall_warn=_seconds(env, STALL_WARN, 60.0),
        stall_abort=_seconds(env, STALL_ABORT, DEFAULT_STALL_ABORT_SECONDS),
    )


def apply(handle, team: int, settings: GuardSettings) -> None:
    """Hand the settings to one team of the core (team: its number in messages)."""
    for rc, what in (
        (lib.mlc_team_set_checks(handle, settings.layout, settings.finite), "checks"),
        (lib.mlc_team_set_stall_limits(handle, settings.stall_warn, settings.stall_abort), "stall"),
        (lib.mlc_team_set_id(handle, team), "team id"),
    ):
        if rc != lib.MLC_OK:
            raise MLCommError(f"could not set the team's {what} settings (status {rc})")


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
