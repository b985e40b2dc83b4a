"""A serial Keras script with BackupAndRestore, plus the ml_comm lines.

    mpiexec -n N python keras_backup.py BACKUP OUT [SIGNAL_RANK SIGNAL_EPOCH SIGNAL_BATCH] TOKEN

Trains a small regression network for EPOCHS epochs on each rank's shard of fixed
integer-valued data (no shuffling, op determinism on), with
keras.callbacks.BackupAndRestore(BACKUP) and a ModelCheckpoint of the weights after each
epoch (OUT/checkpoint.weights.h5) as a serial script would use them. With
SIGNAL_*: that rank sends itself SIGTERM after that batch of that (0-based) epoch, as
Slurm would at a time limit. At the end every rank writes its final weights to
OUT/weights.rank<R>.npz and prints "done rank R"; rank 0 prints "epoch E" as each
epoch begins. ML_COMM_TEST_BATCH_SLEEP=S: sleep S seconds after each batch (a slower
training, so that a signal from outside finds it running); ML_COMM_TEST_EPOCHS:
epochs (default 5); ML_COMM_TEST_ACCUMULATE=K: Adam with gradient_accumulation_steps=K
and 7 batches per epoch (each epoch's backup then ends mid-cycle when K is even);
ML_COMM_TEST_CATCH_AT_INIT=1: catch the stop signals from init on
(as docs/faults.md advises where a signal may come during start-up), not only from fit on.
TOKEN is only there for the test's process search. Any Keras backend (KERAS_BACKEND).
"""

from __future__ import annotations

import os
import signal
import sys
import time

import ml_comm as mc

mc.init_mpi()  # before TensorFlow (docs/launch.md)

import keras  # noqa: E402
import numpy as np  # noqa: E402

import ml_comm.keras as mk  # noqa: E402

EPOCHS = int(os.environ.get("ML_COMM_TEST_EPOCHS", "5"))
ACCUMULATE = int(os.environ.get("ML_COMM_TEST_ACCUMULATE", "0")) or None
PER_RANK = 56 if ACCUMULATE else 64
BATCH = 8


class EpochLog(keras.callbacks.Callback):
    def on_epoch_begin(self, epoch, logs=None):
        if mc.get_rank() == 0:
            print(f"epoch {epoch}", flush=True)


class Slow(keras.callbacks.Callback):
    def __init__(self, seconds: float):
        super().__init__()
        self.seconds = seconds

    def on_train_batch_end(self, batch, logs=None):
        time.sleep(self.seconds)


class SignalAt(keras.callbacks.Callback):
    def __init__(self, epoch: int, batch: int):
        super().__init__()
        self.at = (epoch, batch)
        self.epoch = -1

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        if (self.epoch, batch) == self.at:
            print(f"rank {mc.get_rank()} sends itself SIGTERM at {time.time():.3f}", flush=True)
            os.kill(os.getpid(), signal.SIGTERM)


def main() -> int:
    backup_dir, out_dir = sys.argv[1], sys.argv[2]
    signal_at = [int(a) for a in sys.argv[3:6]] if len(sys.argv) > 4 else None
    keras.utils.set_random_seed(7)
    if keras.backend.backend() == "tensorflow":  # JAX and torch on CPU are deterministic
        import tensorflow as tf

        tf.config.experimental.enable_op_determinism()
    mk.init(1, 1)
    if os.environ.get("ML_COMM_TEST_CATCH_AT_INIT") == "1":
        mc.catch_stop_signals()
    rank, n = mc.get_rank(), mc.get_nranks()
    print(f"started rank {rank} pid {os.getpid()}", flush=True)
    rng = np.random.default_rng(11)
    x = rng.integers(-3, 4, size=(n * PER_RANK, 6)).astype(np.float32)
    y = (x @ np.arange(1, 7, dtype=np.float32))[:, None] / 8
    model = keras.Sequential(
        [keras.Input((6,)), keras.layers.Dense(12, activation="relu"), keras.layers.Dense(1)]
    )
    model.compile(
        optimizer=keras.optimizers.Adam(0.01, gradient_accumulation_steps=ACCUMULATE), loss="mse"
    )
    mk.set_team(model)
    callbacks = [
        keras.callbacks.BackupAndRestore(backup_dir),
        keras.callbacks.ModelCheckpoint(
            os.path.join(out_dir, "checkpoint.weights.h5"), save_weights_only=True
        ),
        EpochLog(),
    ]
    if os.environ.get("ML_COMM_TEST_BATCH_SLEEP"):
        callbacks.append(Slow(float(os.environ["ML_COMM_TEST_BATCH_SLEEP"])))
    if signal_at is not None and signal_at[0] == rank:
        callbacks.append(SignalAt(signal_at[1], signal_at[2]))
    model.fit(
        x[rank::n],
        y[rank::n],
        batch_size=BATCH,
        epochs=EPOCHS,
        shuffle=False,
        verbose=0,
        callbacks=callbacks,
    )
    np.savez(os.path.join(out_dir, f"weights.rank{rank}.npz"), *model.get_weights())
    print(f"done rank {rank}", flush=True)
    mk.finalize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
