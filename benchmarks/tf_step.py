"""Training-step cost of ml_comm in TensorFlow, and how much of its communication
overlaps backprop.

    # 1 rank: step time with and without mc.gradients, interleaved, on ResNet-50
    .venv/bin/python benchmarks/tf_step.py --model resnet50 --batch 4 --steps 10
    # 2 ranks with the timeline: fraction of communication that ran during backprop
    ML_COMM_TIMELINE=/tmp/tl/trace.json .venv/bin/mpiexec -n 2 .venv/bin/python \\
        benchmarks/tf_step.py --model resnet50 --batch 2 --steps 5 --only-mlcomm

Each step is a tf.function: forward, GradientTape backprop, (mc.gradients), SGD
update. Step times are medians; the two variants alternate step by step so the
machine's noise hits both alike. Only rank 0 prints.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import ml_comm as mc  # noqa: E402


def build_model(name: str) -> tf.keras.Model:
    if name == "resnet50":
        return tf.keras.applications.ResNet50(weights=None, input_shape=(224, 224, 3))
    inputs = tf.keras.Input((32, 32, 3))
    x = inputs
    for width in (32, 32, 64, 64, 128, 128):
        x = tf.keras.layers.Conv2D(width, 3, padding="same", activation="relu")(x)
    x = tf.keras.layers.GlobalAveragePooling2D()(x)
    outputs = tf.keras.layers.Dense(10)(x)
    return tf.keras.Model(inputs, outputs)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--model", choices=["resnet50", "cnn"], default="resnet50")
    ap.add_argument("--batch", type=int, default=4, help="per rank")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2, help="ml_comm threads per team")
    ap.add_argument("--only-mlcomm", action="store_true", help="skip the step without ml_comm")
    args = ap.parse_args()

    model = build_model(args.model)
    variables = model.trainable_variables
    nparams = int(sum(np.prod(v.shape) for v in variables))
    mc.init(args.threads, 1, nparams, "tensorflow")
    rank, nranks = mc.get_rank(), mc.get_nranks()
    for v, value in zip(variables, mc.broadcast(variables, root=0)):
        v.assign(value)
    shape = model.input_shape[1:]
    rng = np.random.default_rng(rank)
    x = tf.constant(rng.normal(size=(args.batch, *shape)).astype(np.float32))
    y = tf.constant(rng.integers(0, model.output_shape[-1], size=args.batch))
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=args.model != "resnet50")

    def make_step(aggregate: bool):
        @tf.function
        def step():
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x, training=True))
            grads = tape.gradient(loss, variables)
            if aggregate:
                grads = mc.gradients(grads)
            for v, g in zip(variables, grads):
                v.assign_sub(1e-3 * g)
            return loss

        return step

    variants = {"ml_comm": make_step(True)}
    if not args.only_mlcomm:
        variants["plain"] = make_step(False)
    times: dict[str, list[float]] = {k: [] for k in variants}
    for step in variants.values():  # trace and warm up
        step()
    for _ in range(args.steps):
        for name, step in variants.items():
            mc.barrier()
            t0 = time.perf_counter()
            step().numpy()
            times[name].append(time.perf_counter() - t0)
    if rank == 0:
        print(
            f"# model {args.model}: {len(variables)} gradient tensors, {nparams} parameters; "
            f"{nranks} rank(s), batch {args.batch}/rank, {args.steps} steps, "
            f"{args.threads} threads/team, TensorFlow {tf.__version__}"
        )
        for name, ts in times.items():
            print(
                f"{name:8s} median step {statistics.median(ts) * 1e3:9.1f} ms  "
                f"(min {min(ts) * 1e3:.1f}, max {max(ts) * 1e3:.1f})"
            )
        if "plain" in times:
            ratio = statistics.median(times["ml_comm"]) / statistics.median(times["plain"])
            print(f"overhead of mc.gradients: {100 * (ratio - 1):+.1f} %")
    mc.finalize()  # writes this rank's timeline
    if os.environ.get("ML_COMM_TIMELINE"):
        from mpi4py import MPI

        from ml_comm.core import timeline

        MPI.COMM_WORLD.Barrier()  # every rank has written its file
    if rank == 0 and os.environ.get("ML_COMM_TIMELINE"):
        summary = timeline.summarize(timeline.path_for(r, nranks) for r in range(nranks))
        print("timeline: " + ", ".join(f"{k} {v:.4g}" for k, v in summary.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
