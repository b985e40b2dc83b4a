"""Data-parallel training in a TensorFlow 1-style graph through ml_comm, with SessionRunHooks.

The same 64 -> 64 (ReLU) -> 10 MLP on scikit-learn's bundled digits as ``tf2_digits.py``,
written the way the Cray PE DL Plugin's listings were (``tf.compat.v1``, graph mode):

- the input is a ``tf.data`` pipeline over this rank's shard ``train[r::nranks]`` (all ranks
  make the same fixed-seed split);
- the training op is ``optimizer.compute_gradients(loss)`` -> ``mc.gradients(grads, 0)`` ->
  ``optimizer.apply_gradients(...)`` with a ``GradientDescentOptimizer``;
- ``BcastTensors``, a ``SessionRunHook``, builds ``mc.broadcast(trainable_variables, 0)`` in
  ``begin()`` and runs its results (they assign) in ``after_create_session``, so every rank
  starts from rank 0's (randomly initialised) variables;
- ``AverageMetrics`` fetches the batch loss/accuracy with each step, averages them over the
  ranks with ``mc.average`` every ``--log-every`` steps, scores the test set, and prints on
  rank 0 only;
- ``tf.compat.v1.train.MonitoredTrainingSession(checkpoint_dir=None)`` runs it until a
  ``StopAtStepHook``; no checkpoints are written;
- at the end the variables, fetched with ``session.run``, must be identical on all ranks
  (``mc.check_buffers_match``) and the test accuracy at least ``--min-accuracy``; otherwise
  the script exits with status 1.

Launch (any number of ranks, 1 included):

    .venv/bin/mpiexec -n 2 .venv/bin/python examples/tf1_graph_hooks.py
    .venv/bin/mpiexec -n 4 .venv/bin/python examples/tf1_graph_hooks.py --steps 400

and under Slurm, one rank per node:

    srun --ntasks-per-node=1 --mpi=pmi2 python examples/tf1_graph_hooks.py

``--batch-size`` is per rank: one step consumes ``batch_size * nranks`` training samples.
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

tf.compat.v1.disable_eager_execution()

N_FEATURES = 64
N_HIDDEN = 64
N_CLASSES = 10


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--steps", type=int, default=250, help="training steps (250)")
    p.add_argument("--batch-size", type=int, default=32, help="minibatch size per rank (32)")
    p.add_argument("--lr", type=float, default=0.1, help="SGD learning rate (0.1)")
    p.add_argument("--threads", type=int, default=2, help="ml_comm threads per team (2)")
    p.add_argument("--log-every", type=int, default=25, help="average and print every k steps")
    p.add_argument("--seed", type=int, default=0, help="seed of the split and the shuffles (0)")
    p.add_argument("--test-fraction", type=float, default=0.2, help="held-out fraction (0.2)")
    p.add_argument(
        "--min-accuracy", type=float, default=0.9, help="fail below this test accuracy (0.9)"
    )
    p.add_argument("--verbosity", type=int, default=0, help="ml_comm report verbosity 0/1/2")
    return p.parse_args(argv)


def mlp(x):
    """Logits of the 64 -> 64 -> 10 MLP; the variables are created on first call."""
    with tf.compat.v1.variable_scope("mlp", reuse=tf.compat.v1.AUTO_REUSE):
        init = tf.compat.v1.glorot_uniform_initializer()
        w1 = tf.compat.v1.get_variable("w1", [N_FEATURES, N_HIDDEN], initializer=init)
        b1 = tf.compat.v1.get_variable("b1", [N_HIDDEN], initializer=tf.zeros_initializer())
        w2 = tf.compat.v1.get_variable("w2", [N_HIDDEN, N_CLASSES], initializer=init)
        b2 = tf.compat.v1.get_variable("b2", [N_CLASSES], initializer=tf.zeros_initializer())
    h = tf.nn.relu(tf.matmul(x, w1) + b1)
    return tf.matmul(h, w2) + b2


def correct_count(logits, labels):
    predicted = tf.argmax(logits, 1, output_type=tf.int32)
    return tf.reduce_sum(tf.cast(tf.equal(predicted, labels), tf.float64))


class BcastTensors(tf.compat.v1.train.SessionRunHook):
    """Sets every rank's trainable variables to rank 0's once the session exists."""

    def __init__(self):
        self.bcast = None

    def begin(self):
        if not self.bcast:
            # running the results assigns rank 0's values to the variables
            self.bcast = tf.group(*mc.broadcast(tf.compat.v1.trainable_variables(), 0))

    def after_create_session(self, session, coord):
        session.run(self.bcast)


class AverageMetrics(tf.compat.v1.train.SessionRunHook):
    """Averages the training loss/accuracy over ranks every `every` steps; rank 0 prints.

    Every rank runs the same steps, so every rank reaches the collective ``mc.average``
    at the same global steps.
    """

    def __init__(self, loss_sum, correct, count, test_correct, n_test, every):
        self.fetches = {
            "loss_sum": loss_sum,
            "correct": correct,
            "count": count,
        }
        self.test_correct = test_correct
        self.n_test = n_test
        self.every = every
        self.stats = np.zeros(3)  # loss_sum, correct, count since the last report (float64)
        self.step = 0
        self.test_acc = 0.0
        self.t0 = 0.0

    def after_create_session(self, session, coord):
        self.t0 = time.perf_counter()

    def before_run(self, run_context):
        return tf.compat.v1.train.SessionRunArgs(self.fetches)

    def after_run(self, run_context, run_values):
        r = run_values.results
        self.stats += (r["loss_sum"], r["correct"], r["count"])
        self.step += 1
        if self.step % self.every == 0:
            self.report(run_context.session)

    def end(self, session):
        if self.stats[2] > 0:  # steps since the last report
            self.report(session)

    def report(self, session):
        mc.average(self.stats)  # ratios of the averages = ratios of the sums over all ranks
        test = np.array([session.run(self.test_correct), self.n_test], dtype=np.float64)
        mc.average(test)
        self.test_acc = test[0] / test[1]
        if mc.get_rank() == 0:
            print(
                f"step {self.step:4d}  loss {self.stats[0] / self.stats[2]:.4f}  "
                f"train acc {self.stats[1] / self.stats[2]:.4f}  test acc {self.test_acc:.4f}  "
                f"({time.perf_counter() - self.t0:.2f} s)",
                flush=True,
            )
        self.stats[:] = 0.0


class FetchAtEnd(tf.compat.v1.train.SessionRunHook):
    """Fetches the given tensors with the last session, before it closes."""

    def __init__(self, fetches):
        self.fetches = fetches
        self.values = None

    def end(self, session):
        self.values = session.run(self.fetches)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    mc.init_mpi()
    rank, nranks = mc.get_rank(), mc.get_nranks()

    x_train, y_train, x_test, y_test = load_data(args.seed, args.test_fraction)
    x_shard, y_shard = x_train[rank::nranks], y_train[rank::nranks]
    x_tshard, y_tshard = x_test[rank::nranks], y_test[rank::nranks]
    if len(y_shard) == 0:
        print(f"rank {rank}: {nranks} ranks for {len(y_train)} training samples", flush=True)
        return 2

    # Reproducible runs, with different random initial variables on each rank (so that the
    # broadcast matters: rank 0's win) and each rank shuffling its own shard differently.
    tf.compat.v1.set_random_seed(1000 + rank)

    # The input: this rank's shard, reshuffled each pass, endless; StopAtStepHook ends it.
    dataset = (
        tf.data.Dataset.from_tensor_slices((x_shard, y_shard))
        .shuffle(len(y_shard), seed=args.seed)
        .repeat()
        .batch(args.batch_size)
    )
    x, y = tf.compat.v1.data.make_one_shot_iterator(dataset).get_next()

    logits = mlp(x)
    losses = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits)
    loss = tf.reduce_mean(losses)
    global_step = tf.compat.v1.train.get_or_create_global_step()

    n_params = sum(v.shape.num_elements() for v in tf.compat.v1.trainable_variables())
    mc.init(args.threads, 1, n_params, "tensorflow")
    # ksteps >= max_steps: every step synchronous (gradients() returns this step's average).
    mc.config_team(0, mc.ALG_AUTO, args.steps, args.steps, args.verbosity, args.log_every)

    optimizer = tf.compat.v1.train.GradientDescentOptimizer(args.lr)
    grads_and_vars = optimizer.compute_gradients(loss)
    grads = mc.gradients([g for g, v in grads_and_vars], 0)
    train_op = optimizer.apply_gradients(
        zip(grads, [v for g, v in grads_and_vars]), global_step=global_step
    )

    test_correct = correct_count(mlp(tf.constant(x_tshard)), tf.constant(y_tshard))
    metrics = AverageMetrics(
        tf.reduce_sum(tf.cast(losses, tf.float64)),
        correct_count(logits, y),
        tf.cast(tf.size(y), tf.float64),
        test_correct,
        len(y_tshard),
        args.log_every,
    )
    final = FetchAtEnd(tf.compat.v1.trainable_variables())

    if rank == 0:
        print(
            f"# digits MLP (TensorFlow {tf.__version__}, compat.v1 graph + SessionRunHooks): "
            f"{nranks} rank(s), {n_params} parameters, {args.threads} ml_comm thread(s)/team, "
            f"{len(y_train)} train / {len(y_test)} test samples, batch {args.batch_size}/rank, "
            f"{args.steps} steps, lr {args.lr}",
            flush=True,
        )

    hooks = [
        BcastTensors(),
        tf.compat.v1.train.StopAtStepHook(last_step=args.steps),
        metrics,
        final,
    ]
    with tf.compat.v1.train.MonitoredTrainingSession(
        checkpoint_dir=None, hooks=hooks, log_step_count_steps=None
    ) as session:
        while not session.should_stop():
            session.run(train_op)

    ok = True
    if mc.check_buffers_match(final.values) != 0:
        ok = False
        print(f"rank {rank}: FAILED: the variables differ across ranks", flush=True)
    test_acc = metrics.test_acc
    if test_acc < args.min_accuracy:
        ok = False
        if rank == 0:
            print(f"FAILED: test accuracy {test_acc:.4f} < {args.min_accuracy}", flush=True)
    if ok and rank == 0:
        print(
            f"OK: variables identical on all {nranks} rank(s), test accuracy {test_acc:.4f}",
            flush=True,
        )
    mc.finalize()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
