"""The Keras hook's guarantees on each Keras backend (KERAS_BACKEND: tensorflow, jax,
torch), run under mpiexec in an environment of that backend; tools/dev.py runs them in
.venv-jax and .venv-torch, where TensorFlow is not installed. The MPI tests' helpers
(Checks, comm_world) and rules hold here too."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "mpi"))
