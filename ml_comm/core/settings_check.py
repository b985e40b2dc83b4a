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
msglen, chunk bytes: the argument or ML_COMM_CHUNK_BYTES) and the environment
variables that the core's choices depend on. Not compared: settings that only act
locally (stall warnings and abort, the timeline, aborting on an exception).
"""

from __future__ import annotations

from collections.abc import Mapping

from . import compression, settings
from .errors import MismatchError
from .spans import spans

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
    }
    for name in THRESHOLDS:
        values[name] = str(thresholds[name]) if name in thresholds else "unset (default)"
    values["ML_COMM_COMPRESSION"] = compression.name(compression_code)
    for name in PROTOCOL_VARIABLES:  # any other compared row: its value as the table parses it
        if name not in values and name != "ML_COMM_CHUNK_BYTES":
            value = settings.get(name)
            values[name] = "unset (default)" if value is None else str(value)
    return values


def disagreements(per_rank: list[dict[str, str]]) -> list[str]:
    """One line per setting whose value differs: 'NAME: rank 0 has A, ranks 1-2 have B'."""
    lines = []
    for name in per_rank[0]:
        values: dict[str, list[int]] = {}
        for rank, theirs in enumerate(per_rank):
            values.setdefault(theirs.get(name, "missing"), []).append(rank)
        if len(values) > 1:
            held = "; ".join(f"{_ranks(ranks)} {value}" for value, ranks in values.items())
            lines.append(f"{name}: {held}")
    return lines


def _ranks(ranks: list[int]) -> str:
    word = "rank" if len(ranks) == 1 else "ranks"
    return f"{word} {spans(ranks)}:"


def verify(
    comm, nthreads, nteams, msglen, chunk_bytes, guard, thresholds, compression_code=0
) -> None:
    """Collective over comm (every rank calls init): raise on every rank if they differ."""
    if comm.Get_size() == 1:
        return
    mine = local_settings(
        nthreads, nteams, msglen, chunk_bytes, guard, thresholds, compression_code
    )
    lines = disagreements(comm.allgather(mine))
    if lines:
        raise MismatchError(
            "init failed: the ranks were started with different settings that change how "
            "they communicate, and would hang or reduce the wrong data together: "
            + " | ".join(lines)
            + ". Give every rank the same init arguments and ML_COMM_* environment "
            "(mpiexec and srun pass the launching shell's environment on)"
        )
