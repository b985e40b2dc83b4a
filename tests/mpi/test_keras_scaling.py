"""A serial Keras 3 script with only ml_comm.keras.init() and finalize() added scales:
no set_team, no callbacks of ml_comm's.

* fit at N ranks x batch b equals one process x N*b (SGD, Adam, gradient accumulation,
  mixed_float16), the ranks' weights identical, and the team makes exactly one
  reduction per applied update plus one per epoch (metrics) and one per fit call (the
  ranks' step counts): no collective per step for metrics;
* a rank whose float16 gradients overflow makes every rank skip the step and lower the
  loss scale;
* evaluate (and fit's validation_data) on shards of different sizes returns, on every
  rank, the metrics of one process over all shards, printed once;
* uneven shards (101 samples): fit runs the smallest rank's number of steps with a
  warning that names the counts, and equals one process over the kept samples; a custom
  loop with ml_comm.data.equal_steps finishes.

The references are the same models opted out with set_team(model, None), trained by
this process alone on the global batches. See mpi_helpers.py for the rules.
"""

from __future__ import annotations

import contextlib

import keras
import numpy as np
import pytest
import tensorflow as tf
from keras_helpers import keras_ml_comm_session
from mpi_helpers import Checks, comm_world

import ml_comm as mc
import ml_comm.keras as mk
from ml_comm.data import equal_steps, shard

pytestmark = pytest.mark.mpi

with contextlib.suppress(RuntimeError):
    tf.config.threading.set_inter_op_parallelism_threads(2)
    tf.config.threading.set_intra_op_parallelism_threads(1)

D_IN, D_HIDDEN, D_OUT = 5, 3, 2
B = 4
STEPS = 4
EPOCHS = 2
RTOL = 1e-5


@pytest.fixture(scope="module")
def keras_session():
    with keras_ml_comm_session(nthread_per_team=1, nteams=1, msglen=64) as session:
        yield session


def data(rows: int, seed: int, d_out: int = D_OUT):
    rng = np.random.default_rng(seed)
    x = rng.integers(-3, 4, size=(rows, D_IN)).astype(np.float32)
    y = rng.integers(-3, 4, size=(rows, d_out)).astype(np.float32)
    return x, y


def rows_of(rank: int, nranks: int, steps: int, b: int = B) -> np.ndarray:
    """Rank r's rows of every global batch of N*b rows."""
    return np.concatenate(
        [
            np.arange(s * nranks * b + rank * b, s * nranks * b + (rank + 1) * b)
            for s in range(steps)
        ]
    )


def make_model(seed: int, optimizer, accumulate=None) -> keras.Model:
    keras.utils.set_random_seed(seed)
    model = keras.Sequential(
        [keras.Input((D_IN,)), keras.layers.Dense(D_HIDDEN, activation="tanh"),
         keras.layers.Dense(D_OUT)]
    )  # fmt: skip
    kind, lr = optimizer
    cls = {"sgd": keras.optimizers.SGD, "adam": keras.optimizers.Adam}[kind]
    opt = cls(lr, gradient_accumulation_steps=accumulate)
    if keras.mixed_precision.global_policy().name == "mixed_float16":
        # compile would wrap it with the default initial scale (2^15), which overflows
        # float16 on the first steps of the per-rank batch but not of the global one,
        # so the two runs would skip different steps.
        opt = keras.optimizers.LossScaleOptimizer(opt, initial_scale=2.0**8)
    model.compile(optimizer=opt, loss="mse", metrics=["mae"])
    return model


def rank0_weights(model) -> list:
    return comm_world().bcast(model.get_weights() if comm_world().rank == 0 else None, root=0)


def reference(optimizer, weights, accumulate=None) -> keras.Model:
    model = make_model(12345, optimizer, accumulate)
    mk.set_team(model, None)  # opted out: trains on this process alone
    model.set_weights(weights)
    return model


def check_close(c: Checks, got, want, tag: str, rtol: float = RTOL) -> None:
    worst = 0.0
    for i, (w, ref) in enumerate(zip(got, want)):
        err = float(np.max(np.abs(np.asarray(w, np.float64) - ref)))
        scale = float(np.max(np.abs(ref)))
        worst = max(worst, err / scale if scale else err)
        c.true(err <= rtol * scale, f"{tag}: weight {i} off by {err:.3g} (max |ref| {scale:.3g})")
    if comm_world().rank == 0:
        print(f"{tag}: largest relative difference from one process {worst:.3g}")


CASES = {
    "sgd": (("sgd", 0.05), None, None),
    "adam": (("adam", 0.01), None, None),
    "sgd_accumulate2": (("sgd", 0.05), 2, None),
    "adam_mixed_float16": (("adam", 0.01), None, "mixed_float16"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_serial_script_equals_global_batch(keras_session, case):
    c = Checks()
    r, n = keras_session
    optimizer, accumulate, policy = CASES[case]
    # float16 activations: N batches of b round differently from one of N*b (measured
    # 6e-5 at 2 ranks); the bound is float16's epsilon, 2^-10.
    rtol = RTOL if policy is None else 2.0**-10
    keras.mixed_precision.set_global_policy(policy or "float32")
    try:
        x, y = data(STEPS * n * B, seed=5)
        model = make_model(r, optimizer, accumulate)  # different weights on every rank
        initial = rank0_weights(model)
        xs, ys = x[rows_of(r, n, STEPS)], y[rows_of(r, n, STEPS)]
        before = mc.team_stats(0)["calls"]
        history = model.fit(xs, ys, batch_size=B, epochs=EPOCHS, shuffle=False, verbose=0)
        calls = mc.team_stats(0)["calls"] - before
        ref = reference(optimizer, initial, accumulate)
        ref_history = ref.fit(x, y, batch_size=n * B, epochs=EPOCHS, shuffle=False, verbose=0)
        c.same_on_all_ranks(model.get_weights(), f"{case}: weights after fit")
        check_close(c, model.get_weights(), ref.get_weights(), case, rtol)
        for key in ("loss", "mae"):
            got, want = np.array(history.history[key]), np.array(ref_history.history[key])
            c.true(
                np.allclose(got, want, rtol=max(rtol, 1e-6)),
                f"{case}: epoch {key} {got} but one process over all data has {want}",
            )
        updates = STEPS * EPOCHS // (accumulate or 1)
        # The first fit: 1 allgather checking the ranks hold one model, 1 broadcast of the
        # weights; every fit: 1 allreduce of the step counts, then per epoch 1 of the
        # metric states; per update 1 reduction. One rank: the broadcast only (the sums
        # and averages over one rank are their inputs).
        want = 1 + 1 + 1 + EPOCHS + updates if n > 1 else 1
        c.true(
            calls == want,
            f"{case}: team 0 made {calls} collectives in fit, want {want} "
            f"({updates} gradient reductions for {STEPS * EPOCHS} steps)",
        )
    finally:
        keras.mixed_precision.set_global_policy("float32")
    c.finish()


def test_overflow_on_one_rank_skips_the_step_everywhere(keras_session):
    c = Checks()
    r, n = keras_session
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        model = make_model(r, ("sgd", 0.05))
        c.true(isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer), "no LSO")
        x, y = data(B, seed=6)
        start = rank0_weights(model)
        scale = float(model.optimizer.initial_scale)
        big = 1e4 if r == n - 1 else 1.0  # the last rank's scaled gradients overflow
        model.train_on_batch(x * big, y * big)
        c.same_on_all_ranks(model.get_weights(), "weights after the overflowing step")
        check_close(c, model.get_weights(), start, "the overflowing step was applied", 0.0)
        got = float(model.optimizer.dynamic_scale.numpy())
        c.true(got == scale / 2, f"rank {r}: loss scale {got}, want {scale / 2}")
        model.train_on_batch(x, y)  # a finite step is applied, alike everywhere
        c.same_on_all_ranks(model.get_weights(), "weights after a finite step")
        c.true(
            any(not np.array_equal(a, b) for a, b in zip(model.get_weights(), start)),
            "the finite step changed nothing",
        )
    finally:
        keras.mixed_precision.set_global_policy("float32")
    c.finish()


def classifier(seed: int, lr: float = 0.0) -> keras.Model:
    keras.utils.set_random_seed(seed)
    model = keras.Sequential([keras.Input((D_IN,)), keras.layers.Dense(3, activation="softmax")])
    model.compile(
        optimizer=keras.optimizers.SGD(lr),
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
    )
    return model


def uneven_shards(nranks: int, seed: int):
    """Shards of 5, 8, 11, ... rows (rank r: 5 + 3r), and their union."""
    sizes = [5 + 3 * k for k in range(nranks)]
    rng = np.random.default_rng(seed)
    x = rng.integers(-3, 4, size=(sum(sizes), D_IN)).astype(np.float32)
    labels = rng.integers(0, 3, size=sum(sizes)).astype(np.int64)
    bounds = np.cumsum([0, *sizes])
    return x, labels, [slice(bounds[k], bounds[k + 1]) for k in range(nranks)]


def test_evaluate_and_validation_on_uneven_shards(keras_session, capsys):
    c = Checks()
    r, n = keras_session
    x, labels, shards = uneven_shards(n, seed=8)
    mine = shards[r]
    model = classifier(r)  # lr 0: fit leaves the weights alone, validation sees them
    weights = rank0_weights(model)
    ref = classifier(12345)
    mk.set_team(ref, None)
    ref.set_weights(weights)
    want = ref.evaluate(x, labels, batch_size=len(x), verbose=0, return_dict=True)
    capsys.readouterr()
    got = model.evaluate(x[mine], labels[mine], batch_size=3, verbose=1, return_dict=True)
    printed = capsys.readouterr().out
    as_list = model.evaluate(x[mine], labels[mine], batch_size=4, verbose=0)
    for key in ("loss", "accuracy"):
        c.true(
            abs(got[key] - want[key]) <= 1e-6 * max(1.0, abs(want[key])),
            f"evaluate: {key} {got[key]} on rank {r}, one process over all shards {want[key]}",
        )
    c.true(
        np.allclose(as_list, [want["loss"], want["accuracy"]], rtol=1e-6),
        f"evaluate without return_dict: {as_list}",
    )
    if r == 0:
        c.true(f"accuracy: {want['accuracy']:.4f}" in printed, f"rank 0 printed {printed!r}")
    else:
        c.true(printed == "", f"rank {r} printed {printed!r}")
    train_x, train_y = x[: 2 * n], labels[: 2 * n]  # 2 rows per rank
    history = model.fit(
        train_x[2 * r : 2 * r + 2], train_y[2 * r : 2 * r + 2], batch_size=2, epochs=1,
        verbose=0, validation_data=(x[mine], labels[mine]),
    )  # fmt: skip
    for key in ("loss", "accuracy"):
        value = history.history[f"val_{key}"][0]
        c.true(
            abs(value - want[key]) <= 1e-6 * max(1.0, abs(want[key])),
            f"fit: val_{key} {value} on rank {r}, one process over all shards {want[key]}",
        )
    predictions = model.predict(x[mine], verbose=0)
    gathered = mk.gather(predictions)
    if r == 0:
        c.true(
            gathered.shape == (len(x), 3) and np.allclose(gathered, ref.predict(x, verbose=0)),
            "gather(predict) on rank 0 is not one process's predict over all shards",
        )
    c.finish()


def test_uneven_fit_runs_the_fewest_steps(keras_session, capfd):
    """101 samples split over the ranks (51/50 at 2 ranks; 26/25/25/25 at 4): every rank
    keeps the shortest shard's count, so the ranks run the same steps with the same batch
    sizes, and the training equals one process over the kept samples."""
    c = Checks()
    r, n = keras_session
    b = 5
    x, y = data(101, seed=9)
    parts = np.array_split(np.arange(101), n)
    keep = min(len(p) for p in parts)
    steps = [-(-len(p) // b) for p in parts]
    fewest = -(-keep // b)
    model = make_model(r, ("sgd", 0.05))
    initial = rank0_weights(model)
    capfd.readouterr()
    model.fit(x[parts[r]], y[parts[r]], batch_size=b, epochs=2, shuffle=False, verbose=0)
    err = capfd.readouterr().err
    c.same_on_all_ranks(model.get_weights(), "uneven fit: weights")
    sizes = [len(p) for p in parts]
    if r == 0 and len(set(sizes)) > 1:
        want = (
            f"uneven data: ranks 0..{n - 1} have {', '.join(map(str, sizes))} training samples "
            f"({', '.join(map(str, steps))} steps of {b}); every rank trains on {keep} per epoch "
            f"(dropping {', '.join(str(s - keep) for s in sizes)}), so that every rank runs "
            f"{fewest} steps per epoch"
        )
        c.true(want in err, f"rank 0's warning should say {want!r}: {err!r}")
    if len(set(sizes)) == 1:
        c.true("uneven data" not in err, f"a warning for even data: {err!r}")
    # One process over the kept samples: global batch s is every rank's batch s.
    kept = [p[:keep] for p in parts]
    order = np.concatenate(
        [np.concatenate([kept[k][s * b : (s + 1) * b] for k in range(n)]) for s in range(fewest)]
    )
    ref = reference(("sgd", 0.05), initial)
    # The reference's last global batch holds every rank's partial batch: the same rows.
    ref.fit(x[order], y[order], batch_size=n * b, epochs=2, shuffle=False, verbose=0)
    check_close(c, model.get_weights(), ref.get_weights(), "uneven fit")
    c.finish()


def test_custom_loop_with_equal_steps(keras_session, capfd):
    c = Checks()
    r, n = keras_session
    x, y = data(101, seed=10)
    model = make_model(r, ("sgd", 0.05))
    dataset = shard(tf.data.Dataset.from_tensor_slices((x, y))).batch(10)

    @tf.function
    def step(xb, yb):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(xb) - yb))
        grads = tape.gradient(loss, model.trainable_variables)
        model.optimizer.apply(grads, model.trainable_variables)

    capfd.readouterr()
    ran = 0
    for _ in range(2):
        for xb, yb in equal_steps(dataset):
            step(xb, yb)
            ran += 1
    err = capfd.readouterr().err
    counts = [-(-len(range(k, 101, n)) // 10) for k in range(n)]
    c.true(ran == 2 * min(counts), f"rank {r} ran {ran} steps, want {2 * min(counts)}")
    if r == 0 and len(set(counts)) > 1:
        c.true(", ".join(map(str, counts)) in err, f"no warning naming {counts}: {err!r}")
    c.same_on_all_ranks(model.get_weights(), "custom loop: weights")
    c.finish()


def test_model_compiled_and_trained_before_init(keras_session):
    """A model compiled, and even trained (its train step traced), before init: after
    init its fit is averaged all the same."""
    c = Checks()
    r, n = keras_session
    mk.finalize()
    try:
        model = make_model(r, ("sgd", 0.05))
        x, y = data(STEPS * n * B, seed=11)
        model.fit(x[:B], y[:B], batch_size=B, epochs=1, verbose=0)  # serial, before init
    finally:
        comm_world().barrier()
        mk.init(nthread_per_team=1, nteams=1, msglen=64)
    initial = rank0_weights(model)
    xs, ys = x[rows_of(r, n, STEPS)], y[rows_of(r, n, STEPS)]
    model.fit(xs, ys, batch_size=B, epochs=1, shuffle=False, verbose=0)
    ref = reference(("sgd", 0.05), initial)
    ref.fit(x, y, batch_size=n * B, epochs=1, shuffle=False, verbose=0)
    c.same_on_all_ranks(model.get_weights(), "compiled before init: weights")
    check_close(c, model.get_weights(), ref.get_weights(), "compiled before init")
    c.finish()


@pytest.mark.parametrize("policy", ["float32", "mixed_float16"])
def test_opted_out_model_trains_alone(keras_session, policy):
    """set_team(model, None): no collective on team 0 (a LossScaleOptimizer's inner
    apply included) and weights of its own on every rank."""
    c = Checks()
    r, n = keras_session
    keras.mixed_precision.set_global_policy(policy)
    try:
        model = make_model(r, ("sgd", 0.05))
        mk.set_team(model, None)
        c.true(mk.get_team(model) is None, "get_team of an opted-out model")
        before = mc.team_stats(0)["calls"]
        x, y = data(2 * B, seed=12 + r)  # each rank its own data and weights
        model.fit(x, y, batch_size=B, epochs=1, verbose=0)
        used = mc.team_stats(0)["calls"] - before
    finally:
        keras.mixed_precision.set_global_policy("float32")
    c.true(used == 0, f"{policy}: an opted-out model made {used} collectives on team 0")
    digests = comm_world().allgather(tuple(w.tobytes() for w in model.get_weights()))
    c.true(len(set(digests)) == n, f"{policy}: opted-out models should differ on every rank")
    c.finish()


def embedding_model(seed: int) -> keras.Model:
    keras.utils.set_random_seed(seed)
    model = keras.Sequential(
        [keras.Input((3,), dtype="int32"), keras.layers.Embedding(10, 4),
         keras.layers.Flatten(), keras.layers.Dense(D_OUT)]
    )  # fmt: skip
    model.compile(optimizer=keras.optimizers.Adam(0.05), loss="mse")
    return model


def test_embedding_with_adam_gets_sparse_gradients(keras_session):
    """An Embedding's gradient reaches Adam as IndexedSlices of the global batch (Adam
    then updates only the rows looked up), as in one process: within 1e-6."""
    c = Checks()
    r, n = keras_session
    rng = np.random.default_rng(21)
    x = rng.integers(0, 6, size=(STEPS * n * B, 3)).astype(np.int32)  # rows 6..9 unused
    y = rng.integers(-3, 4, size=(STEPS * n * B, D_OUT)).astype(np.float32)
    model = embedding_model(r)
    initial = rank0_weights(model)
    rows = rows_of(r, n, STEPS)
    model.fit(x[rows], y[rows], batch_size=B, epochs=EPOCHS, shuffle=False, verbose=0)
    ref = embedding_model(12345)
    mk.set_team(ref, None)
    ref.set_weights(initial)
    ref.fit(x, y, batch_size=n * B, epochs=EPOCHS, shuffle=False, verbose=0)
    c.same_on_all_ranks(model.get_weights(), "embedding: weights after fit")
    for i, (w, want) in enumerate(zip(model.get_weights(), ref.get_weights())):
        err = float(np.max(np.abs(w - want)))
        c.true(err <= 1e-6, f"embedding: weight {i} differs from one process by {err:.3g}")
    c.finish()


def test_sparse_gradients_of_different_lengths_are_gathered(keras_session):
    """Rank r's IndexedSlices holds r + 1 slices (rows 0..r, values N * (r + 1)): the
    optimizer gets every rank's slices divided by N, so SGD(1) lowers row j by the sum of
    r + 1 over the ranks r >= j."""
    c = Checks()
    r, n = keras_session
    var = keras.Variable(np.zeros((n + 1, 2), np.float32))
    grad = tf.IndexedSlices(
        tf.fill([r + 1, 2], float(n * (r + 1))),
        tf.range(r + 1, dtype=tf.int64),
        tf.constant([n + 1, 2], tf.int64),
    )
    keras.optimizers.SGD(1.0).apply([grad], [var])
    want = [[0.0 - sum(q + 1 for q in range(j, n))] * 2 for j in range(n + 1)]  # row n: +0
    c.equal(np.asarray(var), np.array(want, np.float32), "rows after the sparse update")
    c.finish()


@pytest.mark.parametrize("mid_epoch", [True, False])
def test_a_callback_stopping_one_rank_stops_every_rank(keras_session, mid_epoch):
    """TerminateOnNaN seeing a NaN loss on the last rank only (mid_epoch), or a callback
    that stops the last rank at the end of the first epoch: every rank stops at the same
    step, fit returns normally, and the team goes on working."""
    c = Checks()
    r, n = keras_session
    x, y = data(STEPS * B, seed=30 + r)
    model = make_model(r, ("sgd", 0.05))
    if mid_epoch:
        if r == n - 1:
            x[2 * B] = np.nan  # the third batch's loss is NaN on this rank alone
        # On that rank alone: the ranks agree on whether to agree after each batch.
        callbacks = [keras.callbacks.TerminateOnNaN()] if r == n - 1 else []
    else:

        class StopHere(keras.callbacks.Callback):
            def on_epoch_end(self, epoch, logs=None):
                self.model.stop_training = r == n - 1

        callbacks = [StopHere()] if r == n - 1 else []
    model.fit(x, y, batch_size=B, epochs=EPOCHS, shuffle=False, verbose=0, callbacks=callbacks)
    steps = int(model.optimizer.iterations.numpy())
    want = 3 if mid_epoch else STEPS
    c.true(steps == want, f"stopped after {steps} steps, want {want}")
    c.true(mc.average(np.full(3, float(r))).tolist() == [(n - 1) / 2] * 3, "team after fit")
    c.finish()


def test_predict_first_uses_rank0_weights(keras_session):
    """predict before any fit or evaluate: every rank predicts with rank 0's weights."""
    c = Checks()
    r, n = keras_session
    model = make_model(40 + r, ("sgd", 0.05))  # different weights on every rank
    initial = rank0_weights(model)
    x, _ = data(2 * B, seed=41)
    got = model.predict(x, batch_size=B, verbose=0)
    ref = reference(("sgd", 0.05), initial)
    want = ref.predict(x, batch_size=B, verbose=0)
    c.true(np.array_equal(got, want), "predict did not use rank 0's weights")
    c.finish()


def test_evaluate_list_in_keras_order(keras_session):
    """evaluate(return_dict=False) on a two-output model: the list in Keras's own order
    (Model._flatten_metrics_in_order, the private name fit.py calls)."""
    c = Checks()
    r, n = keras_session
    keras.utils.set_random_seed(50)
    inputs = keras.Input((D_IN,))
    cls = keras.layers.Dense(3, activation="softmax", name="cls")(inputs)
    reg = keras.layers.Dense(1, name="reg")(inputs)
    model = keras.Model(inputs, {"cls": cls, "reg": reg})
    model.compile(
        optimizer="sgd",
        loss={"cls": "sparse_categorical_crossentropy", "reg": "mse"},
        metrics={"cls": ["accuracy"], "reg": ["mae"]},
    )
    rng = np.random.default_rng(51)
    x = rng.integers(-3, 4, size=(n * 2 * B, D_IN)).astype(np.float32)
    y = {"cls": rng.integers(0, 3, size=(n * 2 * B,)), "reg": x[:, :1] * 2}
    mine = rows_of(r, n, 2)
    as_dict = model.evaluate(
        x[mine], {k: v[mine] for k, v in y.items()}, verbose=0, return_dict=True
    )
    as_list = model.evaluate(x[mine], {k: v[mine] for k, v in y.items()}, verbose=0)
    ref = keras.Model(inputs, {"cls": cls, "reg": reg})
    ref.compile(optimizer="sgd", loss=model.loss, metrics={"cls": ["accuracy"], "reg": ["mae"]})
    mk.set_team(ref, None)
    ref_dict = ref.evaluate(x, y, verbose=0, return_dict=True, batch_size=n * B)
    ref_list = ref.evaluate(x, y, verbose=0, batch_size=n * B)
    order = ["loss", "cls_loss", "reg_loss", "cls_accuracy", "reg_mae"]
    c.true(ref_list == [ref_dict[k] for k in order], f"Keras's own order: {ref_dict} {ref_list}")
    want = [as_dict[k] for k in order]
    c.true(as_list == want, f"evaluate list {as_list}, want {want} ({order})")
    c.finish()


def test_file_writing_callbacks_write_on_rank0_only(keras_session, tmp_path):
    c = Checks()
    r, n = keras_session
    model = make_model(60, ("sgd", 0.05))
    x, y = data(2 * B, seed=61 + r)
    path = tmp_path / f"log.rank{r}.csv"  # each rank names its own file: only rank 0's exists
    model.fit(
        x,
        y,
        batch_size=B,
        epochs=EPOCHS,
        verbose=0,
        callbacks=[keras.callbacks.CSVLogger(str(path))],
    )
    c.true(path.exists() == (r == 0), f"rank {r}: CSVLogger wrote {path.exists()}")
    if r == 0:
        c.true(len(path.read_text().splitlines()) == 1 + EPOCHS, "CSVLogger rows")
    c.finish()


def test_validation_data_wins_over_validation_split_on_uneven_arrays(keras_session):
    """As in Keras, validation_data makes validation_split ignored: every training sample
    trains (cut to the fewest, 2 * B here), none is split off."""
    c = Checks()
    r, n = keras_session
    model = make_model(70, ("sgd", 0.05))
    x, y = data(2 * B + r, seed=71 + r)  # uneven: rank r has 2 * B + r samples
    vx, vy = data(B, seed=72)
    model.fit(x, y, batch_size=B, epochs=1, verbose=0, shuffle=False,
              validation_data=(vx, vy), validation_split=0.5)  # fmt: skip
    steps = int(model.optimizer.iterations.numpy())
    c.true(steps == 2, f"{steps} training steps, want 2 (no split taken)")
    c.finish()


class Batches(keras.utils.PyDataset):
    def __init__(self, x, y, batch: int):
        super().__init__()
        self.x, self.y, self.batch = x, y, batch

    def __len__(self):
        return len(self.x) // self.batch

    def __getitem__(self, i):
        rows = slice(i * self.batch, (i + 1) * self.batch)
        return self.x[rows], self.y[rows]


def test_pydataset_of_different_lengths_runs_the_fewest_batches(keras_session):
    c = Checks()
    r, n = keras_session
    model = make_model(80, ("sgd", 0.05))
    x, y = data((3 + r) * B, seed=81 + r)  # rank r: 3 + r batches
    model.fit(Batches(x, y, B), epochs=EPOCHS, verbose=0)
    steps = int(model.optimizer.iterations.numpy())
    c.true(steps == 3 * EPOCHS, f"{steps} training steps, want {3 * EPOCHS}")
    c.finish()


class AccumulatorsAt(keras.callbacks.Callback):
    """Records this rank's gradient accumulators at the end of batch `batch` of each epoch."""

    def __init__(self, batch: int):
        super().__init__()
        self.batch = batch
        self.seen: list[list[np.ndarray]] = []

    def on_train_batch_end(self, batch, logs=None):
        if batch == self.batch:
            accumulators = self.model.optimizer._accumulated_gradients
            self.seen.append([np.array(a.numpy()) for a in accumulators])


@pytest.mark.parametrize("saver", ["checkpoint", "backup"])
def test_mid_epoch_saves_hold_one_accumulator_state(keras_session, tmp_path, saver):
    """gradient_accumulation_steps=2 and a save every 3 batches (an integer save_freq):
    at the save, each rank holds its own partial sum of one micro-step; ml_comm averages
    the ranks' accumulators first, so that rank 0's file holds a state every rank can
    resume from (the next update, the average of gradient + accumulator over the ranks,
    is unchanged by it)."""
    c = Checks()
    r, n = keras_session
    model = make_model(70, ("sgd", 0.05), accumulate=2)
    x, y = data(3 * B, seed=71 + r)  # 3 batches per epoch on every rank
    shared = shared_dir(tmp_path, r)
    if saver == "checkpoint":
        save = keras.callbacks.ModelCheckpoint(str(shared / "mid.keras"), save_freq=3)
    else:
        save = keras.callbacks.BackupAndRestore(str(shared / "backup"), save_freq=3)
    record = AccumulatorsAt(2)
    model.fit(x, y, batch_size=B, epochs=1, verbose=0, shuffle=False, callbacks=[save, record])
    mine = record.seen[0]
    c.true(any(np.any(a != 0) for a in mine), "the save came mid-cycle (a partial sum)")
    everyone = comm_world().allgather(mine)
    for q in range(n):
        for i, (a, b) in enumerate(zip(everyone[0], everyone[q])):
            c.equal(b, a, f"accumulator {i} at the save: rank {q} against rank 0")
    c.finish()


def shared_dir(tmp_path, rank: int):
    """Rank 0's temporary directory on every rank (rank 0 writes, the ranks share a disk)."""
    return type(tmp_path)(comm_world().bcast(str(tmp_path) if rank == 0 else None, root=0))


def test_share_statistics_averages_a_custom_loops_partial_sums(keras_session):
    """A custom loop mid-way through a gradient-accumulation cycle: each rank holds its own
    partial sum; mk.share_statistics, which the docs have a custom loop call before rank 0
    saves, leaves every rank their average, and at a cycle's start changes nothing."""
    c = Checks()
    r, n = keras_session
    model = make_model(90, ("sgd", 0.05), accumulate=2)
    x, y = data(2 * B, seed=91 + r)
    model.train_on_batch(x[:B], y[:B])  # one micro-step of two: each rank's own sum

    def accumulators():
        return [np.array(a.numpy()) for a in model.optimizer._accumulated_gradients]

    before = comm_world().allgather(accumulators())
    c.true(n == 1 or any(np.any(a != b) for a, b in zip(*before[:2])), "the sums differ")
    mk.share_statistics(model)
    after = accumulators()
    for i, mine in enumerate(after):
        want = np.mean([rank[i].astype(np.float64) for rank in before], axis=0)
        c.true(np.allclose(mine, want, rtol=1e-5, atol=1e-6), f"accumulator {i}, averaged")
    c.same_on_all_ranks(after, "the accumulators")
    model.train_on_batch(x[B:], y[B:])  # the cycle's end: zeros, which stay zeros
    zeros = accumulators()
    mk.share_statistics(model)
    c.same_on_all_ranks(model.get_weights(), "the weights")
    for i, (a, b) in enumerate(zip(zeros, accumulators())):
        c.equal(b, a, f"accumulator {i} at a cycle's start")
    c.finish()
