"""Leaving together: the barrier a rank leaves through (finalize, sys.exit(), the end of
the script), which aborts the job instead of leaving behind a peer that waits for this
rank in a team operation or a barrier it never entered (abort.py says why).

The barrier is an allgather of a small fixed-size record per rank (core/pace.py: how long
the rank waited inside ml_comm): like a barrier, it completes on no rank before every
rank has entered it, and it is watched the same way, so it carries the numbers of the
slow-rank report at no risk of a wait of its own."""

from __future__ import annotations

import sys
import time

from .._core import lib
from .abort import _traceback_text, _world, abort, steps_text
from .barrier import Barrier, waited_request

# Polling interval of the leaving rank: short at first (the usual finalize finds
# every rank there at once), then up to this, so that a long wait costs no CPU.
_MAX_POLL_SECONDS = 0.05


def open_exits(mpi, comm) -> tuple[Departure, Barrier]:
    """The session's ways out, made at init (collective): handed to the session."""
    return Departure(comm), Barrier(mpi, comm)


class Departure:
    """The barrier a rank leaves through, on a communicator of its own (a duplicate of
    the session's, made at init, collectively, so that leaving needs nothing but
    point-to-point progress). Ranks in messages are the session communicator's."""

    def __init__(self, comm):
        self.size = comm.Get_size()
        self.rank = comm.Get_rank()
        self.comm = comm.Dup() if self.size > 1 else None

    def leave(self, teams, barrier=None, note=None, record: bytes = b"") -> list[bytes]:
        """Wait for every rank to leave too; abort the job if a peer waits for this
        rank in a team operation or in a barrier (it would never return). note: the
        session's steps_note, for the message. record: this rank's bytes, the same length
        on every rank; returns every rank's, by rank (only this rank's at one rank or
        after MPI_Finalize)."""
        if self.comm is None or _world() is None:  # one rank, or MPI already finalized
            return [record]
        sent = bytearray(record)
        received = bytearray(len(record) * self.size)
        request = self.comm.Iallgather(sent, received)
        pause = 1e-4
        while not request.Test():
            peer = barrier.waiting_peer() if barrier is not None else -1
            if peer >= 0:
                how, traceback_text = _how_leaving()
                abort(
                    f"ml_comm: rank {self.rank} of {self.size} is leaving {how} while rank "
                    f"{peer} waits for it in barrier(), which rank {self.rank} never entered. "
                    f"Aborting the job (MPI_Abort) instead of leaving rank {peer} waiting "
                    f"forever.{traceback_text}"
                )
            for t, team in enumerate(teams):
                peer = lib.mlc_team_waiting_peer(team)
                if peer >= 0:
                    how, traceback_text = _how_leaving()
                    abort(
                        f"ml_comm: rank {self.rank} of {self.size} is leaving {how} while rank "
                        f"{peer} waits for it in {waited_request(team, t, self.rank)}: the ranks "
                        f"did not make the same calls.{steps_text(note)} Aborting the job "
                        f"(MPI_Abort) instead of leaving rank {peer} waiting forever."
                        f"{traceback_text}"
                    )
            time.sleep(pause)
            pause = min(2 * pause, _MAX_POLL_SECONDS)
        n = len(record)
        return [bytes(received[r * n : (r + 1) * n]) for r in range(self.size)]

    def close(self) -> None:
        if self.comm is not None and _world() is not None:
            self.comm.Free()
        self.comm = None


def _how_leaving() -> tuple[str, str]:
    """(how this rank leaves, for the message; the traceback to print after it). An
    exception in flight through finalize (a `finally`, a `with` block that finalizes, an
    `except` that finalizes) is why the rank leaves, and the abort would end the process
    before Python printed it: the message names it and carries its traceback (a Ctrl-C's
    KeyboardInterrupt by name only)."""
    kind, error, tb = sys.exc_info()
    if kind is None or issubclass(kind, (SystemExit, GeneratorExit)):
        return "(finalize(), sys.exit() or the end of the script)", ""
    if issubclass(kind, KeyboardInterrupt):
        return "(finalize() after a KeyboardInterrupt)", ""
    try:
        text = "\n" + _traceback_text(kind, error, tb).rstrip("\n")
    except Exception:  # the abort must go on: the name is enough
        text = ""
    return f"(finalize() with a {kind.__name__} in flight, traceback below)", text
