"""Data-parallel training in NumPy through ml_comm: softmax regression on the digits data.

Multinomial logistic regression (weights 64x10 + bias 10, L2 penalty) on scikit-learn's
bundled 8x8 digits (``sklearn.datasets.load_digits()``: shipped with the package, nothing is
downloaded). Every MPI rank is a worker:

- all ranks make the same fixed-seed train/test split; rank r trains on ``train[r::nranks]``;
- initial weights are drawn differently on each rank, then ``mc.broadcast`` makes them rank 0's;
- each step computes the gradients of a local minibatch and averages them with
  ``mc.gradients([gW, gb])``; every rank applies the same update, so the weights stay identical;
- after each epoch the training loss/accuracy are averaged over ranks (``mc.average``) and the
  test accuracy is summed over ranks' test shards (``mc.allreduce_sum``); rank 0 prints them;
- at the end the weights must be bit-identical on all ranks (``mc.check_buffers_match``) and the
  test accuracy above ``--min-accuracy``; otherwise the script exits non-zero.

Launch (any number of ranks, 1 included; it runs in a few seconds):

    .venv/bin/mpiexec -n 2 .venv/bin/python examples/digits_numpy.py
    .venv/bin/mpiexec -n 4 .venv/bin/python examples/digits_numpy.py --epochs 20 --threads 1

and under Slurm, one rank per node:

    srun --ntasks-per-node=1 --mpi=pmi2 python examples/digits_numpy.py

``--batch-size`` is per rank: one step consumes ``batch_size * nranks`` training samples.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
from digits_data import load_data

import ml_comm as mc

N_FEATURES = 64
N_CLASSES = 10


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--epochs", type=int, default=15, help="passes over the training set (15)")
    p.add_argument("--batch-size", type=int, default=32, help="minibatch size per rank (32)")
    p.add_argument("--lr", type=float, default=0.5, help="SGD learning rate (0.5)")
    p.add_argument("--l2", type=float, default=1e-4, help="L2 penalty on the weights (1e-4)")
    p.add_argument("--threads", type=int, default=2, help="ml_comm threads per team (2)")
    p.add_argument("--seed", type=int, default=0, help="seed of the split and the shuffles (0)")
    p.add_argument("--test-fraction", type=float, default=0.2, help="held-out fraction (0.2)")
    p.add_argument(
        "--min-accuracy", type=float, default=0.9, help="fail below this test accuracy (0.9)"
    )
    p.add_argument("--verbosity", type=int, default=0, help="ml_comm report verbosity 0/1/2")
    return p.parse_args(argv)


def forward(w: np.ndarray, b: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Class probabilities (softmax of the logits), float32."""
    logits = x @ w + b
    logits -= logits.max(axis=1, keepdims=True)
    e = np.exp(logits)
    return e / e.sum(axis=1, keepdims=True)


def loss_and_grads(w, b, x, y, l2):
    """Mean cross-entropy of the batch (+ L2) and its gradients; also the batch's stats."""
    p = forward(w, b, x)
    n = len(y)
    rows = np.arange(n)
    nll = -np.log(np.maximum(p[rows, y], 1e-12).astype(np.float64))
    d = p.copy()
    d[rows, y] -= 1.0
    d /= n
    gw = x.T @ d + l2 * w
    gb = d.sum(axis=0)
    correct = int((p.argmax(axis=1) == y).sum())
    return float(nll.sum()), correct, gw.astype(np.float32), gb.astype(np.float32)


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

    n_params = N_FEATURES * N_CLASSES + N_CLASSES
    mc.init(args.threads, 1, n_params)
    # ksteps >= max_steps: every step synchronous (gradients() returns this step's average).
    mc.config_team(0, mc.ALG_AUTO, max_steps, max_steps, verbosity=args.verbosity)

    if rank == 0:
        info = mc.version_info()
        print(
            f"# digits softmax regression: {nranks} rank(s), ml_comm {info.get('ml_comm')}, "
            f"{args.threads} thread(s)/team, {len(y_train)} train / {len(y_test)} test samples, "
            f"batch {args.batch_size}/rank, {steps_per_epoch} steps/epoch, lr {args.lr}",
            flush=True,
        )

    # Different random weights on each rank, so the broadcast is visible: rank 0's win.
    rng = np.random.default_rng(1000 + rank)
    w = (0.01 * rng.standard_normal((N_FEATURES, N_CLASSES))).astype(np.float32)
    b = (0.01 * rng.standard_normal(N_CLASSES)).astype(np.float32)
    mc.broadcast([w, b], root=0)
    if mc.check_buffers_match([w, b]) != 0:
        print(f"rank {rank}: weights differ across ranks right after broadcast", flush=True)
        return 1

    shuffle_rng = np.random.default_rng([args.seed, rank])  # each rank shuffles its own shard
    t0 = time.perf_counter()
    test_acc = 0.0
    for epoch in range(1, args.epochs + 1):
        order = shuffle_rng.permutation(len(y_shard))[:shard_len]
        stats = np.zeros(3)  # loss_sum, correct, count over this rank's batches (float64)
        for step in range(steps_per_epoch):
            idx = order[step * args.batch_size : (step + 1) * args.batch_size]
            loss_sum, correct, gw, gb = loss_and_grads(w, b, x_shard[idx], y_shard[idx], args.l2)
            gw, gb = mc.gradients([gw, gb])  # averaged over ranks, same shapes and dtypes
            w -= args.lr * gw
            b -= args.lr * gb
            stats += (loss_sum, correct, len(idx))
        mc.average(stats)  # ratios of the averages = ratios of the sums over all ranks
        p = forward(w, b, x_tshard)
        test = np.array([(p.argmax(axis=1) == y_tshard).sum(), len(y_tshard)], dtype=np.float64)
        mc.allreduce_sum(test)
        test_acc = test[0] / test[1]
        if rank == 0:
            print(
                f"epoch {epoch:3d}  loss {stats[0] / stats[2]:.4f}  "
                f"train acc {stats[1] / stats[2]:.4f}  test acc {test_acc:.4f}  "
                f"({time.perf_counter() - t0:.2f} s)",
                flush=True,
            )

    ok = True
    if mc.check_buffers_match([w, b]) != 0:
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
