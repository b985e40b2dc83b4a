"""ml_comm.keras on the Keras backend KERAS_BACKEND names: each guarantee of the hook,
checked exactly at 1-3 ranks (small integer inputs, so sums and means are exact in
float32 and results are compared bit for bit, or against one process on the global
batch within float32 rounding).

    KERAS_BACKEND=jax timeout 300 .venv-jax/bin/mpiexec -n 3 .venv-jax/bin/python -P \
        -m pytest -q --with-mpi -p no:cacheprovider tests/backends
"""

from __future__ import annotations

import os
import sys

import keras
import numpy as np
import pytest
from keras_data import B, int_data, shares, weights
from mpi_helpers import Checks, comm_world

import ml_comm as mc
import ml_comm.keras as mk

pytestmark = pytest.mark.mpi
BACKEND = keras.backend.backend()


@pytest.fixture(scope="module")
def session():
    comm_world().barrier()
    mk.init(nthread_per_team=2, nteams=2, msglen=256)
    yield mc.get_rank(), mc.get_nranks()
    mk.finalize()


def dense_model(
    seed: int, units: int = 2, lr: float = 0.125, accumulate=None, loss="mse", **compile_kwargs
):
    keras.utils.set_random_seed(seed)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(units)])
    optimizer = keras.optimizers.SGD(lr, gradient_accumulation_steps=accumulate)
    model.compile(optimizer=optimizer, loss=loss, **compile_kwargs)
    return model


def same(checks: Checks, actual, expected, what: str) -> None:
    checks.true(actual == expected, f"{what}: {actual}, want {expected}")


def calls(team: int = 0) -> int:
    return mc.team_stats(team)["calls"]


def test_options_that_differ_fail_init_on_every_rank():
    """Before the module's session (its own init): an option that decides collective calls
    (overlap_backprop submits each gradient during backprop on JAX and torch; TensorFlow's
    ops overlap on their own and the option is not compared there) given otherwise on the
    last rank fails init on every rank, naming the option."""
    comm_world().barrier()
    rank, nranks = comm_world().Get_rank(), comm_world().Get_size()
    if nranks == 1:
        pytest.skip("one rank agrees with itself")
    option = "average_statistics" if BACKEND == "tensorflow" else "overlap_backprop"
    checks = Checks()
    try:
        mk.init(nthread_per_team=2, nteams=1, msglen=64, **{option: rank != nranks - 1})
    except mc.MismatchError as e:
        told = f"ml_comm.keras.init's {option}: "
        checks.true(told in str(e), f"names {option}: {e}")
        checks.true(f"rank {nranks - 1}: False" in str(e), f"names the last rank: {e}")
    else:
        mk.finalize()
        checks.true(False, f"init with {option} otherwise on the last rank raised nothing")
    checks.finish()


def test_first_update_takes_rank0_weights(session):
    rank, nranks = session
    checks = Checks()
    rank0 = comm_world().bcast(weights(dense_model(0)), root=0)
    model = dense_model(seed=rank, lr=0.0)  # lr 0: the weights stay what the first update saw
    x, y = int_data(B)
    model.fit(x, y, batch_size=B, epochs=1, verbose=0)
    for i, (w, w0) in enumerate(zip(weights(model), rank0)):
        checks.equal(w, w0, f"weight {i} after fit with lr 0")
    # A model built by fit itself (no Input): its weights exist only once fit runs.
    keras.utils.set_random_seed(rank)
    lazy = keras.Sequential([keras.layers.Dense(2)])
    lazy.compile(optimizer=keras.optimizers.SGD(0.0), loss="mse")
    lazy.fit(x, y, batch_size=B, epochs=1, verbose=0)
    checks.same_on_all_ranks(weights(lazy), "a model built inside fit")
    checks.finish()


def test_gradients_averaged_once_per_apply(session):
    rank, nranks = session
    checks = Checks()
    mean = (nranks + 1) / 2  # of rank + 1
    g = keras.ops.full((3,), rank + 1.0)
    v = keras.Variable(np.zeros(3, np.float32))
    opt = keras.optimizers.SGD(1.0)
    opt.apply([g], [v])  # the first update also broadcasts v from rank 0
    before = calls()
    opt.apply([g], [v])
    same(checks, calls() - before, 1, "reductions for one apply")
    checks.equal(keras.ops.convert_to_numpy(v), np.full(3, -2 * mean, np.float32), "2 applies")

    # Accumulation over 2 micro-steps: nothing applied after the first, one reduction in all.
    v = keras.Variable(np.zeros(3, np.float32))
    opt = keras.optimizers.SGD(1.0, gradient_accumulation_steps=2)
    opt.apply([g], [v])
    checks.equal(keras.ops.convert_to_numpy(v), np.zeros(3, np.float32), "first micro-step")
    opt.apply([g * 3], [v])
    checks.equal(keras.ops.convert_to_numpy(v), np.full(3, -2 * mean, np.float32), "an update")
    before = calls()
    opt.apply([g], [v])
    opt.apply([g * 3], [v])
    same(checks, calls() - before, 1, "reductions for 2 micro-steps")
    checks.equal(keras.ops.convert_to_numpy(v), np.full(3, -4 * mean, np.float32), "2 updates")
    checks.finish()


def fit_accumulating(rank: int, nranks: int, steps: int) -> tuple:
    """(model, reference) after one epoch of 4 batches with `steps` micro-steps per
    update: the model at every rank on its shares, the reference in one process on the
    global batches, both from rank 0's weights."""
    x, y = int_data(4 * nranks * B)
    model = dense_model(rank, accumulate=steps)
    mk.broadcast_weights(model)
    reference = dense_model(0, accumulate=steps)
    reference.set_weights(weights(model))
    mk.set_team(reference, None)  # one process on the global batches
    model.fit(
        shares(x, nranks, rank), shares(y, nranks, rank), batch_size=B, shuffle=False, verbose=0
    )
    reference.fit(x, y, batch_size=nranks * B, shuffle=False, verbose=0)
    return model, reference


def test_fit_with_accumulation_equals_one_process(session):
    rank, nranks = session
    checks = Checks()
    model, reference = fit_accumulating(rank, nranks, steps=2)
    for i, (w, ref) in enumerate(zip(weights(model), weights(reference))):
        checks.true(np.allclose(w, ref, rtol=1e-5, atol=1e-6), f"weight {i}: {w} vs {ref}")
    checks.same_on_all_ranks(weights(model), "weights after fit with accumulation")
    checks.finish()


def test_a_cycle_cut_by_the_epochs_end_is_one_state(session):
    """3 micro-steps per update, 4 batches: fit ends a micro-step into a cycle, and the
    partial sums (what a save after fit holds) are one state on every rank: the global
    batch's, as one process accumulates them."""
    rank, nranks = session
    checks = Checks()
    model, reference = fit_accumulating(rank, nranks, steps=3)
    sums = [np.asarray(a) for a in model.optimizer._accumulated_gradients]
    want = [np.asarray(a) for a in reference.optimizer._accumulated_gradients]
    checks.true(any(np.any(a != 0) for a in want), "the cycle is cut: partial sums left")
    checks.same_on_all_ranks(sums, "partial sums after fit")
    for i, (a, ref) in enumerate(zip(sums, want)):
        checks.true(np.allclose(a, ref, rtol=1e-5, atol=1e-6), f"partial sum {i}: {a} vs {ref}")
    checks.finish()


@pytest.mark.skipif(BACKEND != "jax", reason="a compiled step of the user's: jax.jit")
def test_a_users_compiled_step_after_broadcast_weights(session):
    """Keras's own JAX loop (jax.jit over stateless_call and a standalone optimizer's
    stateless_apply): traced before broadcast_weights (of the model and of the built
    optimizer's own state), the first update raises, as it would read each rank's own
    values; after it, the steps train as one process on the global batches, the same
    on every rank."""
    import jax

    rank, nranks = session
    checks = Checks()
    lr, steps = 0.125, 2
    x, y = int_data(steps * nranks * B)
    keras.utils.set_random_seed(rank)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    opt = keras.optimizers.SGD(lr)
    opt.build(model.trainable_variables)

    def loss_of(trainable, xb, yb):
        out, _ = model.stateless_call(trainable, [], xb)
        return keras.ops.mean(keras.ops.square(out - yb))

    @jax.jit
    def step(trainable, optimizer_state, xb, yb):
        grads = jax.grad(loss_of)(trainable, xb, yb)
        return opt.stateless_apply(optimizer_state, grads, trainable)

    def values(variables):
        return [v.value for v in variables]

    xs, ys = shares(x, nranks, rank), shares(y, nranks, rank)
    state = values(model.trainable_variables), values(opt.variables)
    checks.raises(mc.StateError, step, *state, xs[:B], ys[:B], words=("broadcast_weights",))
    mk.broadcast_weights(model)  # not the built optimizer's own state: still refused
    checks.raises(mc.StateError, step, *state, xs[:B], ys[:B], words=("optimizer=",))
    mk.broadcast_weights(model, optimizer=opt)
    trainable, optimizer_state = values(model.trainable_variables), values(opt.variables)
    want = [np.asarray(w, np.float64) for w in trainable]
    for i in range(steps):
        rows = slice(i * B, (i + 1) * B)
        trainable, optimizer_state = step(trainable, optimizer_state, xs[rows], ys[rows])
        everyone = slice(i * nranks * B, (i + 1) * nranks * B)  # one process: the global batch
        grads = jax.grad(loss_of)([w.astype(np.float32) for w in want], x[everyone], y[everyone])
        want = [w - lr * np.asarray(g, np.float64) for w, g in zip(want, grads)]
    got = [np.asarray(w) for w in trainable]
    checks.same_on_all_ranks(got, "weights after the user's compiled steps")
    for i, (w, ref) in enumerate(zip(got, want)):
        checks.true(np.allclose(w, ref, rtol=1e-5, atol=1e-6), f"weight {i}: {w} vs {ref}")
    checks.finish()


def test_overflow_on_one_rank_skips_the_step_everywhere(session):
    """A LossScaleOptimizer averages the still-scaled gradients before its finite check
    (Keras's compiled steps call its stateless_apply, which checks first), so an overflow
    on one rank is one on every rank: all skip the step and halve the scale together."""
    rank, nranks = session
    checks = Checks()
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    scale = 2.0**100  # the last rank's scaled gradients pass float32's largest
    model.compile(
        optimizer=keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.125), scale),
        loss="mse",
    )
    x, y = int_data(B, seed=rank)
    big = 1e12 if rank == nranks - 1 else 1.0
    mk.broadcast_weights(model)
    start = weights(model)
    model.fit(x * big, y * big, batch_size=B, shuffle=False, verbose=0)
    checks.same_on_all_ranks(weights(model), "weights after the overflowing step")
    if nranks > 1:
        for w, s in zip(weights(model), start):
            checks.equal(w, s, "the overflowing step was applied")
    got = float(keras.ops.convert_to_numpy(model.optimizer.dynamic_scale))
    same(checks, got, scale / 2, f"rank {rank}: the loss scale")
    model.fit(x, y, batch_size=B, shuffle=False, verbose=0)  # finite: applied everywhere
    checks.same_on_all_ranks(weights(model), "weights after a finite step")
    checks.true(
        any(not np.array_equal(a, b) for a, b in zip(weights(model), start)),
        "the finite step changed nothing",
    )
    checks.finish()


def test_evaluate_reports_all_ranks_data(session):
    rank, nranks = session
    checks = Checks()
    model = dense_model(0)
    model.set_weights([np.ones((3, 2), np.float32), np.zeros(2, np.float32)])
    x, y = int_data(B * (1 + 2 * nranks), seed=1)
    counts = [B * (1 + r) for r in range(nranks)]  # uneven shards: 4, 8, 12 rows
    start = sum(counts[:rank])
    mine = slice(start, start + counts[rank])
    used = slice(0, sum(counts))
    metrics = model.evaluate(x[mine], y[mine], batch_size=B, verbose=0, return_dict=True)
    expected = float(np.mean((x[used] @ np.ones((3, 2)) - y[used]) ** 2))
    checks.true(abs(metrics["loss"] - expected) < 1e-6, f"loss {metrics['loss']} vs {expected}")
    checks.finish()


def last_rank_without_rows(rank: int, nranks: int, lr: float):
    """(a model with set weights, this rank's shard of a set whose last rank's shard is
    empty, the loss and mae of all rows: what the job's metrics must be)."""
    model = dense_model(0, lr=lr, metrics=["mae"])
    model.set_weights([np.ones((3, 2), np.float32), np.zeros(2, np.float32)])
    x, y = int_data(B * nranks, seed=2)
    counts = [B * (1 + r) for r in range(nranks - 1)] + [0]
    start = sum(counts[:rank])
    mine = slice(start, start + counts[rank])
    used = slice(0, sum(counts))
    error = x[used] @ np.ones((3, 2)) - y[used]
    want = {"loss": np.mean(error**2), "mae": np.mean(np.abs(error))}
    return model, (x[mine], y[mine]), want


def test_evaluate_with_no_rows_on_one_rank(session):
    """A validation set smaller than the job: the last rank's shard is empty (Keras alone
    raises on it on JAX). Every rank returns the metrics of all rows, the empty rank
    too, for a model whose compiled metrics were never built."""
    rank, nranks = session
    if nranks == 1:
        pytest.skip("one rank has no other rank's rows")
    checks = Checks()
    model, (x, y), want = last_rank_without_rows(rank, nranks, lr=0.125)
    metrics = model.evaluate(x, y, batch_size=B, verbose=0, return_dict=True)
    for name, value in want.items():
        got = metrics.get(name)
        checks.true(got is not None and abs(got - value) < 1e-6, f"{name} {got} vs {value}")
    checks.finish()


def test_fit_validation_with_no_rows_on_one_rank(session):
    """The same within fit: validation_data whose last rank's shard is empty. Keras's
    evaluate of no rows counts a phantom batch there (no loss, a batch size of samples);
    fit's validation metrics are those of all rows."""
    rank, nranks = session
    if nranks == 1:
        pytest.skip("one rank has no other rank's rows")
    checks = Checks()
    model, shard, want = last_rank_without_rows(rank, nranks, lr=0.0)  # weights stay as set
    x, y = int_data(B, seed=3)
    history = model.fit(x, y, batch_size=B, epochs=1, verbose=0, validation_data=shard)
    for name, value in want.items():
        got = history.history.get(f"val_{name}", [None])[0]
        checks.true(got is not None and abs(got - value) < 1e-6, f"val_{name} {got} vs {value}")
    checks.finish()


def offset_data(nranks: int, steps: int):
    """Global batches of small integers: each rank's rows are one batch's, shifted by
    2r - (N - 1) on rank r. The ranks' batch means differ and average to the global
    batch's mean; their batch variances are the same."""
    x, y = int_data(steps * B, seed=4)
    shift = 2.0 * np.arange(nranks, dtype=np.float32) - (nranks - 1)
    x = x.reshape(steps, 1, B, 3) + shift[None, :, None, None]
    y = np.broadcast_to(y.reshape(steps, 1, B, 2), (steps, nranks, B, 2))
    return x.reshape(-1, 3), y.reshape(-1, 2)


def bn_model(seed: int):
    keras.utils.set_random_seed(seed)
    model = keras.Sequential(
        [keras.Input((3,)), keras.layers.BatchNormalization(momentum=0.5), keras.layers.Dense(2)]
    )
    model.compile(optimizer=keras.optimizers.SGD(0.0), loss="mse")
    return model


def global_moving_mean(x, nranks: int, steps: int) -> np.ndarray:
    """The moving mean (momentum 1/2, from 0) of the global batches' means: what one
    process keeps on them, computed exactly (the values are multiples of 1/4)."""
    mean = np.zeros(3)
    for rows in x.reshape(steps, nranks * B, 3).astype(np.float64):
        mean = 0.5 * mean + 0.5 * rows.mean(axis=0)
    return mean.astype(np.float32)


def moving_mean(model) -> np.ndarray:
    return np.asarray(keras.ops.convert_to_numpy(model.layers[0].moving_mean))


def moving_variance(model) -> np.ndarray:
    return np.asarray(keras.ops.convert_to_numpy(model.layers[0].moving_variance))


def test_batch_norm_statistics_are_averaged(session):
    """fit ends each epoch with every rank's moving statistics replaced by their average:
    the moving mean is then the one a process keeps on the global batches (exact here:
    small integers, momentum 1/2); the moving variance, the same on every rank here,
    stays as each rank computed it."""
    rank, nranks = session
    checks = Checks()
    steps = 3
    x, y = offset_data(nranks, steps)
    model = bn_model(rank)
    model.fit(
        shares(x, nranks, rank), shares(y, nranks, rank), batch_size=B, shuffle=False, verbose=0
    )
    want = global_moving_mean(x, nranks, steps)
    checks.equal(moving_mean(model), want, "moving mean after fit")
    variance = np.ones(3, np.float32)
    for rows in shares(x, nranks, rank).reshape(steps, B, 3):
        variance = 0.5 * variance + 0.5 * rows.var(axis=0)
    checks.equal(moving_variance(model), variance, "moving variance after fit")
    checks.same_on_all_ranks(weights(model), "weights with the statistics after fit")
    # Steps outside fit keep each rank's own until evaluate, which averages them first.
    mine = shares(x, nranks, rank)[:B] * (rank + 1)
    model.train_on_batch(mine, shares(y, nranks, rank)[:B])
    if nranks > 1:
        differ = comm_world().allgather(moving_mean(model).tobytes())
        checks.true(len(set(differ)) > 1, "train_on_batch left each rank its own mean")
    model.evaluate(x[:B], y[:B], batch_size=B, verbose=0)
    checks.same_on_all_ranks(weights(model), "weights with the statistics after evaluate")
    checks.finish()


def test_batch_saves_on_rank0_alone_share_the_statistics(session, tmp_path_factory):
    """A checkpoint on rank 0 alone (mk.ModelCheckpoint) that saves every 2 batches: every
    rank averages its statistics before each save (the ranks agreed on the saves before
    training), and the next steps start from the average (on JAX, from the variables
    that the save synced)."""
    rank, nranks = session
    checks = Checks()
    folder = str(tmp_path_factory.mktemp("saves")) if rank == 0 else None
    path = comm_world().bcast(folder and os.path.join(folder, "last.weights.h5"), root=0)
    x, y = offset_data(nranks, 4)
    model = bn_model(rank)
    saves = mk.ModelCheckpoint(path, save_weights_only=True, save_freq=2)
    model.fit(
        shares(x, nranks, rank),
        shares(y, nranks, rank),
        batch_size=B,
        shuffle=False,
        verbose=0,
        callbacks=[saves],
    )
    want = global_moving_mean(x, nranks, 4)
    checks.equal(moving_mean(model), want, "moving mean after fit")
    checks.same_on_all_ranks(weights(model), "weights with the statistics after fit")
    if rank == 0:
        saved = bn_model(0)
        saved.load_weights(path)
        checks.equal(moving_mean(saved), moving_mean(model), "moving mean in the last save")
    checks.finish()


class Batches(keras.utils.PyDataset):
    """`rows` samples (count full batches by default) in batches of `batch`."""

    def __init__(self, count: int, rows: int | None = None, batch: int = B):
        super().__init__()
        self.rows, self.batch = rows or count * batch, batch
        self.x, self.y = int_data(self.rows, seed=2)

    def __len__(self):
        return -(-self.rows // self.batch)

    def __getitem__(self, i):
        part = slice(i * self.batch, (i + 1) * self.batch)
        return self.x[part], self.y[part]


def uneven_inputs(rank: int):
    """(what, fit's data arguments) with 2 + rank batches of B on this rank."""
    x, y = int_data((2 + rank) * B, seed=3)
    yield "NumPy arrays", {"x": x, "y": y, "batch_size": B}
    yield "a PyDataset", {"x": Batches(2 + rank)}
    if BACKEND == "torch":
        import torch

        data = torch.utils.data.TensorDataset(torch.from_numpy(x), torch.from_numpy(y))
        yield "a torch DataLoader", {"x": torch.utils.data.DataLoader(data, batch_size=B)}


def test_uneven_data_cut_to_the_fewest_batches(session):
    rank, nranks = session
    checks = Checks()
    for what, data in uneven_inputs(rank):
        model = dense_model(rank)
        model.fit(**data, epochs=2, shuffle=False, verbose=0)
        iterations = int(keras.ops.convert_to_numpy(model.optimizer.iterations))
        same(checks, iterations, 4, f"{what}: optimizer steps in 2 epochs of 2 batches")
        checks.same_on_all_ranks(weights(model), f"{what}: weights")
    checks.finish()


def ragged_inputs(rank: int):
    """(what, fit's data arguments, steps per epoch at more than one rank): 2 full
    batches of B and a last one of 1 + rank samples, which differ between the ranks; and
    a PyDataset whose last batch is partial alike on every rank, which fit's shuffling
    would put on any step."""
    rows = 2 * B + 1 + rank
    yield "a PyDataset", {"x": Batches(0, rows), "shuffle": False}, 2
    yield (
        "a PyDataset of equal last batches, unshuffled",
        {"x": Batches(0, 2 * B + 1), "shuffle": False},
        3,
    )
    yield "a shuffled PyDataset of equal last batches", {"x": Batches(0, 2 * B + 1)}, 2
    if BACKEND == "torch":
        import torch

        x, y = int_data(rows, seed=3)
        data = torch.utils.data.TensorDataset(torch.from_numpy(x), torch.from_numpy(y))
        yield "a torch DataLoader", {"x": torch.utils.data.DataLoader(data, batch_size=B)}, 2


def test_partial_last_batches_that_would_meet_a_full_one_are_dropped(session):
    """A step would average the ranks' partial and full batches as equals where their
    last batches hold different numbers of samples, or where fit shuffles a PyDataset's
    batches: every rank runs the steps before it."""
    rank, nranks = session
    checks = Checks()
    for what, data, steps in ragged_inputs(rank):
        model = dense_model(rank)
        model.fit(**data, epochs=2, verbose=0)
        iterations = int(keras.ops.convert_to_numpy(model.optimizer.iterations))
        same(checks, iterations, 2 * (3 if nranks == 1 else steps), f"{what}: steps in 2 epochs")
        checks.same_on_all_ranks(weights(model), f"{what}: weights")
    checks.finish()


def test_first_batches_of_other_sizes(session):
    """Another batch size on some rank: a torch DataLoader's (exact) fails fit on every
    rank; a PyDataset's, which may batch by length on purpose, is trained with a
    warning."""
    rank, nranks = session
    if nranks == 1:
        pytest.skip("one rank has no other rank to differ from")
    checks = Checks()
    batch = B if rank == 0 else B // 2
    model = dense_model(rank)
    model.fit(Batches(0, 4 * B, batch=batch), epochs=1, verbose=0)
    checks.same_on_all_ranks(weights(model), "a PyDataset: weights")
    if BACKEND == "torch":
        import torch

        x, y = int_data(4 * B, seed=3)
        data = torch.utils.data.TensorDataset(torch.from_numpy(x), torch.from_numpy(y))
        loader = torch.utils.data.DataLoader(data, batch_size=batch)
        error = checks.raises(mc.MismatchError, model.fit, loader, epochs=1, verbose=0)
        text = str(error)
        checks.true("first batches hold" in text and f"{B}, {B // 2}" in text, text)
    checks.finish()


class StopOnLastRank(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        if mc.get_rank() == mc.get_nranks() - 1 and batch == 1:
            self.model.stop_training = True


def test_a_callback_on_one_rank_stops_every_rank(session):
    rank, nranks = session
    checks = Checks()
    model = dense_model(rank)
    x, y = int_data(5 * B)
    model.fit(x, y, batch_size=B, epochs=3, callbacks=[StopOnLastRank()], verbose=0)
    iterations = int(keras.ops.convert_to_numpy(model.optimizer.iterations))
    same(checks, iterations, 2, "steps before the stop")
    checks.same_on_all_ranks(weights(model), "weights after the stop")
    checks.finish()


def test_models_that_differ_fail_on_every_rank_naming_them(session):
    rank, nranks = session
    if nranks == 1:
        pytest.skip("one rank has no other rank to differ from")
    checks = Checks()
    model = dense_model(0, units=2 + rank)  # rank r: 3 x (2 + r) weights
    x, y = int_data(B)
    y = np.ones((B, 2 + rank), np.float32)
    checks.raises(
        mc.MismatchError,
        model.fit,
        x,
        y,
        batch_size=B,
        verbose=0,
        words=("rank 1",),
    )
    checks.finish()


# case: the last rank's dense_model arguments, and the setting the error names
COMPILED_ON_LAST_RANK = {
    "learning rate": ({"lr": 0.25}, "optimizer's learning_rate: "),
    "metrics": ({"metrics": ["mae"]}, "metrics: "),
    "loss": ({"loss": "mae"}, "loss: "),
}


@pytest.mark.parametrize("case", sorted(COMPILED_ON_LAST_RANK))
def test_a_model_compiled_otherwise_fails_on_every_rank_naming_it(session, case):
    """One model on every rank, compiled otherwise on the last: the ranks would apply the
    same averaged gradients differently and drift apart. fit fails on every rank before
    its first step, naming the setting and the last rank; the weights stay as they were;
    once the last rank compiles alike, fit trains."""
    rank, nranks = session
    if nranks == 1:
        pytest.skip("one rank has no other rank to differ from")
    checks = Checks()
    last, named = COMPILED_ON_LAST_RANK[case]
    model = dense_model(0, **(last if rank == nranks - 1 else {}))
    x, y = int_data(2 * B, seed=rank)
    at_start = weights(model)
    error = checks.raises(
        mc.MismatchError, model.fit, x, y, batch_size=B, verbose=0, words=(named,)
    )
    checks.true(f"rank {nranks - 1}: " in str(error), f"names the last rank: {error}")
    for i, (w, w0) in enumerate(zip(weights(model), at_start)):
        checks.equal(w, w0, f"weight {i} after the refused fit")
    # Alike everywhere (Keras keeps a compile's metrics where the next one names none).
    model.compile(optimizer=keras.optimizers.SGD(0.125), loss="mse", metrics=["mae"])
    model.fit(x, y, batch_size=B, verbose=0)
    checks.same_on_all_ranks(weights(model), "weights after a fit compiled alike")
    checks.finish()


def test_two_models_on_two_teams(session):
    rank, nranks = session
    checks = Checks()
    generator, discriminator = dense_model(rank), dense_model(rank + 10)
    mk.set_team(generator, 0)
    mk.set_team(discriminator, 1)
    x, y = int_data(B)
    before = calls(1)
    for _ in range(2):
        generator.train_on_batch(x, y)
        discriminator.train_on_batch(x * 2, y)
    same(checks, calls(1) - before, 2, "team 1's reductions (the discriminator's updates)")
    checks.same_on_all_ranks(weights(generator), "generator")
    checks.same_on_all_ranks(weights(discriminator), "discriminator")
    checks.finish()


def test_jit_compile_stays_where_the_backend_allows(session):
    rank, nranks = session
    if BACKEND == "torch" and not os.environ.get("ML_COMM_LONG_TESTS"):
        pytest.skip("torch.compile takes a minute here: with ML_COMM_LONG_TESTS=1")
    checks = Checks()
    model = dense_model(rank, jit_compile=True)
    x, y = int_data(2 * B)
    model.fit(x, y, batch_size=B, verbose=0)
    same(checks, bool(model.jit_compile), BACKEND != "tensorflow", "jit_compile after fit")
    checks.same_on_all_ranks(weights(model), "weights")
    checks.finish()


def test_tensorflow_only_on_its_own_backend(session):
    if BACKEND == "tensorflow":
        pytest.skip("the TensorFlow backend imports TensorFlow")
    assert "tensorflow" not in sys.modules
