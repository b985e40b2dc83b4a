"""Keras hook: the statistics layers keep while training (BatchNormalization's moving mean
and variance) are one state on every rank where rank 0 saves the model, and weights that
are already the same on every rank stay bit for bit; with init(average_statistics=False)
each rank keeps its own. The backend-neutral check of the averaged values is
tests/backends/test_keras_guarantees.py. Rules of mpi_helpers.py hold.
"""

from __future__ import annotations

import os
import shutil
import tempfile

import keras
import numpy as np
import pytest
from keras_helpers import keras_ml_comm_session
from mpi_helpers import Checks, comm_world

import ml_comm as mc
import ml_comm.keras as mk

pytestmark = pytest.mark.mpi

B = 4


class Frozen(keras.layers.Layer):
    """Adds a non-trainable float64 constant: an average of equal float64 values can
    round (0.1 + 0.1 + 0.1 is not 0.3: at 3 ranks only a weight left alone stays 0.1;
    at 2 and 4 ranks the sum of 0.1s is exact)."""

    def build(self, input_shape):
        self.constant = self.add_weight(
            shape=(input_shape[-1],), initializer="zeros", dtype="float64", trainable=False
        )
        self.constant.assign(np.full(input_shape[-1], 0.1))

    def call(self, x):
        return x + keras.ops.cast(self.constant, x.dtype)


def bn_model(seed: int, accumulate: int | None = None) -> keras.Model:
    keras.utils.set_random_seed(seed)
    model = keras.Sequential(
        [
            keras.Input((3,)),
            Frozen(),
            keras.layers.BatchNormalization(momentum=0.5),
            keras.layers.Dense(2),
        ]
    )
    optimizer = keras.optimizers.SGD(0.0 if accumulate is None else 0.125)
    optimizer.gradient_accumulation_steps = accumulate
    model.compile(optimizer=optimizer, loss="mse")
    return model


def rank_data(rank: int, steps: int = 2):
    """Small integers, shifted by the rank: the ranks' batch means differ."""
    rng = np.random.default_rng(0)
    x = rng.integers(-2, 3, size=(steps * B, 3)).astype(np.float32) + rank
    y = rng.integers(-2, 3, size=(steps * B, 2)).astype(np.float32)
    return x, y


def statistics(model) -> list[np.ndarray]:
    bn = model.layers[1]
    return [np.asarray(bn.moving_mean.numpy()), np.asarray(bn.moving_variance.numpy())]


def test_checkpoint_holds_the_ranks_average():
    with keras_ml_comm_session(nthread_per_team=2, nteams=1, msglen=64) as (rank, nranks):
        checks = Checks()
        tmp = tempfile.mkdtemp(prefix="ml_comm_stats_") if rank == 0 else None
        path = comm_world().bcast(tmp and os.path.join(tmp, "ckpt.weights.h5"), root=0)
        model = bn_model(rank)
        x, y = rank_data(rank)
        checkpoint = keras.callbacks.ModelCheckpoint(path, save_weights_only=True)
        model.fit(x, y, batch_size=B, epochs=2, shuffle=False, verbose=0, callbacks=[checkpoint])
        checks.same_on_all_ranks(model.get_weights(), "weights and statistics after fit")
        constant = np.asarray(model.layers[0].constant.numpy())
        checks.equal(constant, np.full(3, 0.1), "the frozen float64 weight")
        own = [np.asarray(v) for v in comm_world().allgather(statistics(model)[0])]
        if rank == 0:
            saved = bn_model(0)
            saved.load_weights(path)
            for want, got in zip(statistics(model), statistics(saved)):
                checks.equal(got, want, "statistics in rank 0's checkpoint")
            shutil.rmtree(tmp)
        checks.true(all(np.array_equal(own[0], o) for o in own), "ranks' moving means")
        checks.finish()


def test_a_checkpoint_on_rank0_alone_that_saves_every_2_batches():
    """mk.ModelCheckpoint is a callback that does nothing on the other ranks: every rank
    still shares its statistics and gradient accumulators before rank 0's saves (4 steps
    an epoch, saves after steps 2 and 4, updates every 3 steps: the accumulators are
    mid-cycle at the saves), so the ranks make the same calls and the file holds the
    state every rank holds."""
    with keras_ml_comm_session(nthread_per_team=2, nteams=1, msglen=64) as (rank, nranks):
        checks = Checks()
        tmp = tempfile.mkdtemp(prefix="ml_comm_stats_") if rank == 0 else None
        path = comm_world().bcast(tmp and os.path.join(tmp, "ckpt.weights.h5"), root=0)
        model = bn_model(rank, accumulate=3)
        x, y = rank_data(rank, steps=4)
        saves = mk.ModelCheckpoint(path, save_weights_only=True, save_freq=2)
        model.fit(x, y, batch_size=B, epochs=2, shuffle=False, verbose=0, callbacks=[saves])
        checks.same_on_all_ranks(model.get_weights(), "weights and statistics after fit")
        accumulators = [
            np.asarray(a.numpy()) for a in model.optimizer._accumulated_gradients if a is not None
        ]
        checks.same_on_all_ranks(accumulators, "gradient accumulators after fit")
        if rank == 0:
            saved = bn_model(0)
            saved.load_weights(path)
            for i, (want, got) in enumerate(zip(model.get_weights(), saved.get_weights())):
                checks.equal(got, want, f"weight {i} in rank 0's last batch checkpoint")
            shutil.rmtree(tmp)
        checks.finish()


class Recorder(keras.callbacks.Callback):
    """Every batch's statistics as the callbacks after ml_comm's see them."""

    def __init__(self):
        super().__init__()
        self.seen = {}

    def on_train_batch_end(self, batch, logs=None):
        self.seen[batch] = statistics(self.model)


def shared_at(checks, recorder: Recorder, batch: int, what: str) -> list[np.ndarray]:
    """The statistics of `batch`, checked to be one state on every rank."""
    checks.true(batch in recorder.seen, f"{what}: no batch {batch} in {sorted(recorder.seen)}")
    checks.same_on_all_ranks(recorder.seen.get(batch, []), f"{what}: statistics at batch {batch}")
    return recorder.seen.get(batch, [])


def test_saves_are_found_as_keras_counts_them():
    """Every rank shares at the very batches where rank 0's savers save, as Keras counts
    them: a BackupAndRestore with 2 steps per execution (its count of an epoch's first
    execution is one short: saves after batch 5 of 6 with save_freq 4) and a checkpoint on
    rank 0 alone whose count goes on from the fit before (save_freq 3 after 2 steps: its
    next save is after the next fit's first batch)."""
    with keras_ml_comm_session(nthread_per_team=2, nteams=1, msglen=64) as (rank, nranks):
        checks = Checks()
        tmp = tempfile.mkdtemp(prefix="ml_comm_stats_") if rank == 0 else None
        folder = comm_world().bcast(tmp, root=0)
        model = bn_model(rank)
        model.compile(optimizer=model.optimizer, loss="mse", steps_per_execution=2)
        x, y = rank_data(rank, steps=6)
        backup = keras.callbacks.BackupAndRestore(
            os.path.join(folder, "backup"), save_freq=4, delete_checkpoint=False
        )
        recorder = Recorder()
        model.fit(x, y, batch_size=B, shuffle=False, verbose=0, callbacks=[recorder, backup])
        at_save = shared_at(checks, recorder, 5, "BackupAndRestore")
        if rank == 0:
            saved = bn_model(0)
            saved.load_weights(os.path.join(folder, "backup", "latest.weights.h5"))
            for want, got in zip(at_save, statistics(saved)):
                checks.equal(got, want, "statistics in the backup")

        model = bn_model(rank)
        path = os.path.join(folder, "ckpt.weights.h5")
        checkpoint = mk.ModelCheckpoint(path, save_weights_only=True, save_freq=3)
        x, y = rank_data(rank, steps=2)
        model.fit(x, y, batch_size=B, shuffle=False, verbose=0, callbacks=[checkpoint])
        recorder = Recorder()
        x, y = rank_data(rank + 10, steps=2)
        model.fit(x, y, batch_size=B, shuffle=False, verbose=0, callbacks=[recorder, checkpoint])
        at_save = shared_at(checks, recorder, 0, "ModelCheckpoint")
        comm_world().barrier()
        if rank == 0:
            saved = bn_model(0)
            saved.load_weights(path)
            for want, got in zip(at_save, statistics(saved)):
                checks.equal(got, want, "statistics in the checkpoint")
            shutil.rmtree(tmp)
        checks.finish()


class AtValidation(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.seen = []

    def on_test_begin(self, logs=None):
        self.seen.append(statistics(self.model))


def test_validation_evaluates_one_model():
    """fit's validation (before each epoch's end) sees the statistics shared."""
    with keras_ml_comm_session(nthread_per_team=2, nteams=1, msglen=64) as (rank, nranks):
        checks = Checks()
        model = bn_model(rank)
        x, y = rank_data(rank)
        seen = AtValidation()
        model.fit(
            x,
            y,
            batch_size=B,
            epochs=2,
            shuffle=False,
            verbose=0,
            validation_data=(x, y),
            callbacks=[seen],
        )
        checks.true(len(seen.seen) == 2, f"{len(seen.seen)} validations")
        checks.same_on_all_ranks(seen.seen, "statistics at each validation")
        checks.same_on_all_ranks(model.get_weights(), "weights and statistics after fit")
        checks.finish()


def test_a_backup_on_some_ranks_only_fails_on_every_rank():
    """BackupAndRestore restores on every rank (collective): passed on rank 0 alone, fit
    fails on every rank before training, naming the ranks without it."""
    with keras_ml_comm_session(nthread_per_team=2, nteams=1, msglen=64) as (rank, nranks):
        if nranks == 1:
            pytest.skip("one rank has no other rank to differ from")
        checks = Checks()
        folder = comm_world().bcast(
            tempfile.mkdtemp(prefix="ml_comm_stats_") if rank == 0 else None
        )
        model = bn_model(rank)
        x, y = rank_data(rank)
        backup = [keras.callbacks.BackupAndRestore(os.path.join(folder, "b"))] if rank == 0 else []
        checks.raises(
            ValueError,
            model.fit,
            x,
            y,
            batch_size=B,
            verbose=0,
            callbacks=backup,
            words=["fewer BackupAndRestore", "pass it on every rank"],
        )
        comm_world().barrier()
        if rank == 0:
            shutil.rmtree(folder)
        checks.finish()


def test_share_statistics_in_a_custom_loop():
    with keras_ml_comm_session(nthread_per_team=2, nteams=1, msglen=64) as (rank, nranks):
        checks = Checks()
        model = bn_model(rank)
        x, y = rank_data(rank)
        model.train_on_batch(x[:B], y[:B])  # the ranks' moving means differ
        ranks = comm_world().allgather(statistics(model))
        differ = sum(any(not np.array_equal(r[i], ranks[0][i]) for r in ranks) for i in (0, 1))
        averaged = mk.share_statistics(model)
        checks.true(averaged == differ, f"{averaged} weights averaged, {differ} differ")
        checks.true(differ > 0 or nranks == 1, "the moving means differ")
        for i, what in enumerate(("moving mean", "moving variance")):
            want = np.mean([r[i].astype(np.float64) for r in ranks], axis=0).astype(np.float32)
            checks.equal(statistics(model)[i], want, f"averaged {what}")
        checks.same_on_all_ranks(model.get_weights(), "weights and statistics")
        again = mk.share_statistics(model)
        checks.true(again == 0, f"{again} weights averaged a second time")
        checks.finish()


def test_each_rank_keeps_its_own_when_asked():
    with keras_ml_comm_session(
        nthread_per_team=2, nteams=1, msglen=64, average_statistics=False
    ) as (rank, nranks):
        if nranks == 1:
            pytest.skip("one rank has no other rank's statistics")
        checks = Checks()
        model = bn_model(rank)
        x, y = rank_data(rank)
        model.fit(x, y, batch_size=B, epochs=1, shuffle=False, verbose=0)
        model.evaluate(x, y, batch_size=B, verbose=0)
        means = comm_world().allgather(statistics(model)[0].tobytes())
        checks.true(len(set(means)) == nranks, "each rank's moving mean is its own")
        checks.finish()


def test_init_options_that_differ_fail_on_every_rank():
    """The options decide collective calls (a statistics share per epoch, a metrics
    allreduce per batch): ranks given other values fail init alike, naming each option
    and who holds which value, and a later init with equal values works."""
    comm_world().barrier()
    rank, nranks = comm_world().Get_rank(), comm_world().Get_size()
    if nranks == 1:
        pytest.skip("one rank agrees with itself")
    checks = Checks()
    try:
        mk.init(
            nthread_per_team=2,
            nteams=1,
            msglen=64,
            average_statistics=rank == 0,
            per_batch_metrics=rank == nranks - 1,
        )
    except mc.MismatchError as e:
        text = str(e)
        others = "rank 1:" if nranks == 2 else f"ranks 1-{nranks - 1}:"
        checks.true(
            f"average_statistics: rank 0: True; {others} False" in text,
            f"names average_statistics and its ranks: {text}",
        )
        checks.true("per_batch_metrics" in text, f"names per_batch_metrics: {text}")
    else:
        mk.finalize()
        checks.true(False, "init with other options on other ranks raised nothing")
    with keras_ml_comm_session(nthread_per_team=2, nteams=1, msglen=64) as (_, _):
        model = bn_model(0)
        x, y = rank_data(0)
        model.fit(x, y, batch_size=B, epochs=1, shuffle=False, verbose=0)
    checks.finish()
