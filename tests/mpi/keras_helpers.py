"""The ml_comm.keras session of the Keras integration tests (tests/mpi/test_keras_*.py).
The rules of mpi_helpers.py hold here too."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping

from mpi_helpers import comm_world

import ml_comm as mc
import ml_comm.keras as mk


@contextlib.contextmanager
def keras_ml_comm_session(
    env: Mapping[str, str] | None = None, **init_kwargs
) -> Iterator[tuple[int, int]]:
    """mk.init(**init_kwargs) with `env` in os.environ while init reads its settings
    (removed again after), finalized on exit; yields (rank, nranks)."""
    comm_world().barrier()
    env = dict(env or {})
    os.environ.update(env)
    try:
        mk.init(**init_kwargs)
    finally:
        for name in env:
            del os.environ[name]
    try:
        yield mc.get_rank(), mc.get_nranks()
    finally:
        mk.finalize()
