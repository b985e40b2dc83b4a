"""At init, rank 0 says that it still waits for the other ranks, when that takes a while.

Ranks start unevenly: one imports TensorFlow from a slow file system, another is started
late by the launcher, another is stuck before init. init's first exchange then waits, and
a job that prints nothing for a minute looks hung. Every rank enters a non-blocking barrier
on the session's communicator first; past NOTICE_SECONDS rank 0 says how long it has
waited, and again every REPEAT_SECONDS. A barrier, not messages: a library may not send on
its user's communicator, where a receive of any tag would take them; which ranks are late
would need such messages (the stall warnings name ranks, on ml_comm's own communicators).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from .output import say

NOTICE_SECONDS = 5.0
REPEAT_SECONDS = 30.0
_MAX_POLL_SECONDS = 0.05


def report_arrivals(comm, printer: Callable[[str], None] = say) -> None:
    """Collective over comm: returns once every rank has arrived; rank 0 says meanwhile that
    it waits, if that takes NOTICE_SECONDS."""
    size, rank = comm.Get_size(), comm.Get_rank()
    if size == 1:
        return
    request = comm.Ibarrier()
    start = time.monotonic()
    next_note = start + NOTICE_SECONDS
    pause = 1e-4
    while not request.Test():
        now = time.monotonic()
        if rank == 0 and now >= next_note:
            printer(
                f"ml_comm: init waits for the other ranks of {size} to reach init "
                f"({now - start:.0f} s)"
            )
            next_note = now + REPEAT_SECONDS
        time.sleep(pause)
        pause = min(2 * pause, _MAX_POLL_SECONDS)
