"""Data-parallel Keras 3 training through ml_comm: model.fit on the digits data.

A Keras ``Sequential`` 64 -> 64 (ReLU) -> 10 on scikit-learn's bundled 8x8 digits
(``sklearn.datasets.load_digits()``: shipped with the package, nothing is downloaded),
trained with ``model.fit``. The script is a serial Keras script plus two calls of
``ml_comm.keras``: ``init()`` before training and ``finalize()`` at the end. Every MPI
rank is a worker:

- all ranks make the same fixed-seed train/test split; rank r trains on ``train[r::nranks]``
  (cut to a common length: every rank must run the same number of steps);
- each rank builds the model with its own random initial weights; the first ``fit``
  broadcasts rank 0's weights, and every step's gradients are averaged over the ranks
  (``ml_comm.gradients`` on team 0);
- ``fit`` shows global metrics at each epoch's end (training loss/accuracy, and the
  validation accuracy over all ranks' shards of the test set); only rank 0 prints Keras'
  progress; ``evaluate`` gives the test accuracy over the whole test set on every rank;
- the learning rate is scaled linearly with the number of ranks, reached after a warm-up of
  one epoch (``ml_comm.keras.scale_learning_rate``), since a step consumes
  ``nranks * batch_size`` samples;
- at the end the weights must be identical on all ranks (``mc.check_buffers_match``) and the
  test accuracy (counted over the whole test set) at least ``--min-accuracy``; otherwise
  the script exits with status 1.

Launch (any number of ranks, 1 included):

    .venv/bin/mpiexec -n 2 .venv/bin/python examples/keras_digits.py
    .venv/bin/mpiexec -n 4 .venv/bin/python examples/keras_digits.py --epochs 20 --threads 1

and under Slurm, one rank per node:

    srun --ntasks-per-node=1 --mpi=pmi2 python examples/keras_digits.py
"""

from __future__ import annotations

import argparse
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # before TensorFlow is imported
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # noqa: E402
from digits_data import load_data  # noqa: E402

import ml_comm as mc  # noqa: E402
import ml_comm.keras as mk  # noqa: E402

N_FEATURES = 64
N_HIDDEN = 64
N_CLASSES = 10


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--epochs", type=int, default=10, help="passes over the training set (10)")
    p.add_argument("--batch-size", type=int, default=32, help="minibatch size per rank (32)")
    p.add_argument(
        "--lr", type=float, default=0.05, help="SGD learning rate of one rank (0.05), x nranks"
    )
    p.add_argument("--threads", type=int, default=2, help="ml_comm threads per team (2)")
    p.add_argument("--seed", type=int, default=0, help="seed of the split and the shuffles (0)")
    p.add_argument("--test-fraction", type=float, default=0.2, help="held-out fraction (0.2)")
    p.add_argument(
        "--min-accuracy", type=float, default=0.9, help="fail below this test accuracy (0.9)"
    )
    p.add_argument("--checkpoint", help="save the best weights here (rank 0 writes), .weights.h5")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    mk.init(nthread_per_team=args.threads)  # msglen: ml_comm.keras's default buffer
    rank, nranks = mc.get_rank(), mc.get_nranks()

    x_train, y_train, x_test, y_test = load_data(args.seed, args.test_fraction)
    shard_len, val_len = len(y_train) // nranks, len(y_test) // nranks
    if shard_len == 0 or val_len == 0:
        print(f"rank {rank}: {nranks} ranks for {len(y_train)} training samples", flush=True)
        return 2
    x_shard, y_shard = x_train[rank::nranks][:shard_len], y_train[rank::nranks][:shard_len]
    # Validation shards of any size: fit's val_accuracy is over all of them together.
    x_val, y_val = x_test[rank::nranks], y_test[rank::nranks]
    steps_per_epoch = -(-shard_len // args.batch_size)

    keras.utils.set_random_seed(1000 + rank)  # different weights and shuffles on each rank
    model = keras.Sequential(
        [
            keras.Input((N_FEATURES,)),
            keras.layers.Dense(N_HIDDEN, activation="relu"),
            keras.layers.Dense(N_CLASSES),
        ]
    )
    lr = mk.scale_learning_rate(args.lr, warmup_steps=steps_per_epoch)
    model.compile(
        optimizer=keras.optimizers.SGD(learning_rate=lr),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )

    if rank == 0:
        print(
            f"# digits MLP (Keras {keras.__version__}, model.fit): {nranks} rank(s), "
            f"{model.count_params()} parameters, {args.threads} ml_comm thread(s)/team, "
            f"{len(y_train)} train / {len(y_test)} test samples, batch {args.batch_size}/rank, "
            f"{steps_per_epoch} steps/epoch, lr {args.lr} x {nranks} after 1 epoch of warm-up",
            flush=True,
        )

    callbacks = []
    if args.checkpoint:
        callbacks.append(
            mk.ModelCheckpoint(
                args.checkpoint, monitor="val_accuracy", save_best_only=True, save_weights_only=True
            )
        )
    model.fit(
        x_shard,
        y_shard,
        batch_size=args.batch_size,
        epochs=args.epochs,
        validation_data=(x_val, y_val),
        callbacks=callbacks,
        verbose=2,  # one line per epoch, on rank 0 only
    )

    # Test accuracy over the whole test set: evaluate combines the ranks' shards.
    test_acc = model.evaluate(x_val, y_val, verbose=0, return_dict=True)["accuracy"]

    ok = True
    if mc.check_buffers_match(model.get_weights()) != 0:
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
    mk.finalize()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
