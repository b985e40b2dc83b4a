"""The digits data shared by the examples: scikit-learn's bundled 8x8 digits
(shipped with the package, nothing is downloaded), split and standardized the
same way on every rank."""

from __future__ import annotations

import numpy as np


def load_data(seed: int, test_fraction: float):
    """The same standardized float32 split on every rank (depends on the seed only)."""
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    perm = np.random.default_rng(seed).permutation(len(y))
    n_test = int(round(test_fraction * len(y)))
    test, train = perm[:n_test], perm[n_test:]
    mean = x[train].mean(axis=0)
    std = x[train].std(axis=0)
    std[std == 0] = 1.0  # the always-blank border pixels
    x = ((x - mean) / std).astype(np.float32)
    y = y.astype(np.int32)
    return x[train], y[train], x[test], y[test]
