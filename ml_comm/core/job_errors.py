"""Errors that every rank raises alike, so that one rank prints them for the job.

A check that the ranks make together (their settings at init, their models before a
Keras `fit`) ends in the same exception on each of them; printed by every rank it would
appear once per rank, the ranks' lines run together. `raised_by_all` records on the
exception which ranks (of COMM_WORLD) raise it; the job's exception hook
(faults/abort.py) prints it in full from the lowest of them only.
"""

from __future__ import annotations

ATTRIBUTE = "ml_comm_raised_on"


def raised_by_all(exc: BaseException, comm) -> BaseException:
    """Mark `exc` as raised by every rank of the mpi4py communicator `comm`; returns it."""
    from mpi4py import MPI

    mine, world = comm.Get_group(), MPI.COMM_WORLD.Get_group()
    try:
        ranks = MPI.Group.Translate_ranks(mine, range(comm.Get_size()), world)
    finally:
        mine.Free()
        world.Free()
    setattr(exc, ATTRIBUTE, tuple(sorted(r for r in ranks if r != MPI.UNDEFINED)))
    return exc


def ranks_raising(exc: BaseException) -> tuple[int, ...]:
    """The ranks of COMM_WORLD that raise `exc` alike (empty: not known to be shared)."""
    return tuple(getattr(exc, ATTRIBUTE, ()))
