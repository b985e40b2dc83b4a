"""At init, every rank compares the settings that change the protocol, and fails alike.

Ranks whose teams cut requests into other segments, give them to other threads,
take another algorithm below another threshold, or skip the agreement check that
the others wait for, hang or reduce the wrong bytes together: the per-request
agreement check cannot catch that, because it is itself one of the settings (and
a team whose threads differ in number does not even finish its creation). So
before any team exists, `init` gathers each rank's values over COMM_WORLD (one
allgather, once) and, where they differ, raises MismatchError on every rank naming
each setting, each distinct value and the ranks that hold it.

Compared: the init arguments that size and cut the work (threads per team, teams,
msglen, chunk bytes: the argument or ML_COMM_CHUNK_BYTES) and its framework, the environment
variables that the core's choices depend on, and what a layer above hands init as
`agreed` (the Keras hook's backend and options, which decide its collective calls).
Not compared: settings that only act locally (stall warnings and abort, the timeline,
aborting on an exception).

The same allgather carries each rank's ML_COMM_* variables that are no setting (a
misspelt name does nothing): rank 0 warns once for the job, naming the setting each is
closest to, or with ML_COMM_STRICT_SETTINGS=1 every rank raises SettingsError.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from . import compression, settings
from .arrival import report_arrivals
from .errors import MismatchError, SettingsError
from .job_errors import raised_by_all
from .output import say
from .spans import spans

STRICT = "ML_COMM_STRICT_SETTINGS"
# Environment variables that change what goes on the wire: the table's `compared`
# column. An unset threshold is compared as "unset (default)"; the flags and the chunk
# as their effective value.
PROTOCOL_VARIABLES = settings.compared()
# The core's size thresholds (unset: the core's default); the chunk is compared as init's.
THRESHOLDS = tuple(
    name
    for name in PROTOCOL_VARIABLES
    if settings.setting(name).type == "bytes" and name != "ML_COMM_CHUNK_BYTES"
)


def local_settings(
    nthreads: int,
    nteams: int,
    msglen: int,
    chunk_bytes: int,
    guard,
    thresholds: Mapping,
    compression_code: int = 0,
) -> dict[str, str]:
    """This rank's effective values, as text (what the message shows)."""
    values = {
        "nthread_per_team": str(nthreads),
        "nteams": str(nteams),
        "msglen": str(msglen),
        "chunk_bytes (init argument or ML_COMM_CHUNK_BYTES)": str(chunk_bytes),
        "ML_COMM_CHECK_LAYOUT": str(int(guard.layout)),
        "ML_COMM_CHECK_FINITE": str(int(guard.finite)),
        "ML_COMM_WEIGHTS_CHECK": str(int(settings.get("ML_COMM_WEIGHTS_CHECK"))),
    }
    for name in THRESHOLDS:
        values[name] = str(thresholds[name]) if name in thresholds else "unset (default)"
    values["ML_COMM_COMPRESSION"] = compression.name(compression_code)
    for name in PROTOCOL_VARIABLES:  # any other compared row: its value as the table parses it
        if name not in values and name != "ML_COMM_CHUNK_BYTES":
            value = settings.get(name)
            values[name] = "unset (default)" if value is None else str(value)
    return values


def disagreements(per_rank: list[dict[str, str]], longest: int | None = None) -> list[str]:
    """One line per setting whose value differs: 'NAME: rank 0: A; ranks 1-2: B'. A
    setting some ranks do not have at all (a layer above that only they run) is
    'not given' on those. `longest`: values longer than that are shown in part, from a
    little before where they start to differ."""
    lines = []
    for name in dict.fromkeys(name for theirs in per_rank for name in theirs):
        values: dict[str, list[int]] = {}
        for rank, theirs in enumerate(per_rank):
            values.setdefault(theirs.get(name, "not given"), []).append(rank)
        if len(values) > 1:
            same = len(os.path.commonprefix(list(values)))
            held = "; ".join(
                f"{_ranks(ranks)} {_part(value, same, longest)}" for value, ranks in values.items()
            )
            lines.append(f"{name}: {held}")
    return lines


def _part(value: str, same: int, longest: int | None) -> str:
    """`value`, or where longer than `longest`, its part from a little before the end of
    its first `same` characters, which every rank's value shares."""
    if longest is None or len(value) <= longest:
        return value
    start = max(0, min(same - longest // 3, len(value) - longest))
    end = start + longest
    return ("..." if start else "") + value[start:end] + ("..." if end < len(value) else "")


def _ranks(ranks: list[int]) -> str:
    word = "rank" if len(ranks) == 1 else "ranks"
    return f"{word} {spans(ranks)}:"


def verify(
    comm,
    nthreads,
    nteams,
    msglen,
    chunk_bytes,
    guard,
    thresholds,
    compression_code=0,
    agreed: Mapping[str, str] | None = None,
) -> None:
    """Collective over comm (every rank calls init): raise on every rank if they differ.
    `agreed`: the settings of a layer above (the Keras hook's), compared alike.
    Unknown ML_COMM_* names (any rank's) are said once, by rank 0 (see unknown_names)."""
    mine = local_settings(
        nthreads, nteams, msglen, chunk_bytes, guard, thresholds, compression_code
    )
    mine = {**(agreed or {}), **mine}  # a layer's name never hides ml_comm's own setting
    ours = (mine, settings.unknown())
    report_arrivals(comm)  # rank 0 says that it waits, if the others are late
    everyone = comm.allgather(ours) if comm.Get_size() > 1 else [ours]
    unknown_names(comm, [names for _, names in everyone])
    lines = disagreements([values for values, _ in everyone])
    if lines:
        raise raised_by_all(
            MismatchError(
                "init failed: the ranks were started with different settings that change how "
                "they communicate, and would hang or reduce the wrong data together: "
                + " | ".join(lines)
                + ". Give every rank the same init arguments and ML_COMM_* environment "
                "(mpiexec and srun pass the launching shell's environment on), and under "
                "ml_comm.keras the same Keras backend and ml_comm.keras.init options"
            ),
            comm,
        )


def unknown_names(comm, per_rank: list[dict[str, str | None]]) -> None:
    """Variables named ML_COMM_* that are no setting (a misspelt name does nothing): a
    warning from rank 0, or with ML_COMM_STRICT_SETTINGS=1 SettingsError on every rank."""
    ranks: dict[str, list[int]] = {}
    closest: dict[str, str | None] = {}
    for rank, names in enumerate(per_rank):
        for name, close in names.items():
            ranks.setdefault(name, []).append(rank)
            closest[name] = close
    if not ranks:
        return
    where = ""
    if any(len(held) < len(per_rank) for held in ranks.values()):
        where = (
            " ("
            + "; ".join(f"{name} set on {_ranks(held)[:-1]} only" for name, held in ranks.items())
            + ")"
        )
    said = f"{settings.unknown_text(closest)}{where}"
    if settings.get(STRICT):
        raise raised_by_all(
            SettingsError(
                f"init failed: not a setting of ml_comm: {said}; correct the name, or unset "
                f"{STRICT} to be warned instead"
            ),
            comm,
        )
    if comm.Get_rank() == 0:
        say(
            f"ml_comm: warning: ignoring {said}: not a setting of ml_comm ({STRICT}=1 makes "
            "this an error; the settings: python -m ml_comm --check)"
        )
