"""Keras fit stops on every rank at the same batch once one rank asked to stop (what a
caught signal does), on a synchronous team, and on a pipelined one at the end of the
epoch (after its metrics' allreduce) or, with per-batch global metrics, at the same
batch as a synchronous one; it returns when the
user passes StopTogether(exit_code=None); BackupAndRestore and ModelCheckpoint write on
rank 0 only. (Signals, exit status 75 and an exact resume: tests/faults/
test_keras_backup_job.py.)"""

from __future__ import annotations

import contextlib
import os
import signal

import keras
import numpy as np
import pytest
import tensorflow as tf
from keras_helpers import keras_ml_comm_session
from mpi_helpers import Checks, comm_world

import ml_comm as mc
import ml_comm.keras as mk
from ml_comm.keras.callbacks import StopTogether

pytestmark = pytest.mark.mpi

with contextlib.suppress(RuntimeError):
    tf.config.threading.set_inter_op_parallelism_threads(2)
    tf.config.threading.set_intra_op_parallelism_threads(1)

ASK_AT = 3
BATCHES = 12


class AskAt(keras.callbacks.Callback):
    """The last rank asks to stop after batch ASK_AT of the first epoch."""

    def on_train_batch_end(self, batch, logs=None):
        if batch == ASK_AT and mc.get_rank() == mc.get_nranks() - 1:
            mc.request_stop()


class LastBatch(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.last = -1

    def on_train_batch_end(self, batch, logs=None):
        self.last = batch


@pytest.fixture
def keras_session():
    with keras_ml_comm_session(nthread_per_team=1, nteams=1, msglen=64) as session:
        yield session


def gathered(value: int, rank: int, nranks: int) -> list[int]:
    slots = np.zeros(nranks, np.int64)
    slots[rank] = value
    return mc.allreduce_sum(slots).tolist()


@pytest.mark.parametrize(
    "pipelined, per_batch",
    [(False, False), (True, False), (True, True)],
    ids=["sync", "pipelined", "pipelined-per-batch-metrics"],
)
def test_fit_stops_at_the_same_batch(keras_session, tmp_path, pipelined, per_batch):
    rank, nranks = keras_session
    c = Checks()
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse")
    mk.set_team(model)
    if pipelined:
        mc.config_team(0, 0, 0, 10 * BATCHES)
    x = np.ones((BATCHES * 2, 4), np.float32) * (rank + 1)
    y = np.zeros((BATCHES * 2, 2), np.float32)
    shared = comm_world().bcast(str(tmp_path) if rank == 0 else None)
    stopper, last = StopTogether(exit_code=None), LastBatch()
    callbacks = [
        keras.callbacks.BackupAndRestore(os.path.join(shared, "backup"), save_freq=2),
        keras.callbacks.ModelCheckpoint(os.path.join(shared, f"ckpt{int(pipelined)}.keras")),
        AskAt(),
        last,
        stopper,
    ]
    if per_batch:
        callbacks.insert(0, mk.GlobalMetrics(per_batch=True))
    model.fit(x, y, batch_size=2, epochs=3, shuffle=False, verbose=0, callbacks=callbacks)
    c.true(stopper.stopped, "fit was not stopped")
    lasts = gathered(last.last, rank, nranks)
    c.true(len(set(lasts)) == 1, f"ranks stopped after batches {lasts}")
    # The request rides on the team's next request: the next step's, or the agreement on
    # stop_training that fit makes after each batch here (AskAt and LastBatch have batch
    # hooks that could set it).
    low = ASK_AT
    if pipelined and not per_batch and nranks > 1:  # at the end of the first epoch
        c.true(lasts[0] == BATCHES - 1, f"stopped after batch {lasts[0]}, not the epoch's last")
    else:
        c.true(low <= lasts[0] <= ASK_AT + 2, f"stopped after batch {lasts[0]}")
    # The stop kept the step backup (Keras deletes it at a normal end) written by rank 0.
    c.true(os.path.exists(os.path.join(shared, "backup", "training_metadata.json")), "backup")
    iterations = gathered(int(model.optimizer.iterations.numpy()), rank, nranks)
    c.true(len(set(iterations)) == 1, f"optimizer iterations differ: {iterations}")
    c.finish()


class HandlerDuringFit(keras.callbacks.Callback):
    def on_train_begin(self, logs=None):
        self.handler = signal.getsignal(signal.SIGTERM)


@pytest.mark.parametrize("caught_by_program", [False, True], ids=["by-fit", "by-the-program"])
def test_signals_are_caught_while_fit_runs(keras_session, caught_by_program):
    """fit catches the stop signals while it runs and gives them back when it returns, so
    that a signal after it ends the process as without ml_comm (nothing would read the
    request there); signals the program caught itself stay caught."""
    c = Checks()
    before = signal.getsignal(signal.SIGTERM)
    if caught_by_program:
        mc.catch_stop_signals()
    caught = signal.getsignal(signal.SIGTERM)
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    during = HandlerDuringFit()
    x = np.ones((8, 2), np.float32)
    model.fit(x, x[:, :1], batch_size=4, epochs=1, verbose=0, callbacks=[during])
    c.true(during.handler not in (before, None), f"SIGTERM caught during fit: {during.handler}")
    after = signal.getsignal(signal.SIGTERM)
    want = caught if caught_by_program else before
    c.true(after is want, f"SIGTERM's handler after fit: {after}, want {want}")
    c.finish()


class InterruptAtTheEnd(keras.callbacks.Callback):
    """Ctrl-C after fit's last check for a stop (its on_train_end)."""

    def on_train_end(self, logs=None):
        os.kill(os.getpid(), signal.SIGINT)


def test_a_signal_after_the_last_check_does_what_it_would_without_ml_comm(keras_session):
    """A signal that comes when fit no longer reads the request (here Ctrl-C in its last
    callback) is raised again when fit returns, to the handler it had before: Python's
    KeyboardInterrupt, on every rank (each got one), not a stop that nothing acts on."""
    c = Checks()
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    x = np.ones((8, 2), np.float32)
    try:
        model.fit(x, x[:, :1], batch_size=4, epochs=1, verbose=0, callbacks=[InterruptAtTheEnd()])
    except KeyboardInterrupt:
        interrupted = True
    else:
        interrupted = False
    c.true(interrupted, "fit returned and the Ctrl-C in its last callback did nothing")
    c.true(signal.getsignal(signal.SIGINT) is signal.default_int_handler, "SIGINT given back")
    c.finish()
