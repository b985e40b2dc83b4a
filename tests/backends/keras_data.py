"""Exactly checkable data for the Keras hook's tests on every backend: small integer
inputs, so sums and means are exact in float32, each rank's share of a global batch, and
a model's weights as NumPy arrays."""

from __future__ import annotations

import numpy as np

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
