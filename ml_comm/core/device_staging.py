"""The settings of device arrays' staging (ML_COMM_NUM_CUDA_STREAMS, ML_COMM_CPY_PER_CUDA_STREAM,
ML_COMM_CUDA_PIECE_BYTES, ML_COMM_CUDA_LIBRARY) handed to each team at init. Nothing of CUDA
is loaded here: the core loads the driver at the first call with device arrays."""

from __future__ import annotations

from .._core import lib
from . import settings
from .errors import SettingsError

STREAMS = "ML_COMM_NUM_CUDA_STREAMS"
COPIES = "ML_COMM_CPY_PER_CUDA_STREAM"
PIECE = "ML_COMM_CUDA_PIECE_BYTES"
LIBRARY = "ML_COMM_CUDA_LIBRARY"
MAX_STREAMS = 16


def apply(team) -> None:
    streams, copies, piece = settings.get(STREAMS), settings.get(COPIES), settings.get(PIECE)
    if not 1 <= streams <= MAX_STREAMS:
        raise SettingsError(f"{STREAMS}={streams}: must be 1 to {MAX_STREAMS}")
    if copies < 1:
        raise SettingsError(f"{COPIES}={copies}: must be at least 1")
    if piece < 8:
        raise SettingsError(f"{PIECE}={piece}: must be at least 8 bytes")
    library = (settings.get(LIBRARY) or "").encode()
    if lib.mlc_team_set_device_staging(team, streams, copies, piece, library) != lib.MLC_OK:
        raise SettingsError(f"{LIBRARY}: a path of at most 255 bytes, got {len(library)}")
