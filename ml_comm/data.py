"""Every rank its share of the data, and the same number of steps on every rank.

    import ml_comm as mc
    from ml_comm.data import equal_steps, shard

    dataset = shard(tf.data.Dataset.from_tensor_slices((x, y))).batch(32)
    for epoch in range(epochs):
        for xb, yb in equal_steps(dataset):   # the same number of batches on every rank
            train_step(xb, yb)

Training collectives pair the ranks' steps in order, so ranks that run different numbers
of steps pair step 51 of one epoch with step 1 of the next, or wait forever at the end.
`equal_steps` makes every rank stop after the smallest rank's number of batches (one
small allreduce per pass when the length is known, one per batch otherwise) and warns on
rank 0 when that drops batches. Keras `fit` does this by itself (ml_comm.keras).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator

import numpy as np

from . import api as mc


def shard(data, rank: int | None = None, nranks: int | None = None):
    """This rank's share: every nranks-th element starting at `rank` (a tf.data.Dataset
    is sharded with Dataset.shard, a NumPy array or a list of them by rows)."""
    rank = mc.get_rank() if rank is None else rank
    nranks = mc.get_nranks() if nranks is None else nranks
    if hasattr(data, "shard") and hasattr(data, "cardinality"):  # tf.data, without importing TF
        return data.shard(nranks, rank)
    if isinstance(data, (list, tuple)):
        return type(data)(np.asarray(a)[rank::nranks] for a in data)
    return np.asarray(data)[rank::nranks]


def _known_length(batches) -> int:
    if hasattr(batches, "cardinality"):
        n = int(batches.cardinality())
        return n if n >= 0 else -1
    try:
        return len(batches)
    except TypeError:
        return -1


def equal_steps(batches: Iterable, team: int = 0) -> Iterator:
    """Yield the batches of `batches`, stopping on every rank after the smallest rank's
    count (collective: every rank calls it, once per pass over its data)."""
    rank, nranks = mc.get_rank(), mc.get_nranks()
    length = _known_length(batches)
    table = np.zeros(nranks, np.float64)
    table[rank] = length
    mc.allreduce_sum(table, team)
    counts = [int(c) for c in table]
    if min(counts) >= 0:
        fewest = min(counts)
        if rank == 0 and len(set(counts)) > 1:
            dropped = ", ".join(str(c - fewest) for c in counts)
            print(
                f"ml_comm: warning: uneven data: ranks 0..{nranks - 1} have "
                f"{', '.join(map(str, counts))} batches; every rank runs {fewest}, "
                f"dropping {dropped}",
                file=sys.stderr,
                flush=True,
            )
        iterator = iter(batches)
        for _ in range(fewest):
            yield next(iterator)
        return
    # Length unknown somewhere: agree batch by batch (one small allreduce each).
    iterator = iter(batches)
    while True:
        item = next(iterator, _END)
        flag = np.array([0.0 if item is _END else 1.0])
        if mc.allreduce_sum(flag, team)[0] < nranks:
            return
        yield item


_END = object()
