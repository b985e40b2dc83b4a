"""MPI start-up through mpi4py, at MPI_THREAD_MULTIPLE."""

from __future__ import annotations

import mpi4py

from ..core.errors import StateError


def init_mpi():
    """Start MPI if nobody has (idempotent) and return mpi4py's MPI module."""
    if mpi4py.rc.thread_level != "multiple" and not _mpi_imported():
        mpi4py.rc.thread_level = "multiple"
    try:
        from mpi4py import MPI
    except (ImportError, RuntimeError) as exc:  # mpi4py >= 4.1 finds its libmpi at import
        from .library import missing_mpi_message

        raise ImportError(missing_mpi_message(exc).replace("ml_comm's C core", "mpi4py")) from exc

    if not MPI.Is_initialized():
        MPI.Init_thread(MPI.THREAD_MULTIPLE)
    if MPI.Is_finalized():
        raise StateError(
            "MPI has already been finalized in this process; ml_comm cannot restart it"
        )
    return MPI


def _mpi_imported() -> bool:
    import sys

    return "mpi4py.MPI" in sys.modules
