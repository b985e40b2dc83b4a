"""Exactly checkable data for the Keras hook's tests on every backend: small integer
inputs, so sums and means are exact in float32, each rank's share of a global batch, a
model's weights as NumPy arrays, and the check that an overlapped fit trains as one
process on the global batches."""

from __future__ import annotations

import numpy as np
from mpi_helpers import Checks

import ml_comm.keras as mk

B = 4  # rows per rank and step


def weights(model) -> list[np.ndarray]:
    return [np.asarray(w) for w in model.get_weights()]


def int_data(rows: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.integers(-2, 3, size=(rows, 3)).astype(np.float32)
    y = rng.integers(-2, 3, size=(rows, 2)).astype(np.float32)
    return x, y


def shares(x, nranks: int, rank: int):
    """This rank's B rows of each global batch of nranks * B."""
    return x.reshape(-1, nranks, B, x.shape[-1])[:, rank].reshape(-1, x.shape[-1])


def trains_as_one_process(rank, nranks, steps, seed, model_of, overlapped) -> None:
    """A fit of `steps` steps trains as one process on the global batches, and every step's
    gradients go through the overlap (`overlapped()`: the process's overlapped steps so
    far; `model_of(seed)`: a compiled model)."""
    checks = Checks()
    x, y = int_data(steps * nranks * B, seed=seed)
    model = model_of(rank)
    mk.broadcast_weights(model)
    reference = model_of(0)
    reference.set_weights(weights(model))
    mk.set_team(reference, None)  # one process on the global batches
    before = overlapped()
    model.fit(
        shares(x, nranks, rank), shares(y, nranks, rank), batch_size=B, shuffle=False, verbose=0
    )
    done = overlapped() - before
    checks.true(done == steps, f"{done} of {steps} steps overlapped")
    reference.fit(x, y, batch_size=nranks * B, shuffle=False, verbose=0)
    for i, (w, ref) in enumerate(zip(weights(model), weights(reference))):
        checks.true(np.allclose(w, ref, rtol=1e-5, atol=1e-6), f"weight {i}: {w} vs {ref}")
    checks.same_on_all_ranks(weights(model), "weights after an overlapped fit")
    checks.finish()
