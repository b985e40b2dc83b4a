"""How much of a TensorFlow step's gradient computation the reduction overlaps, by the
number of inter-op threads: Keras ResNet-50 (32x32 images, batch 16 per rank), its
gradients by GradientTape inside tf.function, timed three ways in one run, alternated:
the gradients only, the reduction only (mc.gradients of tensors of the same shapes that
exist before the step), and the gradients averaged by mc.gradients. Overlap: (gradients
+ reduction - both) / gradients, from the slowest rank's medians.

    srun -N 2 --ntasks-per-node=1 --mpi=pmi2 tools/pin_to_node_core.sh \\
        .venv/bin/python -P benchmarks/tf_overlap.py --inter-op 1

One intra-op thread; --inter-op 0 leaves TensorFlow's default (one per core the process
may use). Rank 0 prints the three medians per rank and the overlap; every average is
checked exactly once (integer-valued inputs on the reduction-only path).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import numpy as np  # noqa: E402

import ml_comm as mc  # noqa: E402

mc.init_mpi()  # before TensorFlow's threads


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--inter-op", type=int, default=2)
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--json", help="write the figures here (rank 0)")
    args = parser.parse_args()
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(args.inter_op)
    import keras

    model = keras.applications.ResNet50(weights=None, input_shape=(32, 32, 3), classes=10)
    weights = model.trainable_weights
    mc.init(2, 1, sum(int(np.prod(w.shape)) for w in weights), "tensorflow")
    mc.broadcast(weights)  # rank 0's weights, as a training script shares them
    rank, nranks = mc.get_rank(), mc.get_nranks()
    comm = mc.init_mpi().COMM_WORLD
    rng = np.random.default_rng(rank)
    x = tf.constant(rng.random((16, 32, 32, 3), np.float32))
    y = tf.constant(np.arange(16) % 10)
    loss_fn = keras.losses.SparseCategoricalCrossentropy()
    fixed = [
        tf.constant(np.full(w.shape, rank + 1 + i % 7, np.float32)) for i, w in enumerate(weights)
    ]

    def tape_gradients():
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        return tape.gradient(loss, weights)

    paths = {
        "gradients": tf.function(tape_gradients),
        "reduction": tf.function(lambda: mc.gradients([t * 1.0 for t in fixed])),
        "both": tf.function(lambda: mc.gradients(tape_gradients())),
    }
    times: dict[str, list[float]] = {name: [] for name in paths}
    wrong = 0
    for rep in range(args.warmup + args.reps):
        for name, fn in paths.items():
            comm.Barrier()
            start = time.perf_counter()
            out = fn()
            out[-1].numpy()
            if rep >= args.warmup:
                times[name].append(time.perf_counter() - start)
            if name == "reduction" and rep == args.warmup:
                want = [(nranks + 1) / 2 + i % 7 for i in range(len(fixed))]
                wrong = sum(int(np.count_nonzero(o.numpy() != w)) for o, w in zip(out, want))
    medians = {name: float(np.median(t)) for name, t in times.items()}
    every = comm.gather(medians)
    wrong = comm.allreduce(wrong)
    if rank == 0:
        slowest = {name: max(m[name] for m in every) for name in paths}
        g, r, b = slowest["gradients"], slowest["reduction"], slowest["both"]
        overlap = (g + r - b) / g
        print(f"# tf_overlap: {nranks} ranks, inter-op threads {args.inter_op} (0: default)")
        for name in paths:
            print(f"{name:>10} " + " ".join(f"{1e3 * m[name]:8.1f}" for m in every) + " ms")
        print(f"overlap {overlap:.0%} of the gradients' time; wrong elements {wrong}")
        if args.json:
            figures = {"inter_op": args.inter_op, "nranks": nranks, "median_s": slowest}
            figures.update(overlap=overlap, wrong=wrong)
            with open(args.json, "w") as f:
                json.dump(figures, f)
    mc.finalize()
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
