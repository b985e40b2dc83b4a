"""`ml_comm.barrier()`: a barrier that a departed rank cannot turn into a hang.

MPI_Barrier blocks inside MPI, and its messages are invisible to MPI_Iprobe, so a rank
that leaves the job (finalize, the end of the script) while the others wait in it could
not tell that they wait for it. This barrier is a dissemination barrier of zero-byte
point-to-point messages on a communicator of its own (round k: send to rank + 2^k,
receive from rank - 2^k; log2(n) rounds), polled with short sleeps, so that:

* a leaving rank (departure.py) finds the unreceived message of a barrier it
  never entered (`waiting_peer`) and ends the job with a message naming the rank;
* a rank waiting here that finds a peer waiting for it in a team operation (the ranks
  made different calls, e.g. ran different numbers of training steps) raises instead of
  waiting forever. A peer that has just passed the barrier may already have sent its
  next team operation's first message, so that finding has to last a moment first.
  The barrier it raised in stays open: MPI cannot take back a send that was delivered
  (a zero-byte message goes eagerly), so the peers will count this rank as entered.
  The rank's next barrier() resumes it, with the same posted messages, instead of
  starting another; every rank thus counts the same barriers, and no message is left
  over. Closing the session cancels what it still has posted.

Every message a rank is sent in a barrier is received before that rank leaves it, so an
unreceived one always belongs to a barrier this rank has not entered.
"""

from __future__ import annotations

import time

import numpy as np

from .._core import ffi, lib
from ..core.errors import MismatchError
from .abort import _world, steps_text

_MAX_POLL_SECONDS = 0.05
_STUCK_SECONDS = 2.0  # a team peer waiting for this rank that long is not a race


class Barrier:
    """On a duplicate of the session's communicator; ranks are that communicator's."""

    def __init__(self, mpi, comm):
        self.mpi = mpi
        self.size = comm.Get_size()
        self.rank = comm.Get_rank()
        self.comm = comm.Dup() if self.size > 1 else None
        self._empty = np.empty(0, np.uint8)
        # A barrier that raised: (distance, tag, its posted requests) of its round.
        self._open: tuple[int, int, list] | None = None

    def wait(self, teams, context: str = "", note=None) -> None:
        """Return once every rank has entered the barrier (collective). note: the
        session's steps_note, for the message of a barrier the ranks cannot complete."""
        if self.comm is None:
            return
        if self._open is None:  # else the barrier that raised last time, resumed
            self._open = (1, 0, self._post(1, 0))
        while self._open is not None:
            distance, tag, requests = self._open
            self._poll(requests, teams, context, note)  # raises, the barrier left open
            distance, tag = 2 * distance, tag + 1
            self._open = (
                (distance, tag, self._post(distance, tag)) if distance < self.size else None
            )

    def _post(self, distance: int, tag: int) -> list:
        """Round `tag`: send to rank + distance, receive from rank - distance."""
        dest = (self.rank + distance) % self.size
        source = (self.rank - distance) % self.size
        recv = self.comm.Irecv([self._empty, self.mpi.BYTE], source, tag)
        send = self.comm.Isend([self._empty, self.mpi.BYTE], dest, tag)
        return [recv, send]

    def _poll(self, requests, teams, context: str, note) -> None:
        pause, stuck_since = 1e-5, None
        while not self.mpi.Request.Testall(requests):
            peer, team = _team_peer_waiting(teams)
            if peer < 0:
                stuck_since = None
            elif stuck_since is None:
                stuck_since = time.monotonic()
            elif time.monotonic() - stuck_since > _STUCK_SECONDS:
                raise MismatchError(
                    f"rank {self.rank} of {self.size} waits in barrier(){context} while rank "
                    f"{peer} waits for it in {waited_request(teams[team], team, self.rank)}: "
                    f"the ranks did not make the same calls.{steps_text(note)} This rank's next "
                    "barrier() resumes this one"
                )
            time.sleep(pause)
            pause = min(2 * pause, _MAX_POLL_SECONDS)

    def waiting_peer(self) -> int:
        """A rank that has sent this one a barrier message not yet received (it waits in
        a barrier this rank never entered), or -1."""
        if self.comm is None:
            return -1
        status = self.mpi.Status()
        if self.comm.Iprobe(self.mpi.ANY_SOURCE, self.mpi.ANY_TAG, status):
            return status.Get_source()
        return -1

    def close(self) -> None:
        if self.comm is not None and _world() is not None:  # not after MPI_Finalize
            for request in self._open[2] if self._open is not None else []:
                if request != self.mpi.REQUEST_NULL:
                    request.Cancel()
                    if not request.Test():
                        request.Free()
            # A peer's message of a barrier left open here was delivered and stays
            # queued: received now, as the team's communicators are (csrc/team/team.c),
            # so that a later communicator with this one's context id never sees it.
            while self.comm.Iprobe(self.mpi.ANY_SOURCE, self.mpi.ANY_TAG):
                self.comm.Recv([self._empty, self.mpi.BYTE], self.mpi.ANY_SOURCE, self.mpi.ANY_TAG)
            self.comm.Free()
        self.comm = None
        self._open = None


def waited_request(team, team_id: int, rank: int) -> str:
    """What a peer that waits for this rank on the team waits in: the team's request
    after this rank's last one ("team 0's request 12, after rank 1's last, request 11:
    average of 3 float32 tensors, 2307 elements"). Requests go in one order on every
    rank, so a peer inside a request this rank never made is in a later one."""
    buf = ffi.new("char[512]")
    last = lib.mlc_team_last_request(team, buf, 512)
    if last <= 0:
        return f"team {team_id}'s first request, which rank {rank} never made (none on that team)"
    return (
        f"team {team_id}'s request {last + 1} or later, which rank {rank} never made (its "
        f"last on team {team_id} was request {last}: {ffi.string(buf).decode()})"
    )


def _team_peer_waiting(teams) -> tuple[int, int]:
    for t, team in enumerate(teams):
        peer = lib.mlc_team_waiting_peer(team)
        if peer >= 0:
            return peer, t
    return -1, -1
