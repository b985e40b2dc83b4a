"""Soak: a long Keras training at 2 ranks whose step time and resident memory must stay flat.

    .venv/bin/mpiexec -n 2 .venv/bin/python benchmarks/soak.py --steps 3000

A tiny model (8 -> 16 tanh -> 1, Adam) trained by `model.fit` under ml_comm.keras on each
rank's fixed integer-valued data, in epochs of --steps-per-epoch steps; a callback
samples each rank's resident memory (VmRSS of /proc/self/status) and the wall time every
--every steps. After --warmup steps, rank 0 fits straight lines through the samples
(least squares) and prints one line "RESULT {json}" with, per rank, the slopes of the
step time (microseconds per step, per 1,000 steps) and of resident memory (MB per 1,000
steps), and `flat`: memory growing by less than 1 MB per 1,000 steps on every rank.
Exit status 1 when it is not flat. Not part of the tests: it takes minutes.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import ml_comm as mc

mc.init_mpi()  # before TensorFlow

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import ml_comm.keras as mk  # noqa: E402


def resident_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    raise RuntimeError("no VmRSS in /proc/self/status")


class Sampler(keras.callbacks.Callback):
    def __init__(self, every: int):
        super().__init__()
        self.every = every
        self.step = 0
        self.samples: list[tuple[int, float, float]] = []  # (step, seconds, MB)

    def on_train_batch_end(self, batch, logs=None):
        self.step += 1
        if self.step % self.every == 0:
            self.samples.append((self.step, time.perf_counter(), resident_mb()))


def slope(xs, ys) -> float:
    return float(np.polyfit(np.asarray(xs, np.float64), np.asarray(ys, np.float64), 1)[0])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--steps-per-epoch", type=int, default=250)
    parser.add_argument("--warmup", type=int, default=500)
    parser.add_argument("--every", type=int, default=50)
    parser.add_argument("--batch", type=int, default=8)
    args = parser.parse_args()
    tf.config.threading.set_inter_op_parallelism_threads(2)
    tf.config.threading.set_intra_op_parallelism_threads(1)
    mk.init(1, 1)
    rank, nranks = mc.get_rank(), mc.get_nranks()
    rng = np.random.default_rng(rank)
    rows = args.steps_per_epoch * args.batch
    x = rng.integers(-3, 4, size=(rows, 8)).astype(np.float32)
    y = (x @ np.arange(1, 9, dtype=np.float32))[:, None] / 16
    keras.utils.set_random_seed(1)
    model = keras.Sequential(
        [keras.Input((8,)), keras.layers.Dense(16, activation="tanh"), keras.layers.Dense(1)]
    )
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="mse")
    sampler = Sampler(args.every)
    epochs = -(-args.steps // args.steps_per_epoch)
    started = time.perf_counter()
    model.fit(x, y, batch_size=args.batch, epochs=epochs, shuffle=False, verbose=0,
              callbacks=[sampler])  # fmt: skip
    total = time.perf_counter() - started
    kept = [s for s in sampler.samples if s[0] >= args.warmup]
    steps = [s[0] for s in kept]
    # Step time: the time between samples, per step, against the step it ends at.
    step_us = [1e6 * (b[1] - a[1]) / (b[0] - a[0]) for a, b in zip(kept, kept[1:])]
    mine = {
        "rank": rank,
        "step_us_mean": float(np.mean(step_us)),
        "step_us_per_1000_steps": 1000.0 * slope(steps[1:], step_us),
        "rss_mb_start": kept[0][2],
        "rss_mb_end": kept[-1][2],
        "rss_mb_per_1000_steps": 1000.0 * slope(steps, [s[2] for s in kept]),
    }
    table = np.zeros(nranks * 5)
    keys = list(mine)[1:]
    table[rank * 5 : rank * 5 + 5] = [mine[k] for k in keys]
    mc.allreduce_sum(table)
    per_rank = [
        {"rank": r, **dict(zip(keys, table[r * 5 : r * 5 + 5].tolist()))} for r in range(nranks)
    ]
    flat = all(p["rss_mb_per_1000_steps"] < 1.0 for p in per_rank)
    if rank == 0:
        result = {
            "ranks": nranks,
            "steps": sampler.step,
            "warmup": args.warmup,
            "seconds": round(total, 1),
            "per_rank": per_rank,
            "flat": flat,
        }
        print("RESULT " + json.dumps(result), flush=True)
    mk.finalize()
    return 0 if flat else 1


if __name__ == "__main__":
    sys.exit(main())
