"""Data-parallel training in TensorFlow 2 through ml_comm: a small MLP on the digits data.

A 64 -> 64 (ReLU) -> 10 multilayer perceptron (float32) on scikit-learn's bundled 8x8 digits
(``sklearn.datasets.load_digits()``: shipped with the package, nothing is downloaded), trained
with a ``tf.GradientTape`` inside a ``tf.function``. Every MPI rank is a worker:

- all ranks make the same fixed-seed train/test split; rank r trains on ``train[r::nranks]``;
- each rank draws its own random initial weights, then ``mc.broadcast`` assigns rank 0's values
  to every rank's variables;
- each step computes the local gradients, averages them over the ranks with
  ``mc.gradients(grads)`` (TensorFlow ops inside the ``tf.function``) and applies a plain SGD
  update, so the weights stay identical on all ranks;
- after each epoch the training loss/accuracy and the test accuracy (each rank scores its
  shard of the test set) are averaged over the ranks with ``mc.average``; rank 0 prints them;
- at the end the weights must be identical on all ranks (``mc.check_buffers_match``) and the
  test accuracy at least ``--min-accuracy``; otherwise the script exits with status 1.

Launch (any number of ranks, 1 included):

    .venv/bin/mpiexec -n 2 .venv/bin/python examples/tf2_digits.py
    .venv/bin/mpiexec -n 4 .venv/bin/python examples/tf2_digits.py --epochs 20 --threads 1

and under Slurm, one rank per node:

    srun --ntasks-per-node=1 --mpi=pmi2 python examples/tf2_digits.py

``--batch-size`` is per rank: one step consumes ``batch_size * nranks`` training samples, so
``--lr`` is the learning rate of that global batch. The update is written out
(``v.assign_sub(lr * g)``) rather than left to a Keras optimizer, which keeps the example free
of Keras-version details; ``tf.keras.optimizers.SGD().apply_gradients(zip(grads, vars))`` on
Keras variables works the same way with the averaged gradients.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # before TensorFlow is imported

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from digits_data import load_data  # noqa: E402

import ml_comm as mc  # noqa: E402

N_FEATURES = 64
N_HIDDEN = 64
N_CLASSES = 10


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--epochs", type=int, default=10, help="passes over the training set (10)")
    p.add_argument("--batch-size", type=int, default=32, help="minibatch size per rank (32)")
    p.add_argument("--lr", type=float, default=0.1, help="SGD learning rate (0.1)")
    p.add_argument("--threads", type=int, default=2, help="ml_comm threads per team (2)")
    p.add_argument("--seed", type=int, default=0, help="seed of the split and the shuffles (0)")
    p.add_argument("--test-fraction", type=float, default=0.2, help="held-out fraction (0.2)")
    p.add_argument(
        "--min-accuracy", type=float, default=0.9, help="fail below this test accuracy (0.9)"
    )
    p.add_argument("--verbosity", type=int, default=0, help="ml_comm report verbosity 0/1/2")
    p.add_argument(
        "--compression",
        choices=("none", "bf16", "fp16"),
        default=None,
        help="16-bit values on the wire for the gradients' ring reductions (default: "
        "ML_COMM_COMPRESSION, else none); this small model's gradients take the ring only "
        "with ML_COMM_LATENCY_BYTES=0 ML_COMM_DIRECT_BYTES=0",
    )
    return p.parse_args(argv)


class MLP(tf.Module):
    """64 -> 64 (ReLU) -> 10, with Glorot-uniform weights drawn from `rng`."""

    def __init__(self, rng: np.random.Generator):
        super().__init__()

        def glorot(fan_in, fan_out):
            limit = np.sqrt(6.0 / (fan_in + fan_out))
            return rng.uniform(-limit, limit, size=(fan_in, fan_out)).astype(np.float32)

        self.w1 = tf.Variable(glorot(N_FEATURES, N_HIDDEN), name="w1")
        self.b1 = tf.Variable(np.zeros(N_HIDDEN, np.float32), name="b1")
        self.w2 = tf.Variable(glorot(N_HIDDEN, N_CLASSES), name="w2")
        self.b2 = tf.Variable(np.zeros(N_CLASSES, np.float32), name="b2")
        self.params = [self.w1, self.b1, self.w2, self.b2]  # a fixed order, the same on all ranks

    def __call__(self, x):
        h = tf.nn.relu(x @ self.w1 + self.b1)
        return h @ self.w2 + self.b2


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    mc.init_mpi()
    rank, nranks = mc.get_rank(), mc.get_nranks()

    x_train, y_train, x_test, y_test = load_data(args.seed, args.test_fraction)
    # This rank's shards. Every rank must make the same number of gradients() calls, so an
    # epoch is as many steps as the smallest shard needs; the ranks with one extra sample
    # leave a different random one out each epoch.
    x_shard, y_shard = x_train[rank::nranks], y_train[rank::nranks]
    x_tshard, y_tshard = x_test[rank::nranks], y_test[rank::nranks]
    shard_len = len(y_train) // nranks
    if shard_len == 0:
        print(f"rank {rank}: {nranks} ranks for {len(y_train)} training samples", flush=True)
        return 2
    steps_per_epoch = -(-shard_len // args.batch_size)
    max_steps = args.epochs * steps_per_epoch

    # Different random weights on each rank, so that the broadcast matters: rank 0's win.
    model = MLP(np.random.default_rng(1000 + rank))
    n_params = sum(int(np.prod(v.shape)) for v in model.params)

    mc.init(args.threads, 1, n_params, "tensorflow")
    # ksteps >= max_steps: every step synchronous (gradients() returns this step's average).
    mc.config_team(
        0,
        mc.ALG_AUTO,
        max_steps,
        max_steps,
        args.verbosity,
        steps_per_epoch,
        compression=args.compression,
    )

    if rank == 0:
        print(
            f"# digits MLP (TensorFlow {tf.__version__}, tf.function + GradientTape): "
            f"{nranks} rank(s), {n_params} parameters, {args.threads} ml_comm thread(s)/team, "
            f"{len(y_train)} train / {len(y_test)} test samples, batch {args.batch_size}/rank, "
            f"{steps_per_epoch} steps/epoch, lr {args.lr}, "
            f"compression {mc.team_settings(0)['compression']}",
            flush=True,
        )

    mc.broadcast(model.params, root=0)  # assigns rank 0's values to the variables
    if mc.check_buffers_match([v.numpy() for v in model.params]) != 0:
        print(f"rank {rank}: FAILED: weights differ across ranks after broadcast", flush=True)
        return 1

    lr = tf.constant(args.lr, tf.float32)
    spec = [tf.TensorSpec([None, N_FEATURES], tf.float32), tf.TensorSpec([None], tf.int32)]

    @tf.function(input_signature=spec)
    def train_step(x, y):
        with tf.GradientTape() as tape:
            logits = model(x)
            losses = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits)
            loss = tf.reduce_mean(losses)
        grads = tape.gradient(loss, model.params)
        grads = mc.gradients(grads)  # averaged over all ranks, same order and shapes
        for v, g in zip(model.params, grads):
            v.assign_sub(lr * g)
        correct = tf.reduce_sum(tf.cast(tf.equal(tf.argmax(logits, 1, tf.int32), y), tf.float64))
        return tf.reduce_sum(tf.cast(losses, tf.float64)), correct

    @tf.function(input_signature=spec)
    def count_correct(x, y):
        predicted = tf.argmax(model(x), 1, tf.int32)
        return tf.reduce_sum(tf.cast(tf.equal(predicted, y), tf.float64))

    shuffle_rng = np.random.default_rng([args.seed, rank])  # each rank shuffles its own shard
    t0 = time.perf_counter()
    test_acc = 0.0
    for epoch in range(1, args.epochs + 1):
        order = shuffle_rng.permutation(len(y_shard))[:shard_len]
        stats = np.zeros(3)  # loss_sum, correct, count over this rank's batches (float64)
        for step in range(steps_per_epoch):
            idx = order[step * args.batch_size : (step + 1) * args.batch_size]
            loss_sum, correct = train_step(x_shard[idx], y_shard[idx])
            stats += (loss_sum.numpy(), correct.numpy(), len(idx))
        mc.average(stats)  # ratios of the averages = ratios of the sums over all ranks
        test = np.array([count_correct(x_tshard, y_tshard).numpy(), len(y_tshard)])
        mc.average(test)
        test_acc = test[0] / test[1]
        if rank == 0:
            print(
                f"epoch {epoch:3d}  loss {stats[0] / stats[2]:.4f}  "
                f"train acc {stats[1] / stats[2]:.4f}  test acc {test_acc:.4f}  "
                f"({time.perf_counter() - t0:.2f} s)",
                flush=True,
            )

    ok = True
    if mc.check_buffers_match([v.numpy() for v in model.params]) != 0:
        ok = False
        print(f"rank {rank}: FAILED: the weights differ across ranks", flush=True)
    if test_acc < args.min_accuracy:
        ok = False
        if rank == 0:
            print(f"FAILED: test accuracy {test_acc:.4f} < {args.min_accuracy}", flush=True)
    if ok and rank == 0:
        print(
            f"OK: weights identical on all {nranks} rank(s), test accuracy {test_acc:.4f}",
            flush=True,
        )
    mc.finalize()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
