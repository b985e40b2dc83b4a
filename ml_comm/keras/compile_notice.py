"""At once, on rank 0: whether `init` will compile ml_comm's TensorFlow ops (minutes,
once). The package imports this module before Keras, whose import (TensorFlow's) takes
seconds, so that the notice comes first; `init` then reports the compile's progress
(ml_comm/tensorflow/build.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from ..core import op_cache
from ..mpi.launch import launcher_rank


def keras_backend() -> str:
    """The backend Keras will load, as Keras decides it: KERAS_BACKEND, else keras.json."""
    chosen = os.environ.get("KERAS_BACKEND", "").strip()
    if chosen:
        return chosen
    home = os.environ.get("KERAS_HOME") or os.path.join(os.path.expanduser("~"), ".keras")
    try:
        return str(json.loads((Path(home) / "keras.json").read_text()).get("backend"))
    except (OSError, ValueError, AttributeError):
        return "tensorflow"


if launcher_rank() == 0 and keras_backend() == "tensorflow":
    op_cache.announce()
