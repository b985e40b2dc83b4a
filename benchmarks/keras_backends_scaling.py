"""Keras `fit` of ResNet-50 (keras.applications, 23.6 M parameters, 32x32 images) with
ml_comm.keras on the backend KERAS_BACKEND names: images per second on this launch's
ranks, for the efficiency of N nodes against 1 (N * 1-node throughput) per backend.

    srun -N 1 --ntasks-per-node=1 --mpi=pmi2 tools/pin_to_node_core.sh \\
        .venv-jax/bin/python -P benchmarks/keras_backends_scaling.py
    srun -N 2 ... the same             # rank 0 prints one line "RESULT {json}"

Every backend gets one compute thread (the test bed gives each node's rank one core);
TensorFlow two inter-op threads on that core, as docs/launch.md advises (`--tf-interop 1`:
one, which leaves some weight gradients until backprop's end, so nothing overlaps); JAX
and torch hand each gradient over as backprop produces it (`--overlap-backprop off`: all
of them in the optimizer's apply, after backprop). The
batch is per rank (weak scaling). Time: from the end of the last warm-up batch to the end
of the last batch, the slowest rank's.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import ml_comm as mc

mc.init_mpi()  # before the framework's threads


def one_thread(backend: str, tf_interop: int) -> None:
    if backend == "jax":
        os.environ["XLA_FLAGS"] = (
            os.environ.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=false"
        )
    elif backend == "torch":
        import torch

        torch.set_num_threads(1)
        torch.set_num_interop_threads(1)
    elif backend == "tensorflow":
        import tensorflow as tf

        tf.config.threading.set_intra_op_parallelism_threads(1)
        tf.config.threading.set_inter_op_parallelism_threads(tf_interop)


def overlapped_steps(backend: str) -> int | None:
    """This rank's steps whose gradients were handed over during backprop (JAX, torch)."""
    if backend == "jax":
        from ml_comm.jax import handler

        return handler.overlapped_steps()
    if backend == "torch":
        from ml_comm.keras.backend.torch import overlap

        return overlap.overlapped_steps()
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--tf-interop", type=int, default=2)
    parser.add_argument(
        "--overlap-backprop",
        choices=("on", "off"),
        default="on",
        help="JAX, torch: gradients handed over during backprop (on) or averaged in apply (off)",
    )
    args = parser.parse_args()
    backend = os.environ.get("KERAS_BACKEND", "tensorflow")
    one_thread(backend, args.tf_interop)
    import keras
    import numpy as np

    import ml_comm.keras as mk

    mk.init(overlap_backprop=args.overlap_backprop == "on")
    rank, nranks = mc.get_rank(), mc.get_nranks()
    keras.utils.set_random_seed(rank)
    model = keras.applications.ResNet50(weights=None, input_shape=(32, 32, 3), classes=10)
    model.compile(
        optimizer=keras.optimizers.SGD(0.01, momentum=0.9), loss="sparse_categorical_crossentropy"
    )
    rng = np.random.default_rng(rank)
    steps = args.warmup + args.steps
    x = rng.normal(size=(steps * args.batch, 32, 32, 3)).astype(np.float32)
    y = rng.integers(0, 10, size=steps * args.batch).astype(np.int32)
    ends: list[float] = []

    class Clock(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            ends.append(time.perf_counter())

    model.fit(x, y, batch_size=args.batch, epochs=1, shuffle=False, verbose=0, callbacks=[Clock()])
    seconds = ends[-1] - ends[args.warmup - 1]
    comm = mc.init_mpi().COMM_WORLD
    slowest = comm.allreduce(seconds, op=mc.init_mpi().MAX)
    if rank == 0:
        result = {
            "backend": backend,
            "keras": keras.__version__,
            "nranks": nranks,
            "batch": args.batch,
            "tf_interop": args.tf_interop if backend == "tensorflow" else None,
            "overlap_backprop": args.overlap_backprop if backend != "tensorflow" else None,
            "steps": args.steps,
            "params": int(model.count_params()),
            "seconds": slowest,
            "images_per_s": nranks * args.batch * args.steps / slowest,
            "tensorflow_imported": "tensorflow" in sys.modules,
            "overlapped_steps": overlapped_steps(backend),
        }
        print("RESULT " + json.dumps(result), flush=True)
    mk.finalize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
