"""At init, rank 0 says which ranks it is still waiting for, when that takes a while.

Ranks start unevenly: one imports TensorFlow from a slow file system, another is started
late by the launcher, another is stuck before init. init's first exchange then waits,
and a job that prints nothing for a minute looks hung. Before that exchange every other
rank sends rank 0 a note that it has arrived; past NOTICE_SECONDS rank 0 says which
ranks it has not heard from yet, and again every REPEAT_SECONDS. The notes travel on the
session's communicator under a tag of their own.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from .output import say
from .spans import spans

NOTICE_SECONDS = 5.0
REPEAT_SECONDS = 30.0
TAG = 0x4D43  # "MC"; within the 32767 that every MPI allows
_MAX_POLL_SECONDS = 0.05


def report_arrivals(comm, printer: Callable[[str], None] = say) -> None:
    """Collective over comm: returns on a rank above 0 at once (its note sent), on rank 0
    once every rank has arrived, saying meanwhile who it waits for."""
    import numpy as np
    from mpi4py import MPI

    size, rank = comm.Get_size(), comm.Get_rank()
    if size == 1:
        return
    if rank != 0:
        comm.Send(np.zeros(1, np.int8), dest=0, tag=TAG)
        return
    notes = [np.zeros(1, np.int8) for _ in range(size)]
    requests = [comm.Irecv(notes[r], source=r, tag=TAG) for r in range(1, size)]
    start = time.monotonic()
    next_note = start + NOTICE_SECONDS
    pause = 1e-4
    while not MPI.Request.Testall(requests):
        now = time.monotonic()
        if now >= next_note:
            missing = [r for r, req in zip(range(1, size), requests) if not req.Test()]
            if missing:
                word = "rank" if len(missing) == 1 else "ranks"
                printer(
                    f"ml_comm: init waits for {word} {spans(missing)} of {size}, not in init yet "
                    f"({now - start:.0f} s)"
                )
            next_note = now + REPEAT_SECONDS
        time.sleep(pause)
        pause = min(2 * pause, _MAX_POLL_SECONDS)
