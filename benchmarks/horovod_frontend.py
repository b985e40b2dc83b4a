"""Training throughput of Horovod's synthetic-benchmark step through ml_comm.horovod
(hvd.DistributedGradientTape) against the same step through ml_comm's own API
(mc.gradients), in one job, alternated: img/s per rank, the median of --runs runs each.

    mpiexec -n 2 .venv/bin/python benchmarks/horovod_frontend.py \
        --model MobileNetV3Small --batch-size 4 --image-size 96 --batches 10 --runs 3

The step is the one of Horovod's examples/tensorflow2/tensorflow2_synthetic_benchmark.py:
a keras.applications model without weights, random images, sparse categorical
cross-entropy, SGD(0.01), one reduction of all gradients per step (Average).
"""

from __future__ import annotations

import argparse
import statistics
import time

import keras
import tensorflow as tf

import ml_comm as mc
import ml_comm.horovod.tensorflow as hvd


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="MobileNetV3Small")
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--image-size", type=int, default=96)
    p.add_argument("--batches", type=int, default=10, help="timed batches per run")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--runs", type=int, default=3)
    args = p.parse_args()
    hvd.init()
    shape = (args.image_size, args.image_size, 3)
    model = getattr(keras.applications, args.model)(weights=None, input_shape=shape)
    opt = keras.optimizers.SGD(0.01)
    loss_fn = keras.losses.SparseCategoricalCrossentropy()
    data = tf.random.uniform([args.batch_size, *shape])
    target = tf.random.uniform([args.batch_size, 1], maxval=999, dtype=tf.int64)

    def grads_of():
        with tf.GradientTape() as tape:
            loss = loss_fn(target, model(data, training=True))
        return tape, loss

    @tf.function
    def horovod_step():
        tape, loss = grads_of()
        tape = hvd.DistributedGradientTape(tape)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))

    @tf.function
    def ml_comm_step():
        tape, loss = grads_of()
        grads = mc.gradients(tape.gradient(loss, model.trainable_variables))
        opt.apply_gradients(zip(grads, model.trainable_variables))

    hvd.broadcast_variables(model.variables, 0)
    steps = {"ml_comm.horovod": horovod_step, "ml_comm": ml_comm_step}
    for step in steps.values():
        for _ in range(args.warmup):
            step()
    rates: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(args.runs):
        for name, step in steps.items():
            mc.barrier()
            start = time.perf_counter()
            for _ in range(args.batches):
                step()
            mc.barrier()
            rates[name].append(args.batches * args.batch_size / (time.perf_counter() - start))
    if hvd.rank() == 0:
        medians = {name: statistics.median(r) for name, r in rates.items()}
        for name, r in rates.items():
            runs = ", ".join(f"{x:.1f}" for x in r)
            print(f"{name:16s} img/s per rank: median {medians[name]:.1f} (runs {runs})")
        ratio = medians["ml_comm.horovod"] / medians["ml_comm"]
        print(
            f"ratio ml_comm.horovod / ml_comm: {ratio:.3f} ({hvd.size()} ranks, {args.model}, "
            f"batch {args.batch_size}, {args.image_size}x{args.image_size})"
        )
    hvd.shutdown()


if __name__ == "__main__":
    main()
