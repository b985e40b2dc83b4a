"""What each rank tells the others at finalize about its pace: how long it has run since
init, how much of that it waited inside ml_comm, how many reductions it made, whether it
is leaving after an uncaught exception, and its host.

The record has a fixed size so that it travels in the exchange every rank already makes
when it leaves (faults/departure.py): one allgather of a few dozen bytes per rank in
place of a barrier, and nothing else to wait for or to go wrong.
"""

from __future__ import annotations

import socket
import struct
import sys
from dataclasses import dataclass

# Linux host names are at most 64 bytes (HOST_NAME_MAX); Slurm's node names are shorter.
_HOST_BYTES = 64
_RECORD = struct.Struct(f"<ddqq{_HOST_BYTES}s")
RECORD_BYTES = _RECORD.size


@dataclass(frozen=True)
class RankPace:
    elapsed: float  # seconds from the end of init to the start of finalize
    waited: float  # seconds waiting inside ml_comm, summed over the teams
    calls: int  # reductions the teams finished
    raised: bool  # leaving after an uncaught exception, or numbers it could not read
    host: str

    def pack(self) -> bytes:
        host = self.host.encode(errors="replace")[:_HOST_BYTES]
        return _RECORD.pack(self.elapsed, self.waited, self.calls, int(self.raised), host)


def unpack(record: bytes) -> RankPace:
    elapsed, waited, calls, raised, host = _RECORD.unpack(record)
    return RankPace(
        elapsed, waited, calls, bool(raised), host.rstrip(b"\0").decode(errors="replace")
    )


# A rank whose numbers could not be read sends this: the same size, and nothing is judged.
UNKNOWN = RankPace(0.0, 0.0, 0, True, "").pack()


def this_rank(elapsed: float, waited: float, calls: int) -> RankPace:
    # Python sets sys.last_value when an exception reached the top of the script; atexit
    # runs finalize after that.
    raised = getattr(sys, "last_value", None) is not None
    return RankPace(elapsed, waited, calls, raised, socket.gethostname())
