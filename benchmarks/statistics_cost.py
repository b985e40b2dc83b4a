"""What averaging a model's statistics costs (`mk.share_statistics`, which `fit` runs at
each epoch's end and `evaluate` at its start): Keras ResNet-50 (32x32 images), timed
with its 53 moving means made to differ between the ranks (53 weights averaged), with
every statistic already the same (the digests only), and frozen (`trainable = False`:
all 23.6 M non-trainable values hashed, none averaged). Median, min and max of the last
5 of 8 calls on rank 0, each after a barrier.

    .venv/bin/mpiexec -n 2 .venv/bin/python benchmarks/statistics_cost.py

Every rank checks that the statistics are the same on all ranks after each call.
"""

from __future__ import annotations

import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402

import ml_comm as mc  # noqa: E402
import ml_comm.keras as mk  # noqa: E402

CALLS, WARMUP = 8, 3


def timed(model, prepare) -> tuple[list[float], int]:
    times, averaged = [], 0
    for _ in range(CALLS):
        prepare()
        mc.barrier()
        start = time.perf_counter()
        averaged = mk.share_statistics(model)
        times.append(time.perf_counter() - start)
        digest = np.concatenate([np.ravel(w) for w in model.get_weights()]).sum(dtype=np.float64)
        highest, minus_lowest = mc.allreduce(np.array([digest, -digest]), "max")
        if highest != -minus_lowest:  # the same verdict on every rank
            raise SystemExit("the ranks' weights differ after share_statistics")
    return times[WARMUP:], averaged


def main() -> None:
    mk.init()
    rank = mc.get_rank()
    model = keras.applications.ResNet50(weights=None, input_shape=(32, 32, 3), classes=10)
    model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")
    mk.broadcast_weights(model)
    means = [v for v in model.non_trainable_weights if v.path.endswith("moving_mean")]

    def differ():
        for v in means:
            v.assign(keras.ops.convert_to_numpy(v) + rank + 1.0)

    cases = [("53 moving means differ", differ), ("every statistic the same", lambda: None)]
    rows = []
    for name, prepare in cases:
        rows.append((name, *timed(model, prepare)))
    model.trainable = False
    rows.append(("frozen: every weight non-trainable, the same", *timed(model, lambda: None)))
    if rank == 0:
        values = sum(int(np.prod(v.shape)) for v in model.non_trainable_weights)
        print(f"{mc.get_nranks()} ranks, ResNet-50; frozen: {values} non-trainable values")
        for name, times, averaged in rows:
            ms = [1e3 * t for t in times]
            print(
                f"{name}: {averaged} averaged, median {np.median(ms):.1f} ms "
                f"({min(ms):.1f}-{max(ms):.1f})"
            )
    mk.finalize()


if __name__ == "__main__":
    main()
