"""The statistics a model keeps while it trains (BatchNormalization's moving mean and
variance), made one state on every rank.

Each step averages gradients only, so the non-trainable weights that layers update
themselves while training follow each rank's own batches and drift apart: evaluated on
every rank, the ranks' models would differ, the global metrics would mix them, and
rank 0's checkpoint would hold rank 0's statistics alone. `share_statistics` replaces
each such weight by its average over the ranks. The ranks' moving means average to the
moving mean of the ranks' batch means, which is what one process keeps on the global
batch (the moving average is linear in them); the average of the moving variances
leaves out the spread between the ranks' batch means (each rank's batch variance is
taken around its own mean).

Weights that are already the same on every rank (a frozen layer, a `Normalization`
layer adapted before the first broadcast) stay bit for bit: an average of equal values
can round. A 52-bit digest of each non-trainable floating-point weight, reduced with
max over (digest, -digest), finds those that differ on some rank (a frozen backbone's
millions of values cost a hash, not a reduction), and only they are averaged (in
float64, rounded once to the weight's dtype). Both reductions go through the NumPy API
on the model's team, so every rank decides from the same reduced values and makes the
same calls.
"""

from __future__ import annotations

import hashlib

import keras
import numpy as np

from .. import api as mc


def share_statistics(model, team: int) -> int:
    """Average over the ranks the model's non-trainable floating-point weights that
    differ between ranks (collective; eager). Returns how many were averaged."""
    if mc.get_nranks() == 1:
        return 0
    variables, values = [], []
    for v in model.non_trainable_weights:
        value = np.asarray(keras.ops.convert_to_numpy(v))
        if np.issubdtype(value.dtype, np.floating) or value.dtype.name == "bfloat16":
            variables.append(v)
            values.append(value)
    if not variables:
        return 0
    digests = np.array([_digest(x) for x in values])
    high_and_minus_low = mc.allreduce(np.concatenate([digests, -digests]), "max", team)
    differ = np.flatnonzero(high_and_minus_low[: len(values)] != -high_and_minus_low[len(values) :])
    if differ.size == 0:
        return 0
    averaged = mc.average(
        np.concatenate([values[i].astype(np.float64).ravel() for i in differ]), team
    )
    start = 0
    for i in differ:
        size = values[i].size
        value = averaged[start : start + size].astype(values[i].dtype).reshape(values[i].shape)
        variables[i].assign(value)
        start += size
    return int(differ.size)


def _digest(value: np.ndarray) -> float:
    """The first 52 bits of the value's BLAKE2b hash, exact as a float64."""
    digest = hashlib.blake2b(np.ascontiguousarray(value).tobytes(), digest_size=8).digest()
    return float(int.from_bytes(digest, "little") >> 12)
